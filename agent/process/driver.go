package process

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/guard"
	"modelplane/busapi"
)

// Defaults for the zero values of Config.
const (
	DefaultStartTimeout = 2 * time.Minute
	DefaultGrace        = 30 * time.Second
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = 2 * time.Minute
	DefaultLiveInterval = 2 * time.Second
	DefaultLiveFailures = 3
	DefaultLogMaxBytes  = 8 << 20
	// DefaultRunAs is the user runtimes run as when the agent runs as root;
	// without it on the machine they run as nobody.
	DefaultRunAs = "modelplane-runtime"
	// readyPoll is how often a starting runtime's ready path is asked: the
	// replica is routed to at most this long after it is ready.
	readyPoll = 100 * time.Millisecond
	// probeTimeout bounds one health, ready or metrics request; a runtime
	// on loopback answers in milliseconds.
	probeTimeout = 2 * time.Second
	// maxCollisions is how many times in a row a start may lose its port
	// to another process before it counts as a failure.
	maxCollisions = 5
)

// Launch is what the driver needs, beyond the spec, to run one replica.
type Launch struct {
	// Runtime is a catalogue entry's name or a registry runtime
	// (catalog.Name maps the latter).
	Runtime string
	// GPU says the replica runs on GPUs; it picks the catalogue entry of a
	// registry runtime (onnxruntime is builtin on CPU, Triton on a GPU).
	GPU bool
	// ModelDir is the verified local directory of the version's files,
	// passed to the runtime as {model_dir}. The runtime user must be able
	// to read it.
	ModelDir string
	// Threads is the replica's CPU cores: OMP_NUM_THREADS and the size of
	// its CPU affinity. Default 1.
	Threads int
	// Private says ModelDir is the replica's own (the artifact cache's
	// replicas/<id>): a replica with a user of its own gets it, mode 0500,
	// so no sibling enters it. A shared directory (ModelRoot) is left as is.
	Private bool
}

