package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CgroupNone turns the cgroup memory limit off (Config.Cgroup): runtimes
// are held to their memory by RLIMIT_AS alone.
const CgroupNone = "none"

// cgroupAutoName is the cgroup the driver makes for its replicas' leaves
// at the root of the cgroup v2 hierarchy, when the agent itself runs in
// the root cgroup (Config.Cgroup empty).
const cgroupAutoName = "modelplane-replicas"

// memoryLimiter holds a replica's runtime to the spec's MemoryMB: a
// cgroup v2 leaf per replica (memory.max, no swap, the whole group killed
// on OOM) when the driver may make one, else RLIMIT_AS set on the process
// right after it starts.
type memoryLimiter struct {
	// parent is the cgroup v2 directory the leaves are made in, with the
	// memory controller enabled for its children; "" when there is none.
	parent string
	// why is why there is none, for the log.
	why string
}

// newMemoryLimiter finds or makes the parent of the replicas' cgroups:
// setting names a delegated cgroup v2 directory, or is "" (the driver's
// own under the root, when the agent runs in the root cgroup) or
// CgroupNone.
func newMemoryLimiter(setting string) memoryLimiter {
	if setting == CgroupNone {
		return memoryLimiter{why: "turned off (" + CgroupNone + ")"}
	}
	parent := setting
	if parent == "" {
		mount, self, err := cgroup2Self()
		if err != nil {
			return memoryLimiter{why: err.Error()}
		}
		if self != "/" {
			return memoryLimiter{why: fmt.Sprintf("the agent runs in cgroup %s, not the root: delegate a cgroup v2 directory to it (--cgroup)", self)}
		}
		if err := enableMemory(mount); err != nil {
			return memoryLimiter{why: err.Error()}
		}
		parent = filepath.Join(mount, cgroupAutoName)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return memoryLimiter{why: fmt.Sprintf("make cgroup %s: %v", parent, err)}
	}
	if err := enableMemory(parent); err != nil {
		return memoryLimiter{why: err.Error()}
	}
	return memoryLimiter{parent: parent}
}

// cgroup2Self returns where the cgroup v2 hierarchy is mounted and this
// process's cgroup in it.
func cgroup2Self() (mount, self string, err error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(post); ok && len(f) > 0 && f[0] == "cgroup2" {
			if pf := strings.Fields(pre); len(pf) > 4 {
				mount = pf[4]
				break
			}
		}
	}
	if mount == "" {
		return "", "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	b, err = os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return mount, p, nil
		}
	}
	return "", "", errors.New("this process has no cgroup v2 cgroup")
}

// enableMemory lets dir's children have the memory controller.
func enableMemory(dir string) error {
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if !containsWord(string(ctrl), "memory") {
		return fmt.Errorf("cgroup %s has no memory controller (controllers: %q)", dir, strings.TrimSpace(string(ctrl)))
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		return fmt.Errorf("enable the memory controller under %s: %w", dir, err)
	}
	return nil
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// leaf makes (or reuses) the replica's cgroup with its limit and returns
// it open, for the child to start in (SysProcAttr.CgroupFD), and its
// oom_kill count so far.
func (m memoryLimiter) leaf(id string, mb int) (*os.File, int64, error) {
	dir := filepath.Join(m.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(int64(mb)<<20, 10)), 0); err != nil {
		return nil, 0, err
	}
	// Without swap the limit is the limit; a kernel without swap
	// accounting has no such file.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	_ = os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0)
	f, err := os.Open(dir)
	if err != nil {
		return nil, 0, err
	}
	return f, oomKills(dir), nil
}

// remove removes the replica's cgroup, once its processes are gone.
func (m memoryLimiter) remove(id string) {
	if m.parent != "" {
		_ = os.Remove(filepath.Join(m.parent, id))
	}
}

