package versioncheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/db"
	"modelplane/registry"
	"modelplane/runtime"
	"modelplane/serveapi"
	"modelplane/service"
)

// Defaults of Config.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultMemoryMB = 4096
	DefaultInterval = 2 * time.Second
)

// MinMemoryMB is the least address space a validation child starts in: the
// Go runtime's own reservations fail below it ("cannot allocate memory"
// under 1536 MiB, measured with `modelplane runtime validate --memory-mb`
// on linux/amd64), so a lower limit would make every version invalid.
const MinMemoryMB = 2048

// Config configures a Validator.
type Config struct {
	Pool  *pgxpool.Pool
	Store *artifact.Store
	// Binary is the modelplane binary whose `runtime validate` runs a
	// version: the control plane's own (os.Executable).
	Binary string
	// Timeout bounds one child, from start to its report; MemoryMB is the
	// address space it may take.
	Timeout  time.Duration
	MemoryMB int64
	// WorkDir holds the model directories laid out for children (default
	// the system's temporary directory).
	WorkDir string
	// Interval is how often pending versions are looked for; Wake runs a
	// pass at once.
	Interval time.Duration
	// UID and GID are the user the child runs as when the control plane
	// runs as root (0: DefaultSandboxID, nobody; negative: not switched).
	// Not root, the child runs as the control plane's user.
	UID, GID int
	Log      *slog.Logger
	Clock    quartz.Clock
}

// Validator validates the versions the registry queued, one at a time.
type Validator struct {
	service.Runner
	cfg  Config
	wake chan struct{}
	// noNS is set once the kernel refused a child's namespaces: later
	// children start without them (logged once).
	noNS atomic.Bool
}

// New returns a validator; Start runs it.
func New(cfg Config) *Validator {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MemoryMB <= 0 {
		cfg.MemoryMB = DefaultMemoryMB
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.UID == 0 {
		cfg.UID = DefaultSandboxID
	}
	if cfg.GID == 0 {
		cfg.GID = DefaultSandboxID
	}
	return &Validator{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass now: a version was registered.
func (v *Validator) Wake() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// Start validates pending versions in the background until Stop. Run it
// under a leader lease (db.Lease); two control planes would still not
// validate one version twice (the claim skips locked rows).
func (v *Validator) Start(ctx context.Context) error {
	return v.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, v.cfg.Clock, v.cfg.Interval, v.wake, func(ctx context.Context) {
			if _, err := v.Pass(ctx); err != nil && ctx.Err() == nil {
				v.cfg.Log.Error("validation pass", slog.String("error", err.Error()))
			}
		})
	})
}

// Pass validates every pending version now and returns how many it
// finished. The demo loader calls it to validate what it registered
// before the background loops run.
func (v *Validator) Pass(ctx context.Context) (int, error) {
	n := 0
	for ctx.Err() == nil {
		done, err := v.one(ctx)
		if err != nil || !done {
			return n, err
		}
		n++
	}
	return n, ctx.Err()
}

// outcome is one validation's result. memoryNeedMB is a GGUF model's
// need computed from its file (0: none), recorded on the version whatever
// the state.
type outcome struct {
	state, reason     string
	inputs, outputs   []json.RawMessage
	loadMS, latencyMS *float64
	memoryNeedMB      int64
}