// Config configures a Driver. StateDir is required.
type Config struct {
	// StateDir holds a record per running replica (for adoption after an
	// agent restart) and the replicas' logs. Keep it across restarts; the
	// agent's own state directory with a subdirectory is a good choice.
	StateDir string
	// Catalog is the runtime catalogue; nil means catalog.Default().
	Catalog map[string]catalog.Entry
	// Self is the modelplane binary, {self} in command templates. Default
	// the running executable.
	Self string
	// Host is where runtimes listen and where the gateway reaches them.
	// Default 127.0.0.1.
	Host string
	// PortFirst and PortLast, when set, are the only ports (inclusive)
	// runtimes listen on: the node's registered range (fleet.SetAddress),
	// outside which the control plane believes no replica address. Nodes
	// sharing a host need ranges of their own. Zero leaves the port to
	// the kernel.
	PortFirst, PortLast int
	// Node is the node's name, for the reason of a replica whose runtime's
	// binary is not on this node ("vllm not found on node gpu-3").
	Node string
	// Resolve says how to run a replica, given the verified model
	// directory the agent prepared ("" when it keeps no cache). The
	// default runs the version's runtime (the built-in one when the spec
	// names none) on that directory, or on ModelRoot/<model>/<version>
	// without one, with a thread per core of the spec.
	Resolve func(ctx context.Context, spec busapi.ReplicaSpec, modelDir string) (Launch, error)
	// ModelRoot is the default Resolve's root of model directories for an
	// agent without an artifact cache.
	ModelRoot string
	// MIGDevices maps a MIG slot to the device id CUDA_VISIBLE_DEVICES
	// takes for it ("MIG-<uuid>", from nvidia-smi -L). A whole GPU is
	// passed by its index and needs no entry.
	MIGDevices map[busapi.Slot]string
	// CPUs are the cores runtimes are pinned to; each replica gets Threads
	// of them, the least used first. Default the agent's own affinity.
	CPUs []int
	// RunAs is the user runtimes run as when the agent runs as root, so
	// that they cannot read its credentials. Default DefaultRunAs, else
	// nobody. Ignored when the agent is not root: it cannot switch users,
	// and then its runtimes share its user (run the agent unprivileged, or
	// as root with a runtime user, never as a user holding secrets).
	RunAs string
	// UIDs are the users replicas run as when the agent runs as root:
	// "FIRST-LAST", each running replica a uid (and the gid of the same
	// number) of its own, so that no runtime reads another's files, model
	// directory or /proc. Default DefaultUIDFirst and DefaultUIDCount;
	// UIDsShared runs every runtime as RunAs.
	UIDs string
	// Cgroup is the cgroup v2 directory delegated to the driver, under
	// which each replica with a memory limit (the spec's MemoryMB) gets a
	// leaf with memory.max. Empty: one the driver makes at the root of the
	// hierarchy when the agent runs in the root cgroup. Where neither is
	// possible (no cgroup v2 memory controller, a non-root cgroup not
	// delegated), or CgroupNone, the limit is RLIMIT_AS.
	Cgroup string
	// TLS, when set, is what every replica's address serves: the agent
	// then puts a guard in front of every runtime, token-checking or not,
	// which terminates TLS with it (the node's certificate, reloaded when
	// it changes) and forwards to the runtime on a loopback port of its
	// own. ClientTLS is what the driver's probes trust (the CA bundle of
	// MP_TLS_CA); nil: the system's roots.
	TLS       *tls.Config
	ClientTLS *tls.Config
	// Env is added to every runtime's environment ("KEY=value"): settings
	// the runtimes need, such as where the ONNX Runtime library is
	// (MP_ONNXRUNTIME_LIB); never a credential, since every runtime reads it.
	Env []string
	// StartTimeout is how long a runtime may take to become ready.
	StartTimeout time.Duration
	// Grace is how long a stopped runtime may take to finish what is in
	// flight after SIGTERM before it is killed.
	Grace time.Duration
	// BackoffBase and BackoffMax shape the wait before a restart: none after
	// the first failure in a row, then BackoffBase doubling up to
	// BackoffMax.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// LiveInterval is the time between liveness probes of a ready runtime;
	// LiveFailures probes failed in a row kill and restart it.
	LiveInterval time.Duration
	LiveFailures int
	// LogMaxBytes caps a replica's log file (and its one rotated copy).
	LogMaxBytes int64
	// Clock runs the backoff, start timeout, grace and liveness ticks.
	// Default quartz.NewReal().
	Clock quartz.Clock
	Log   *slog.Logger
}

