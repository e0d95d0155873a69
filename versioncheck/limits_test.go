package versioncheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
)

// LimitsHelperEnv makes the test binary act as a validation child that
// has just limited itself (TestSecurityChildLimitsItself): TestMain runs
// LimitsHelper instead of the tests.
const LimitsHelperEnv = "MP_TEST_VALIDATION_LIMITS_HELPER"

// LimitsHelper limits itself as RunChild does, then reports its limits
// and what it may still do.
func LimitsHelper() int {
	if err := limitSelf(ChildLimits{MemoryMB: 2048, CPUSeconds: 7, MaxProcesses: 99}); err != nil {
		fmt.Println("limit:", err)
		return 1
	}
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		fmt.Println("limits:", err)
		return 1
	}
	fmt.Print(string(b))
	_, err = syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	fmt.Println("socket:", errName(err))
	err = syscall.Exec("/bin/true", []string{"true"}, nil)
	fmt.Println("exec:", errName(err))
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "NoNewPrivs:") || strings.HasPrefix(l, "Seccomp:") {
			fmt.Println(strings.Join(strings.Fields(l), " "))
		}
	}
	return 0
}

func errName(err error) string {
	if errors.Is(err, syscall.EPERM) {
		return "EPERM"
	}
	return fmt.Sprint(err)
}

// TestSecurityChildLimitsItself: the validation child ran under RLIMIT_AS
// only. It now sets, before reading any file of the version, limits on
// open files, processes, CPU time, file size and core dumps, no new
// privileges and a seccomp filter under which it can neither open a
// socket (a Unix socket on the file system is reachable from any network
// namespace) nor run another program.
func TestSecurityChildLimitsItself(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), LimitsHelperEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out.String())
	}
	got := out.String()
	want := []string{
		"Max address space         2147483648           2147483648           bytes",
		"Max open files            128                  128                  files",
		"Max processes             99                   99                   processes",
		"Max cpu time              7                    7                    seconds",
		"Max file size             1048576              1048576              bytes",
		"Max core file size        0                    0                    bytes",
		"NoNewPrivs: 1",
	}
	if goruntime.GOARCH == "amd64" {
		want = append(want, "socket: EPERM", "exec: EPERM", "Seccomp: 2")
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the limited child reports\n%s\nwant a line %q", got, w)
		}
	}
}