// one claims the oldest pending validation, runs it and writes the
// outcome with the version's status, in one transaction; false when none
// is pending.
func (v *Validator) one(ctx context.Context) (bool, error) {
	found := false
	err := db.InTx(ctx, v.cfg.Pool, func(q *db.Queries) error {
		row, err := q.ValidationClaimPending(ctx)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		out, err := v.run(ctx, q, row)
		if ctx.Err() != nil {
			return ctx.Err() // stopping: the version stays pending for the next leader
		}
		if err != nil {
			return err
		}
		inputs, _ := json.Marshal(nonNil(out.inputs))
		outputs, _ := json.Marshal(nonNil(out.outputs))
		if err := q.ValidationFinish(ctx, db.ValidationFinishParams{VersionID: row.VersionID, State: out.state, Reason: out.reason,
			Inputs: inputs, Outputs: outputs, LoadMs: out.loadMS, LatencyMs: out.latencyMS}); err != nil {
			return err
		}
		if out.memoryNeedMB > 0 {
			if err := q.ModelVersionSetMemoryNeed(ctx, db.ModelVersionSetMemoryNeedParams{ID: row.VersionID,
				MemoryNeedMB: int32(min(out.memoryNeedMB, math.MaxInt32))}); err != nil {
				return err
			}
		}
		if out.state == registry.StatusValidated || out.state == registry.StatusInvalid {
			if err := q.ModelVersionSetStatus(ctx, db.ModelVersionSetStatusParams{ID: row.VersionID, Status: out.state}); err != nil {
				return err
			}
		}
		v.cfg.Log.Info("version validation", slog.String("model", row.Model), slog.String("version", row.Version),
			slog.String("state", out.state), slog.String("reason", out.reason))
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("validate: %w", err)
	}
	return found, nil
}

func nonNil(xs []json.RawMessage) []json.RawMessage {
	if xs == nil {
		return []json.RawMessage{}
	}
	return xs
}

// skipped is a validation the control plane could not run: the version
// stays registered.
const skipped = "skipped"

// run validates one version in a child process; q reads the fleet's CPU
// nodes, which a GGUF model's need must fit. An error is the database's:
// the version stays pending.
func (v *Validator) run(ctx context.Context, q *db.Queries, row db.ValidationClaimPendingRow) (outcome, error) {
	out := v.check(ctx, row)
	if row.Format != runtime.FormatGGUF || out.memoryNeedMB == 0 || out.state == registry.StatusInvalid {
		return out, nil
	}
	return v.checkMemory(ctx, q, row, out)
}

// checkMemory checks a GGUF model's need, which the child computed from
// the file: within what the version declares, if it declares any, and
// within the largest CPU node. A need above what a validation child may
// take was not loaded here: the version is not run by the control plane
// (skipped), and its replicas' warm-up checks it, as a GPU version's.
// Without any CPU node registered, the need cannot be held to one: the
// version is validated and placement reports it unplaceable until a node
// that holds it joins.
func (v *Validator) checkMemory(ctx context.Context, q *db.Queries, row db.ValidationClaimPendingRow, out outcome) (outcome, error) {
	need := out.memoryNeedMB
	invalid := func(format string, args ...any) (outcome, error) {
		out.state, out.reason = registry.StatusInvalid, fmt.Sprintf(format, args...)
		return out, nil
	}
	if row.MemoryMB > 0 && need > int64(row.MemoryMB) {
		return invalid("the model needs %d MiB (weights as float32 and the K/V cache, computed from the GGUF file) but resources.memory_mb is %d", need, row.MemoryMB)
	}
	largest, err := q.NodeMaxCPUMemory(ctx)
	if err != nil {
		return out, fmt.Errorf("largest CPU node: %w", err)
	}
	if largest.Nodes > 0 && need > int64(largest.MemoryMB) {
		return invalid("the model needs %d MiB (weights as float32 and the K/V cache, computed from the GGUF file) but the largest CPU node has %d MiB", need, largest.MemoryMB)
	}
	if out.state == notLoaded {
		out.state, out.reason = skipped, fmt.Sprintf("the model needs %d MiB, more than a validation may take here (%d MiB, the control plane's MP_VALIDATION_MEMORY_MB): it was not loaded by the control plane; its replicas' warm-up checks it", need, v.cfg.MemoryMB)
	}
	return out, nil
}

// notLoaded is a GGUF check whose model the child did not load (its need
// is above the child's limit); checkMemory decides the state.
const notLoaded = "not-loaded"

// tensorFormats are the formats the built-in runtime serves with their own
// tensors when a version names no features (app's runtimeTensors).
var tensorFormats = []string{"onnx", registry.Tokenizer}

// check validates one version in a child process.
func (v *Validator) check(ctx context.Context, row db.ValidationClaimPendingRow) outcome {
	cfg := registry.RuntimeConfig(row.Model, row.Version, row.Format, row.Serving, row.FeatureNames)
	// A version of a tensor format that names no features is served with
	// its graph's own tensors: its signature comes from the file, and only
	// its own sample inputs (objects keyed by input name) are run.
	tensor := len(cfg.Features) == 0 && slices.Contains(tensorFormats, row.Format)
	if len(cfg.SampleInputs) == 0 && !tensor {
		cfg.SampleInputs = Generate(cfg.Features, row.InputSchema)
	}
	out := outcome{inputs: cfg.SampleInputs}
	invalid := func(format string, args ...any) outcome {
		out.state, out.reason = registry.StatusInvalid, fmt.Sprintf(format, args...)
		return out
	}
	isLLM := row.Format == runtime.FormatGGUF
	if isLLM {
		cfg.SampleInputs, out.inputs = nil, nil
	}
	if len(cfg.Features) == 0 && !isLLM && !tensor {
		return invalid("the version names no features and its model no feature_names: the runtime cannot read an instance")
	}
	dir, err := os.MkdirTemp(v.cfg.WorkDir, "validate-")
	if err != nil {
		out.state, out.reason = skipped, "lay out the model directory: "+err.Error()
		return out
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := v.layout(dir, row.Manifest, cfg); err != nil {
		out.state, out.reason = skipped, "lay out the model directory: "+err.Error()
		return out
	}
	if err := v.handOver(dir); err != nil {
		out.state, out.reason = skipped, "lay out the model directory: "+err.Error()
		return out
	}
	// Messages name files by the temporary directory's path, which is
	// the control plane's and not the user's business.
	scrub := func(s string) string {
		s = strings.ReplaceAll(s, childDir+"/", "")
		return strings.ReplaceAll(s, dir+string(filepath.Separator), "")
	}
	rep, err := v.child(ctx, dir)
	rep.Invalid, rep.Unavailable = scrub(rep.Invalid), scrub(rep.Unavailable)
	if err != nil {
		var crash *crashError
		if errors.As(err, &crash) {
			return invalid("%s", scrub(crash.Error()))
		}
		out.state, out.reason = skipped, err.Error()
		return out
	}
	out.memoryNeedMB = rep.MemoryMB
	if rep.LoadMS > 0 || (rep.Invalid == "" && !rep.NotLoaded) {
		out.loadMS = &rep.LoadMS
	}
	switch {
	case rep.Unavailable != "":
		out.state, out.reason = skipped, "the control plane cannot run this version: "+rep.Unavailable
		return out
	case rep.Invalid != "":
		return invalid("%s", rep.Invalid)
	}
	if isLLM && rep.NotLoaded {
		out.state = notLoaded
		return out
	}
	out.latencyMS, out.outputs = &rep.LatencyMS, rep.Outputs
	if isLLM {
		// An LLM answers no sample instances; what it needs is memory,
		// which checkMemory holds to the version and the nodes.
		out.state = registry.StatusValidated
		return out
	}
	if len(rep.Outputs) != len(cfg.SampleInputs) {
		return invalid("the runtime answered %d of %d inputs", len(rep.Outputs), len(cfg.SampleInputs))
	}
	if why := checkOutputs(row.OutputSchema, rep.Outputs); why != "" {
		return invalid("%s", why)
	}
	out.state = registry.StatusValidated
	return out
}

// checkOutputs checks each answer against the model's output schema.
func checkOutputs(schema []byte, outputs []json.RawMessage) string {
	s, err := registry.CompileSchema(schema)
	if err != nil || s == nil {
		return ""
	}
	for i, o := range outputs {
		var doc any
		dec := json.NewDecoder(bytes.NewReader(o))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return fmt.Sprintf("outputs[%d] is not JSON", i)
		}
		if err := s.Validate(doc); err != nil {
			return fmt.Sprintf("outputs[%d] %s does not match the model's output_schema: %s", i, o, registry.SchemaMessage(err))
		}
	}
	return ""
}

// layout links (or copies) the version's files from the store into dir
// and writes the serving configuration beside them.
func (v *Validator) layout(dir string, manifest []byte, cfg serveapi.Config) error {
	var man map[string]string
	if err := json.Unmarshal(manifest, &man); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	for p, digest := range man {
		if err := artifact.CheckPath(p); err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := v.place(digest, dst); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o644)
}

func (v *Validator) place(digest, dst string) error {
	f, err := v.cfg.Store.Open(digest)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	// A child of its own user cannot read the store's blobs (0440, the
	// control plane's): it gets a copy, which handOver gives it.
	if !v.switchesUser() && os.Link(f.Name(), dst) == nil {
		return nil
	}
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// switchesUser reports whether children run as the sandbox user.
func (v *Validator) switchesUser() bool {
	return os.Geteuid() == 0 && v.cfg.UID >= 0 && v.cfg.GID >= 0
}

// handOver makes the laid-out directory the sandbox user's, so the child
// reads its files and nobody else's: the directory is 0700 (MkdirTemp)
// and only its owner may enter it.
func (v *Validator) handOver(dir string) error {
	if !v.switchesUser() {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, v.cfg.UID, v.cfg.GID)
	})
}