func (c *Config) defaults() error {
	if c.StateDir == "" {
		return errors.New("process driver: a state dir is required")
	}
	if c.Catalog == nil {
		c.Catalog = catalog.Default()
	}
	if c.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("process driver: own executable: %w", err)
		}
		c.Self = self
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if (c.PortFirst != 0 || c.PortLast != 0) && (c.PortFirst < 1 || c.PortLast > 65535 || c.PortFirst > c.PortLast) {
		return fmt.Errorf("process driver: port range %d-%d is not within 1-65535", c.PortFirst, c.PortLast)
	}
	if c.Resolve == nil {
		root := c.ModelRoot
		c.Resolve = func(_ context.Context, spec busapi.ReplicaSpec, dir string) (Launch, error) {
			private := dir != "" // the cache's directory of this replica
			if dir == "" {
				if root == "" {
					return Launch{}, errors.New("no model directory: the process driver has no model root and no artifact cache")
				}
				dir = filepath.Join(root, spec.Model, spec.Version)
			}
			rt := spec.Runtime
			if rt == "" {
				rt = catalog.Builtin
			}
			return Launch{Runtime: rt, GPU: len(spec.Slots) > 0, ModelDir: dir, Threads: max(1, spec.CPUCores), Private: private}, nil
		}
	}
	if len(c.CPUs) == 0 {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err == nil {
			for i := range 1024 {
				if set.IsSet(i) {
					c.CPUs = append(c.CPUs, i)
				}
			}
		}
		if len(c.CPUs) == 0 {
			c.CPUs = []int{0}
		}
	}
	if c.RunAs == "" {
		c.RunAs = DefaultRunAs
		if _, err := user.Lookup(c.RunAs); err != nil {
			c.RunAs = "nobody"
		}
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.LiveInterval <= 0 {
		c.LiveInterval = DefaultLiveInterval
	}
	if c.LiveFailures <= 0 {
		c.LiveFailures = DefaultLiveFailures
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = DefaultLogMaxBytes
	}
	if c.Clock == nil {
		c.Clock = quartz.NewReal()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// credential is the user runtimes run as; nil means the agent's own.
type credential struct {
	uid, gid uint32
	home     string
}

// Driver runs replicas as child processes. Build it with New; it outlives
// the agents that use it, and its runtimes outlive it: Close stops them,
// and a Driver of a restarted agent on the same StateDir adopts them. Safe
// for concurrent use.
type Driver struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	cred   *credential
	mem    memoryLimiter
	uids   uidRange

	mu      sync.Mutex
	running map[string]*replica
	// cores counts the replicas pinned to each core.
	cores map[int]int
	// ports are the ports of the range handed to replicas, so that two
	// starting at once never pick the same one.
	ports map[int]*replica
	// uidOwner is the replica holding each per-replica uid.
	uidOwner map[uint32]*replica
}

// New checks cfg and returns a driver that runs nothing yet. It creates
// the state directory, private to the agent.
func New(cfg Config) (*Driver, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("process driver state dir: %w", err)
	}
	d := &Driver{
		cfg:     cfg,
		log:     cfg.Log,
		client:  &http.Client{Timeout: probeTimeout, Transport: transportWith(cfg.ClientTLS)},
		running: make(map[string]*replica),
		cores:   make(map[int]int),
		ports:   make(map[int]*replica),
	}
	uids, err := parseUIDs(cfg.UIDs)
	if err != nil {
		return nil, err
	}
	d.uids, d.uidOwner = uids, map[uint32]*replica{}
	d.mem = newMemoryLimiter(cfg.Cgroup)
	if d.mem.parent != "" {
		d.log.Info("runtime memory limits: a cgroup v2 leaf per replica", slog.String("cgroup", d.mem.parent))
	} else {
		d.log.Info("runtime memory limits: RLIMIT_AS (no cgroup for replicas)", slog.String("why", d.mem.why))
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(cfg.RunAs)
		if err != nil {
			return nil, fmt.Errorf("process driver: runtime user %q: %w (the agent runs as root and must not run runtimes as root)", cfg.RunAs, err)
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("process driver: runtime user %q: %w", cfg.RunAs, err)
		}
		if uid == 0 {
			return nil, fmt.Errorf("process driver: runtime user %q is root", cfg.RunAs)
		}
		d.cred = &credential{uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	}
	return d, nil
}

// Start launches the replica and returns once its process runs; Observe
// says when it is ready. addr is the port the replica had before, taken
// again when free. Starting a replica the driver already runs returns that
// one; a replica a previous driver left running (its record says so) is
// adopted instead of started twice.
func (d *Driver) Start(ctx context.Context, spec busapi.ReplicaSpec, opts agent.StartOptions) (agent.Replica, error) {
	addr := opts.Addr
	hash := specHash(spec)
	d.mu.Lock()
	if r, ok := d.running[spec.ID]; ok {
		d.mu.Unlock()
		if r.hash != hash {
			return nil, fmt.Errorf("replica %s already runs with another spec", spec.ID)
		}
		r.mu.Lock()
		draining := r.draining
		r.mu.Unlock()
		if draining {
			// Its drain outlasted the caller's patience; a start now would
			// hand back a replica on its way out. The agent retries.
			return nil, fmt.Errorf("replica %s is still stopping", spec.ID)
		}
		return r, nil
	}
	d.mu.Unlock()
	if rec, err := d.loadRecord(spec.ID); err == nil {
		if r, err := d.adoptRecord(ctx, spec, rec); err == nil {
			d.log.Info("replica already running; adopted instead of starting it again", slog.String("replica", spec.ID), slog.Int("pid", rec.PID))
			return r, nil
		}
		// The recorded process is gone or runs another spec: end it if it is
		// still that very process, then start afresh.
		d.killStale(rec)
	}
	launch, err := d.cfg.Resolve(ctx, spec, opts.ModelDir)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", spec.ID, err)
	}
	entry, err := d.entry(launch)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", spec.ID, err)
	}
	if err := d.installed(entry); err != nil {
		return nil, fmt.Errorf("replica %s: %w", spec.ID, err)
	}
	devices, err := d.devices(spec, entry)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", spec.ID, err)
	}
	if launch.ModelDir != "" {
		if st, err := os.Stat(launch.ModelDir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("replica %s: model dir %s is not a directory", spec.ID, launch.ModelDir)
		}
	}
	r := d.newReplica(spec, hash, entry, launch, devices)
	r.preferPort = portOf(addr)
	d.mu.Lock()
	if other, ok := d.running[spec.ID]; ok { // a concurrent Start won
		d.mu.Unlock()
		return other, nil
	}
	r.cores = d.takeCoresLocked(launch.Threads)
	d.takeUIDLocked(r, 0)
	d.running[spec.ID] = r
	d.mu.Unlock()
	p, err := r.spawn()
	if err != nil {
		d.forget(r)
		return nil, fmt.Errorf("replica %s: %w", spec.ID, err)
	}
	go r.supervise(p)
	return r, nil
}