// oomKills is the cgroup's oom_kill count (memory.events).
func oomKills(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// addressSpaceHeadroomMB is what RLIMIT_AS allows beyond a replica's
// memory: address space is not memory in use, and a runtime reserves much
// it never touches (the Go runtime's arenas and page summaries, thread
// stacks, ONNX Runtime's library and arenas). The modelplane binary does
// not start under 512 MiB of address space and does not load ONNX models
// under about 1536 MiB (measured; versioncheck.MinMemoryMB), so the limit
// is memory_mb plus this: loose for a small replica, but a runaway (rows
// × classes) is stopped within it.
const addressSpaceHeadroomMB = 2048

// outOfMemoryLines are what runtimes print when an allocation fails
// under RLIMIT_AS: Go, Python, C++ (libstdc++), C and ONNX Runtime.
var outOfMemoryLines = []string{
	"runtime: out of memory", "MemoryError", "std::bad_alloc", "Cannot allocate memory", "cannot allocate memory",
	"out of memory", "Failed to allocate memory",
}

// exceededMemory reports whether the replica's process p ended for its
// memory limit: the cgroup killed it (its oom_kill count grew), or, under
// RLIMIT_AS, its log's last lines say an allocation failed.
func (r *replica) exceededMemory(p *proc) bool {
	if r.spec.MemoryMB <= 0 {
		return false
	}
	if p.cgroup {
		return oomKills(filepath.Join(r.d.mem.parent, r.spec.ID)) > p.oomBefore
	}
	f, err := os.Open(r.d.logPath(r.spec.ID))
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	const window = 64 << 10 // a Go runtime's fatal error is followed by every goroutine's stack
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return false
	}
	// Only what this process wrote: after the agent's last start line.
	if i := bytes.LastIndex(buf, []byte("--- modelplane agent: starting")); i >= 0 {
		buf = buf[i:]
	}
	for _, s := range outOfMemoryLines {
		if bytes.Contains(buf, []byte(s)) {
			return true
		}
	}
	return false
}

// execLimitedArg, as a binary's first argument, makes a program that
// imports this package (the modelplane binary, which the driver's Self
// is) set RLIMIT_AS on itself and exec a runtime: the driver cannot set a
// limit on a runtime of another user once it runs (prlimit needs
// CAP_SYS_RESOURCE, which containers often drop), and Go starts no child
// with limits of its own, so the limit is set by the child on itself,
// before it becomes the runtime. Arguments: the descriptor the binary was
// started from (closed at the exec), the limit in MiB, the runtime's argv.
const execLimitedArg = "__modelplane-exec-limited"

func init() {
	if len(os.Args) > 1 && os.Args[1] == execLimitedArg {
		os.Exit(execLimited(os.Args[2:]))
	}
}

// execLimited is the trampoline: it returns only on an error.
func execLimited(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "modelplane exec-limited: want FD MIB ARGV...")
		return 2
	}
	fd, err1 := strconv.Atoi(args[0])
	mb, err2 := strconv.Atoi(args[1])
	if err := errors.Join(err1, err2); err != nil || mb <= 0 {
		fmt.Fprintln(os.Stderr, "modelplane exec-limited:", err)
		return 2
	}
	unix.CloseOnExec(fd)
	l := unix.Rlimit{Cur: uint64(mb) << 20, Max: uint64(mb) << 20}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &l); err != nil {
		fmt.Fprintln(os.Stderr, "modelplane exec-limited: RLIMIT_AS:", err)
		return 1
	}
	path, err := exec.LookPath(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "modelplane exec-limited:", err)
		return 127
	}
	err = unix.Exec(path, args[2:], os.Environ())
	fmt.Fprintln(os.Stderr, "modelplane exec-limited: exec", path+":", err)
	return 126
}

// throughLimit makes cmd start the agent's own binary (self, open as
// bin) as the trampoline that limits itself to mb and execs cmd's program.
func throughLimit(cmd *exec.Cmd, bin *os.File, mb int) {
	const fd = 3 // bin is cmd's first ExtraFiles entry
	argv := append([]string{fmt.Sprintf("/proc/self/fd/%d", fd), execLimitedArg, strconv.Itoa(fd), strconv.Itoa(mb), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = argv[0], argv
	cmd.ExtraFiles = append([]*os.File{bin}, cmd.ExtraFiles...)
}