// crashError is a child that ended without a report: the version's model
// crashed the runtime, ran out of memory or time.
type crashError struct{ msg string }

func (e *crashError) Error() string { return e.msg }

// maxStderr is how much of a crashed child's stderr the reason quotes.
const maxStderr = 2000

// child runs `modelplane runtime validate` on dir and reads its report.
func (v *Validator) child(ctx context.Context, dir string) (Report, error) {
	cctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	dirFile, err := os.Open(dir)
	if err != nil {
		return Report{}, fmt.Errorf("open the model directory: %w", err)
	}
	defer func() { _ = dirFile.Close() }()
	bin, err := os.Open(v.cfg.Binary)
	if err != nil {
		return Report{}, fmt.Errorf("start the runtime %s: %w", v.cfg.Binary, err)
	}
	defer func() { _ = bin.Close() }()
	lib := openLibrary()
	if lib != nil {
		defer func() { _ = lib.Close() }()
	}
	start := func(ns bool) (*exec.Cmd, error) {
		stdout.Reset()
		stderr.Reset()
		cmd := v.childCommand(cctx, dirFile, lib, bin, ns)
		cmd.Stdout, cmd.Stderr = &stdout, &capped{b: &stderr, n: 64 << 10}
		return cmd, cmd.Start()
	}
	cmd, err := start(!v.noNS.Load())
	if err != nil && !v.noNS.Load() && nsRefused(err) {
		v.noNS.Store(true)
		v.cfg.Log.Warn("validation children run without network, IPC and UTS namespaces: the kernel refused them",
			slog.String("error", err.Error()))
		cmd, err = start(false)
	}
	if err == nil {
		err = cmd.Wait()
	}
	var rep Report
	if derr := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); derr == nil && (err == nil || rep.Invalid != "" || rep.Unavailable != "") {
		return rep, nil
	}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return Report{}, ctx.Err()
	case cctx.Err() != nil:
		return Report{}, &crashError{fmt.Sprintf("validation timed out after %s: the runtime did not load the model and answer in time", v.cfg.Timeout)}
	case errors.As(err, &exitErr):
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > maxStderr {
			msg = "…" + msg[len(msg)-maxStderr:]
		}
		return Report{}, &crashError{fmt.Sprintf("the runtime crashed (%s; memory limit %d MiB): %s", exitErr.ProcessState, v.cfg.MemoryMB, msg)}
	case err != nil:
		return Report{}, fmt.Errorf("start the runtime %s: %w", v.cfg.Binary, err)
	}
	return Report{}, fmt.Errorf("the runtime printed no report")
}