// Running lists the replicas this driver runs.
func (d *Driver) Running() []agent.Replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]agent.Replica, 0, len(d.running))
	for _, r := range d.running {
		out = append(out, r)
	}
	return out
}

// Adopt takes over a replica a previous driver left running at addr: its
// record must name a live process (same pid and start time), the same spec
// and addr's port, and the runtime must answer its health path. Anything
// else is agent.ErrNotRunning, and the agent starts the replica afresh.
func (d *Driver) Adopt(ctx context.Context, spec busapi.ReplicaSpec, addr string) (agent.Replica, error) {
	d.mu.Lock()
	if r, ok := d.running[spec.ID]; ok && r.Addr() == addr {
		d.mu.Unlock()
		return r, nil
	}
	d.mu.Unlock()
	rec, err := d.loadRecord(spec.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", agent.ErrNotRunning, err)
	}
	if want := portOf(addr); want != 0 && rec.Port != want {
		return nil, fmt.Errorf("%w: replica %s runs on port %d, not %d", agent.ErrNotRunning, spec.ID, rec.Port, want)
	}
	r, err := d.adoptRecord(ctx, spec, rec)
	if err != nil {
		d.killStale(rec)
		return nil, fmt.Errorf("%w: %w", agent.ErrNotRunning, err)
	}
	return r, nil
}

// adoptRecord re-attaches to the process of rec when it still runs the
// spec and answers.
func (d *Driver) adoptRecord(ctx context.Context, spec busapi.ReplicaSpec, rec record) (*replica, error) {
	hash := specHash(spec)
	if rec.SpecHash != hash {
		return nil, errors.New("recorded replica runs another spec")
	}
	if !alive(rec.PID, rec.StartTicks) {
		return nil, fmt.Errorf("process %d is gone", rec.PID)
	}
	entry, ok := d.cfg.Catalog[rec.Runtime]
	if !ok {
		return nil, fmt.Errorf("recorded runtime %q is not in the catalogue", rec.Runtime)
	}
	r := d.newReplica(spec, hash, entry, Launch{Runtime: rec.Runtime, ModelDir: rec.ModelDir, Threads: max(len(rec.Cores), 1)}, rec.Devices)
	r.port = rec.Port
	r.launched = rec.Launch
	// A runtime started before the driver gave it a metrics port (a
	// record without one) is adopted all the same, its metrics absent.
	r.metricsPort = rec.MetricsPort
	if r.guarded() {
		if rec.InnerPort == 0 {
			return nil, errors.New("recorded replica has no port behind its token guard")
		}
		g, err := guard.Listen(net.JoinHostPort(d.cfg.Host, strconv.Itoa(rec.Port)), loopback(rec.InnerPort), r.guardOptions())
		if err != nil {
			return nil, fmt.Errorf("adopt replica %s: token guard: %w", spec.ID, err)
		}
		r.guard = g
	}
	if err := r.probe(ctx, entry.Health); err != nil {
		r.closeGuard()
		return nil, fmt.Errorf("adopt replica %s: %w", spec.ID, err)
	}
	// A runtime that serves stays routed across the agent's restart: it is
	// ready from the first observation, not after a readiness poll.
	r.ready = r.probeReady(ctx) == nil
	r.spawned = 1
	d.mu.Lock()
	if other, ok := d.running[spec.ID]; ok {
		d.mu.Unlock()
		r.closeGuard()
		return other, nil
	}
	r.cores = rec.Cores
	for _, c := range rec.Cores {
		d.cores[c]++
	}
	if rec.UID != 0 { // the process runs as it, whatever else holds it
		r.uid, d.uidOwner[rec.UID] = rec.UID, r
	}
	if d.cfg.PortFirst != 0 {
		d.ports[rec.Port] = r
		if rec.MetricsPort != 0 {
			d.ports[rec.MetricsPort] = r
		}
	}
	d.running[spec.ID] = r
	d.mu.Unlock()
	p := adoptedProc(rec.PID, rec.StartTicks)
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	go r.supervise(p)
	return r, nil
}

// killStale ends the process of a record that is not adopted, when it is
// still the recorded process: a runtime of an old spec must not keep its
// port or cores.
func (d *Driver) killStale(rec record) {
	if alive(rec.PID, rec.StartTicks) {
		d.log.Warn("ending a runtime left from an earlier spec", slog.String("replica", rec.ID), slog.Int("pid", rec.PID))
		_ = unix.Kill(-rec.PID, unix.SIGKILL)
	}
	_ = os.Remove(d.recordPath(rec.ID))
}

// Close stops every replica, in parallel, and returns when all have ended
// or ctx is done.
func (d *Driver) Close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range d.Running() {
		wg.Go(func() { _ = r.Stop(ctx) })
	}
	wg.Wait()
}

func (d *Driver) entry(l Launch) (catalog.Entry, error) {
	if e, ok := d.cfg.Catalog[l.Runtime]; ok {
		return e, nil
	}
	name, err := catalog.Name(l.Runtime, l.GPU)
	if err != nil {
		return catalog.Entry{}, err
	}
	e, ok := d.cfg.Catalog[name]
	if !ok {
		return catalog.Entry{}, fmt.Errorf("%w %q (runtime %q)", catalog.ErrUnknown, name, l.Runtime)
	}
	return e, nil
}

// ErrNoBinary means a catalogue entry's program is not on this node.
var ErrNoBinary = errors.New("runtime binary not found")

// installed checks that the entry's program is on this node, so that a
// replica of a runtime the node lacks fails at once with a reason that
// says so instead of an exec error inside a restart loop.
func (d *Driver) installed(e catalog.Entry) error {
	prog := e.Program
	if prog == "" && len(e.Command) > 0 {
		prog = e.Command[0]
	}
	if prog == "" || strings.Contains(prog, "{") {
		return nil // {self}: the agent's own binary
	}
	if _, err := exec.LookPath(prog); err != nil {
		node := d.cfg.Node
		if node == "" {
			node = "this node"
		} else {
			node = "node " + node
		}
		return fmt.Errorf("%w: %s not found on %s", ErrNoBinary, prog, node)
	}
	return nil
}