// childCommand is the sandboxed `modelplane runtime validate` of the
// directory open as dir, run from the binary open as bin: an empty
// environment but for the library's descriptor, the sandbox user,
// namespaces when ns, and its limits as flags it sets on itself.
func (v *Validator) childCommand(ctx context.Context, dir, lib, bin *os.File, ns bool) *exec.Cmd {
	cpu := int64(2 * v.cfg.Timeout.Seconds())
	nproc := int64(0)
	if v.switchesUser() {
		nproc = childMaxProcesses
	}
	cmd := exec.CommandContext(ctx, fmt.Sprintf("/proc/self/fd/%d", childBinaryFD), "runtime", "validate", "--model-dir", childDir,
		"--memory-mb", strconv.FormatInt(v.cfg.MemoryMB, 10),
		"--cpu-seconds", strconv.FormatInt(max(cpu, 1), 10),
		"--max-processes", strconv.FormatInt(nproc, 10))
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = childEnv(lib)
	cmd.Dir = "/"
	cmd.Args[0] = v.cfg.Binary
	// childDirFD, childLibraryFD (closed in the child when there is no
	// library), childBinaryFD.
	cmd.ExtraFiles = []*os.File{dir, lib, bin}
	uid, gid := v.cfg.UID, v.cfg.GID
	if !v.switchesUser() {
		uid, gid = -1, -1
	}
	cmd.SysProcAttr = childAttr(uid, gid, ns)
	return cmd
}

// capped keeps the first n bytes written to it and drops the rest.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