// Runtimes lists the catalogue entries whose programs this node has: what
// its inventory can offer placement.
func (d *Driver) Runtimes() []string {
	var out []string
	for name, e := range d.cfg.Catalog {
		if d.installed(e) == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// devices is CUDA_VISIBLE_DEVICES for the spec's slots.
func (d *Driver) devices(spec busapi.ReplicaSpec, e catalog.Entry) (string, error) {
	if e.Devices != catalog.DevicesCUDAEnv {
		return "", nil
	}
	var ids []string
	for _, s := range spec.Slots {
		if spec.Profile == busapi.ProfileFull || spec.Profile == "" {
			ids = append(ids, strconv.Itoa(s.GPU))
			continue
		}
		id, ok := d.cfg.MIGDevices[s]
		if !ok {
			return "", fmt.Errorf("no MIG device id is known for gpu %d slice %d", s.GPU, s.Slice)
		}
		ids = append(ids, id)
	}
	return strings.Join(ids, ","), nil
}

// takeCoresLocked picks n cores, the least used first (ties by number),
// so replicas spread over the node before any core is shared.
func (d *Driver) takeCoresLocked(n int) []int {
	n = min(max(n, 1), len(d.cfg.CPUs))
	cands := slices.Clone(d.cfg.CPUs)
	slices.SortStableFunc(cands, func(a, b int) int { return d.cores[a] - d.cores[b] })
	out := slices.Clone(cands[:n])
	slices.Sort(out)
	for _, c := range out {
		d.cores[c]++
	}
	return out
}

// forget removes r from the running set and frees its cores.
func (d *Driver) forget(r *replica) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[r.spec.ID] != r {
		return
	}
	delete(d.running, r.spec.ID)
	d.releaseUIDLocked(r)
	for _, c := range r.cores {
		if d.cores[c]--; d.cores[c] <= 0 {
			delete(d.cores, c)
		}
	}
	for p, o := range d.ports {
		if o == r {
			delete(d.ports, p)
		}
	}
}

// portWant is one port a replica's process listens on: on host, prefer
// when it is free.
type portWant struct {
	host   string
	prefer int
}

// takePorts picks the ports of r's next process, one per want and never two
// alike: each its prefer when it is free on its host, else a free one,
// from the configured range when there is one. The ports r held before
// are freed first; forget frees them at the end.
func (d *Driver) takePorts(r *replica, wants ...portWant) ([]int, error) {
	first, last := d.cfg.PortFirst, d.cfg.PortLast
	out := make([]int, 0, len(wants))
	if first == 0 {
		for _, w := range wants {
			p, err := freePort(w.host, w.prefer)
			// The kernel may hand out a port it just gave the one before,
			// whose listener is closed again: ask for another.
			for tries := 0; err == nil && slices.Contains(out, p); tries++ {
				if tries == 10 {
					return nil, fmt.Errorf("allocate a port on %s: the kernel keeps handing out %d", w.host, p)
				}
				p, err = freePort(w.host, 0)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, o := range d.ports {
		if o == r {
			delete(d.ports, p)
		}
	}
	try := func(host string, p int) bool {
		if p < first || p > last || d.ports[p] != nil {
			return false
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		l.Close()
		d.ports[p] = r
		return true
	}
	for _, w := range wants {
		got := 0
		if w.prefer > 0 && try(w.host, w.prefer) {
			got = w.prefer
		}
		for p := first; got == 0 && p <= last; p++ {
			if try(w.host, p) {
				got = p
			}
		}
		if got == 0 {
			for _, p := range out { // none of this start's ports stays taken
				delete(d.ports, p)
			}
			return nil, fmt.Errorf("no free port on %s in %d-%d", w.host, first, last)
		}
		out = append(out, got)
	}
	return out, nil
}

// specHash identifies what a replica runs, for adoption: a record of
// another spec is never adopted.
func specHash(s busapi.ReplicaSpec) string {
	if len(s.Sim) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, s.Sim) == nil {
			s.Sim = buf.Bytes()
		}
	}
	data, _ := json.Marshal(s)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// detach stops supervising every replica and leaves the runtimes running,
// as the end of the agent's process would; tests use it to restart an
// agent within one process.
func (d *Driver) detach() {
	d.mu.Lock()
	rs := make([]*replica, 0, len(d.running))
	for _, r := range d.running {
		rs = append(rs, r)
	}
	d.mu.Unlock()
	for _, r := range rs {
		r.detach()
	}
}

var _ agent.Driver = (*Driver)(nil)
