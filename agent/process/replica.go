package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/guard"
	"modelplane/agent/triton"
	"modelplane/busapi"
)

// replica is one replica of the driver: a supervisor goroutine owns its
// process from spawn to end; Observe and Stop only read its state and ask.
type replica struct {
	d       *Driver
	spec    busapi.ReplicaSpec
	hash    string
	entry   catalog.Entry
	launch  Launch
	devices string
	cores   []int // set before the supervisor starts, then read-only
	// uid is the replica's own user (and group), from Config.UIDs; 0 when
	// it runs as RunAs or the agent's user. Set before the supervisor
	// starts, then read-only.
	uid uint32
	log *slog.Logger

	stop     chan struct{} // closed by Stop: end the runtime, restart nothing
	abandon  chan struct{} // closed by detach: leave the runtime running
	done     chan struct{} // closed when the supervisor has returned
	stopOnce sync.Once

	logMu sync.Mutex // serialises log rotation

	mu         sync.Mutex
	proc       *proc
	port       int
	preferPort int
	// metricsPort is the runtime's own metrics port on 127.0.0.1, for an
	// entry with catalog.Entry.MetricsPort; 0 without one.
	metricsPort, preferMetricsPort int
	// guard checks the replica's token in front of a runtime that does
	// not (guarded).
	guard    *guard.Guard
	spawned  int // processes started, the first one included
	ready    bool
	draining bool
	failures int
	restarts int
	reason   string
	// rates turns the runtime's token and TTFT counters into the
	// heartbeat's rate and mean.
	rates catalog.Rates
	// launched is the command line and files of the process last
	// started (launchOf); set whole, never changed in place.
	launched *busapi.Launch
}

// proc is one process of a replica. exited is closed once it has ended
// and status is set.
type proc struct {
	pid        int
	startTicks uint64
	exited     chan struct{}
	status     string
	// cgroup says it runs in the replica's cgroup, whose oom_kill count
	// was oomBefore when it started; else it runs under RLIMIT_AS (when
	// the spec has a memory limit).
	cgroup    bool
	oomBefore int64
}

func (d *Driver) newReplica(spec busapi.ReplicaSpec, hash string, e catalog.Entry, l Launch, devices string) *replica {
	return &replica{d: d, spec: spec, hash: hash, entry: e, launch: l, devices: devices,
		log:  d.log.With(slog.String("replica", spec.ID), slog.String("runtime", e.Name)),
		stop: make(chan struct{}), abandon: make(chan struct{}), done: make(chan struct{})}
}

// adoptedProc watches a process this driver did not start: it cannot wait
// for it, so it polls /proc until the process is gone.
func adoptedProc(pid int, ticks uint64) *proc {
	p := &proc{pid: pid, startTicks: ticks, exited: make(chan struct{})}
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			if !alive(pid, ticks) {
				p.status = "process " + strconv.Itoa(pid) + " is gone"
				close(p.exited)
				return
			}
		}
	}()
	return p
}

func (r *replica) Spec() busapi.ReplicaSpec { return r.spec }

func (r *replica) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return net.JoinHostPort(r.d.cfg.Host, strconv.Itoa(r.port))
}

// Observe reports readiness, from the runtime's own ready path, and load,
// from its metrics through the entry's adapter. A replica that is
// restarting is not an error: the supervisor handles it, and Failures and
// Reason say why. Only a stopped replica is agent.ErrNotRunning.
func (r *replica) Observe(ctx context.Context) (agent.Observation, error) {
	select {
	case <-r.done:
		return agent.Observation{}, fmt.Errorf("replica %s: %w", r.spec.ID, agent.ErrNotRunning)
	default:
	}
	r.capLog()
	r.mu.Lock()
	// Until its metrics are read, the replica reports none of them.
	o := agent.Observation{Ready: r.ready && !r.draining, Failures: r.failures, Restarts: r.restarts, Reason: r.reason,
		Runtime: r.entry.Name, Absent: slices.Clone(busapi.Metrics), Launch: r.launched}
	r.mu.Unlock()
	if !o.Ready {
		return o, nil
	}
	if err := r.probeReady(ctx); err != nil {
		o.Ready = false
		return o, nil
	}
	if r.entry.Metrics == "" {
		return o, nil
	}
	m, err := r.metrics(ctx)
	if err != nil {
		r.log.Debug("metrics not read", slog.String("error", err.Error()))
		return o, nil
	}
	o.QueueDepth, o.InFlight, o.Requests, o.BatchSize, o.KVUsedPct = m.QueueDepth, m.InFlight, m.Requests, m.BatchSize, m.KVUsedPct
	o.GPUUtil = m.GPUUtil
	o.Absent = m.Absent()
	o.Tokens, o.PromptTokens = m.TokenCounters()
	// Milliseconds rounded up: a phase measured at all is never shown as 0,
	// which means unknown.
	o.LoadMS, o.WarmupMS = int64(math.Ceil(m.LoadSeconds*1000)), int64(math.Ceil(m.WarmupSeconds*1000))
	r.mu.Lock()
	rr := r.rates.Update(r.d.cfg.Clock.Now(), m)
	r.mu.Unlock()
	o.TokensPerSecond, o.TTFTMS, o.BatchQueueMS = rr.TokensPerSecond, rr.TTFTMS, rr.BatchQueueMS
	return o, nil
}

// Stop drains the replica: it stops reporting ready (so the agent's next
// heartbeat takes it out of the routes), then its runtime gets SIGTERM,
// Grace to finish what is in flight, and SIGKILL. It returns once the
// runtime has ended, or with ctx's error while the supervisor carries on.
func (r *replica) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.draining = true
		r.mu.Unlock()
		close(r.stop)
	})
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop replica %s: %w", r.spec.ID, ctx.Err())
	}
}

// detach stops supervising without touching the runtime, as the death of
// the agent's process would; tests use it to restart an agent in one
// process.
func (r *replica) detach() {
	r.stopOnce.Do(func() { close(r.abandon) })
	<-r.done
	r.d.mu.Lock()
	if r.d.running[r.spec.ID] == r {
		delete(r.d.running, r.spec.ID)
	}
	r.d.mu.Unlock()
}

type endKind int

const (
	endFailed endKind = iota
	endStopped
	endAbandoned
	endCollision
)

type outcome struct {
	kind   endKind
	reason string
}

// supervise runs the replica until it is stopped: it watches the process,
// and when it fails starts another after the backoff.
func (r *replica) supervise(p *proc) {
	defer close(r.done)
	collisions := 0
	for {
		if p == nil {
			var err error
			if p, err = r.spawn(); err != nil {
				r.fail("start runtime: " + err.Error())
				if !r.backoff() {
					r.finish()
					return
				}
				continue
			}
		}
		res := r.watch(p)
		if res.kind != endStopped {
			r.closeGuard() // its runtime is gone, or the agent is
		}
		switch res.kind {
		case endStopped:
			// The guard forwards the requests in flight until the runtime
			// has drained them and ended, then until it has passed on the
			// last answers.
			r.terminate(p)
			r.drainGuard()
			r.d.mem.remove(r.spec.ID)
			r.finish()
			return
		case endAbandoned:
			return
		case endCollision:
			if collisions++; collisions <= maxCollisions {
				r.log.Warn("runtime lost its port to another process; starting it on another port", slog.Int("port", r.port))
				r.mu.Lock()
				r.preferPort, r.preferMetricsPort = 0, 0
				r.mu.Unlock()
				p = nil
				continue
			}
			res.reason = fmt.Sprintf("runtime lost its port to another process %d times in a row", collisions)
		}
		collisions = 0
		if res.kind == endFailed && p != nil && r.exceededMemory(p) {
			res.reason = fmt.Sprintf("memory limit %d MiB exceeded; %s", r.spec.MemoryMB, res.reason)
		}
		p = nil
		r.fail(res.reason)
		if !r.backoff() {
			r.finish()
			return
		}
	}
}

// watch waits for p to become ready (or fail to within the start timeout),
// then probes its liveness until it ends, fails or is stopped.
func (r *replica) watch(p *proc) outcome {
	cfg := &r.d.cfg
	r.mu.Lock()
	ready := r.ready
	r.mu.Unlock()
	if !ready {
		start := cfg.Clock.NewTimer(cfg.StartTimeout, "process", "start")
		poll := time.NewTicker(readyPoll)
		for !ready {
			pctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			ready = r.probeReady(pctx) == nil
			cancel()
			if ready {
				break
			}
			select {
			case <-r.stop:
				start.Stop()
				poll.Stop()
				return outcome{kind: endStopped}
			case <-r.abandon:
				start.Stop()
				poll.Stop()
				return outcome{kind: endAbandoned}
			case <-p.exited:
				start.Stop()
				poll.Stop()
				if r.portTaken() {
					return outcome{kind: endCollision}
				}
				return outcome{reason: "runtime exited before it was ready: " + p.status + r.logTail()}
			case <-start.C:
				poll.Stop()
				r.signal(p, unix.SIGKILL)
				<-p.exited
				return outcome{reason: fmt.Sprintf("runtime not ready within %s", cfg.StartTimeout) + r.logTail()}
			case <-poll.C:
			}
		}
		start.Stop()
		poll.Stop()
		r.mu.Lock()
		r.ready, r.failures, r.reason = true, 0, ""
		r.mu.Unlock()
		r.log.Info("runtime ready", slog.Int("pid", p.pid), slog.String("addr", r.Addr()))
	}
	live := cfg.Clock.NewTicker(cfg.LiveInterval, "process", "live")
	defer live.Stop()
	misses := 0
	for {
		select {
		case <-r.stop:
			return outcome{kind: endStopped}
		case <-r.abandon:
			return outcome{kind: endAbandoned}
		case <-p.exited:
			return outcome{reason: "runtime exited while serving: " + p.status + r.logTail()}
		case <-live.C:
			r.capLog()
			pctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			err := r.probe(pctx, r.entry.Health)
			cancel()
			if err == nil {
				misses = 0
				continue
			}
			if misses++; misses >= cfg.LiveFailures {
				r.signal(p, unix.SIGKILL)
				<-p.exited
				return outcome{reason: fmt.Sprintf("liveness probe failed %d times in a row: %v", misses, err)}
			}
		}
	}
}

// guarded reports whether the agent puts a guard in front of the
// replica's runtime: to check the token of a runtime that does not
// (catalog.Entry.ChecksToken), or to serve TLS (Config.TLS).
func (r *replica) guarded() bool {
	return !r.entry.ChecksToken && r.spec.Token != "" || r.d.cfg.TLS != nil
}

// guardOptions are what the replica's guard checks, serves and forwards.
func (r *replica) guardOptions() guard.Options {
	return guard.Options{Token: r.spec.Token, Open: r.entry.Probes(r.spec.Model), Log: r.log,
		TLS: r.d.cfg.TLS, ForwardToken: r.entry.ChecksToken}
}

// scheme is how the replica's address is reached: "https://" behind a
// guard serving TLS.
func (r *replica) scheme() string {
	if r.d.cfg.TLS != nil {
		return "https://"
	}
	return "http://"
}

// closeGuard ends the guard of the runtime process that ended.
func (r *replica) closeGuard() { r.takeGuard().Close() }

// guardDrain bounds how long a stopped replica's guard waits for the
// answers it is still passing on.
const guardDrain = 10 * time.Second

// drainGuard ends the guard of a runtime that drained its requests and
// ended: the runtime may have answered its last requests an instant
// before it exited, and closing the guard at once cut those answers off
// (EOF to 4 of 5 callers in TestStopDrainsInFlightRequests, once in CI).
// It waits for them, at most guardDrain.
func (r *replica) drainGuard() {
	g := r.takeGuard()
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), guardDrain)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		r.log.Warn("token guard: answers still in flight after the drain", slog.String("error", err.Error()))
	}
}

// takeGuard removes the replica's guard and returns it (nil when none).
func (r *replica) takeGuard() *guard.Guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.guard
	r.guard = nil
	return g
}

// fail records one failure in a row.
func (r *replica) fail(reason string) {
	r.mu.Lock()
	r.ready = false
	r.failures++
	r.reason = reason
	n := r.failures
	r.mu.Unlock()
	r.log.Warn("runtime failed", slog.Int("failures", n), slog.String("reason", reason))
}

// backoff waits before the next start: not at all after the first failure
// in a row (a runtime that served and died comes back at once), then
// BackoffBase doubling to BackoffMax. It reports false when the replica
// was stopped or abandoned meanwhile.
func (r *replica) backoff() bool {
	cfg := &r.d.cfg
	r.mu.Lock()
	n := r.failures
	r.mu.Unlock()
	if n <= 1 {
		select {
		case <-r.stop:
			return false
		case <-r.abandon:
			return false
		default:
			return true
		}
	}
	delay := cfg.BackoffMax
	if shift := n - 2; shift < 30 {
		delay = min(cfg.BackoffBase<<shift, cfg.BackoffMax)
	}
	t := cfg.Clock.NewTimer(delay, "process", "backoff")
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-r.abandon:
		return false
	case <-t.C:
		return true
	}
}

// finish forgets a replica that has ended for good.
func (r *replica) finish() {
	_ = os.Remove(r.d.recordPath(r.spec.ID))
	r.d.forget(r)
	r.mu.Lock()
	r.ready, r.proc = false, nil
	r.mu.Unlock()
	r.log.Info("replica stopped")
}

// terminate ends p: SIGTERM to its process group, Grace to drain, then
// SIGKILL.
func (r *replica) terminate(p *proc) {
	select {
	case <-p.exited:
		return
	default:
	}
	r.signal(p, unix.SIGTERM)
	grace := r.d.cfg.Clock.NewTimer(r.d.cfg.Grace, "process", "grace")
	defer grace.Stop()
	select {
	case <-p.exited:
		return
	case <-grace.C:
	}
	r.log.Warn("runtime did not end within the grace; killing it", slog.Duration("grace", r.d.cfg.Grace))
	r.signal(p, unix.SIGKILL)
	<-p.exited
}

// signal sends sig to p's process group (its own, from Setpgid), or to p
// alone when it left the group; never to a pid that is no longer p.
func (r *replica) signal(p *proc, sig unix.Signal) {
	if !alive(p.pid, p.startTicks) {
		return
	}
	if err := unix.Kill(-p.pid, sig); err != nil {
		_ = unix.Kill(p.pid, sig)
	}
}

// spawn starts a process of the replica on a free port.
func (r *replica) spawn() (*proc, error) {
	cfg := &r.d.cfg
	r.mu.Lock()
	wants := []portWant{{host: cfg.Host, prefer: r.preferPort}}
	if r.entry.MetricsPort {
		// The runtime's metrics, for the agent alone: on loopback.
		wants = append(wants, portWant{host: "127.0.0.1", prefer: r.preferMetricsPort})
	}
	r.mu.Unlock()
	got, err := r.d.takePorts(r, wants...)
	if err != nil {
		return nil, err
	}
	port, metricsPort := got[0], 0
	if len(got) > 1 {
		metricsPort = got[1]
	}
	host, runPort, inner := cfg.Host, port, 0
	var g *guard.Guard
	if r.guarded() {
		if inner, err = freePort("127.0.0.1", 0); err != nil {
			return nil, err
		}
		// Both are loopback ports: the kernel may hand out the metrics
		// port again, whose probe listener is closed.
		for tries := 0; inner == metricsPort || inner == port; tries++ {
			if tries == 10 {
				return nil, fmt.Errorf("allocate a port on 127.0.0.1: the kernel keeps handing out %d", inner)
			}
			if inner, err = freePort("127.0.0.1", 0); err != nil {
				return nil, err
			}
		}
		if g, err = guard.Listen(net.JoinHostPort(cfg.Host, strconv.Itoa(port)), loopback(inner), r.guardOptions()); err != nil {
			return nil, fmt.Errorf("token guard: %w", err)
		}
		host, runPort = "127.0.0.1", inner
	}
	started := false
	defer func() {
		if !started {
			g.Close()
		}
	}()
	vars := catalog.Vars{Self: cfg.Self, ModelDir: r.launch.ModelDir, Host: host, Port: runPort,
		Threads: len(r.cores), Model: r.spec.Model, Endpoint: r.spec.Endpoint, Replica: r.spec.ID,
		WorkDir: filepath.Join(cfg.StateDir, r.spec.ID+".d"), MetricsPort: metricsPort}
	var repo string
	var files []busapi.LaunchFile
	if r.entry.Name == catalog.Triton {
		if repo, files, err = r.writeRepository(vars); err != nil {
			return nil, err
		}
	}
	argv, err := r.entry.Argv(vars, r.spec.Settings, len(r.spec.Slots))
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(r.d.logPath(r.spec.ID), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	if metricsPort != 0 {
		fmt.Fprintf(logf, "--- modelplane agent: starting %s on port %d (metrics on 127.0.0.1:%d), cores %v: %q\n", r.spec.ID, runPort, metricsPort, r.cores, argv)
	} else {
		fmt.Fprintf(logf, "--- modelplane agent: starting %s on port %d, cores %v: %q\n", r.spec.ID, runPort, r.cores, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	env := r.env()
	launched := r.launchOf(argv, env, repo, files)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C or SIGTERM to the agent's group does
	// not reach it (it must outlive an agent restart), and Stop signals the
	// runtime's own children with it. No Pdeathsig, for the same reason.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.uid, Groups: []uint32{}}
		if r.launch.Private && r.launch.ModelDir != "" {
			if err := giveModelDir(r.launch.ModelDir, r.uid); err != nil {
				return nil, err
			}
		}
	} else if c := r.d.cred; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: []uint32{}}
	}
	// The spec's memory: a cgroup of the replica's own, which the child
	// starts in (no moment outside it), else RLIMIT_AS once it runs.
	inCgroup, oomBefore := false, int64(0)
	if mb := r.spec.MemoryMB; mb > 0 && r.d.mem.parent != "" {
		cg, n, err := r.d.mem.leaf(r.spec.ID, mb)
		if err != nil {
			return nil, fmt.Errorf("memory limit: cgroup of %s: %w", r.spec.ID, err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
		inCgroup, oomBefore = true, n
	} else if mb > 0 {
		bin, err := os.Open(cfg.Self)
		if err != nil {
			return nil, fmt.Errorf("memory limit: open %s: %w", cfg.Self, err)
		}
		defer bin.Close()
		throughLimit(cmd, bin, mb+addressSpaceHeadroomMB)
	}
	// The token, for a runtime that checks it itself: on a pipe it reads
	// once at start, never in its environment, which /proc shows to every
	// process of its user. A runtime that does not check it gets none: its
	// guard checks.
	var tokenW *os.File
	if r.spec.Token != "" && r.entry.ChecksToken {
		tr, tw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("token pipe: %w", err)
		}
		defer tr.Close()
		defer tw.Close()
		if _, err := tw.WriteString(r.spec.Token); err != nil { // far below a pipe's buffer
			return nil, fmt.Errorf("token pipe: %w", err)
		}
		tokenW = tw
		cmd.ExtraFiles = append(cmd.ExtraFiles, tr)
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", busapi.ReplicaTokenFDEnv, 2+len(cmd.ExtraFiles)))
	}
	if err := startPinned(cmd, r.cores); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	if tokenW != nil {
		_ = tokenW.Close() // the runtime reads to the end of the pipe
	}
	pid := cmd.Process.Pid
	_, ticks, err := procStat(pid)
	if err != nil {
		// It died at once and was not reaped yet, or /proc is unreadable:
		// without its start time it can be neither adopted nor safely
		// signalled later, so end it now.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("read start time of pid %d: %w", pid, err)
	}
	p := &proc{pid: pid, startTicks: ticks, exited: make(chan struct{}), cgroup: inCgroup, oomBefore: oomBefore}
	go func() {
		err := cmd.Wait()
		p.status = exitStatus(err)
		close(p.exited)
	}()
	started = true
	r.mu.Lock()
	r.proc, r.port, r.preferPort, r.guard = p, port, port, g
	r.launched = launched
	r.metricsPort, r.preferMetricsPort = metricsPort, metricsPort
	if r.spawned++; r.spawned > 1 {
		r.restarts++
	}
	r.mu.Unlock()
	if err := r.d.saveRecord(record{ID: r.spec.ID, SpecHash: r.hash, Runtime: r.entry.Name, ModelDir: r.launch.ModelDir, PID: pid, UID: r.uid,
		StartTicks: ticks, Port: port, InnerPort: inner, Cores: r.cores, Devices: r.devices, Launch: launched, MetricsPort: metricsPort}); err != nil {
		// The replica runs; only an agent restart would start it twice.
		r.log.Error("replica record not written; an agent restart will not adopt it", slog.String("error", err.Error()))
	}
	r.log.Info("runtime started", slog.Int("pid", pid), slog.Int("port", port))
	return p, nil
}

// startPinned starts cmd with the CPU affinity cores: it narrows the
// affinity of a locked OS thread, forks from it, so the child has the mask
// from its first instruction, and widens the thread again before
// unlocking it. The thread must not be thrown away instead (a goroutine
// ending locked): a child some other code forked from that thread with
// Pdeathsig, as internal/pgproc does, would get its signal, because the
// kernel sends it when the forking thread exits, not the process.
func startPinned(cmd *exec.Cmd, cores []int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var orig, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("cpu affinity: %w", err)
			return
		}
		for _, c := range cores {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("cpu affinity %v: %w", cores, err)
			return
		}
		errc <- cmd.Start()
		if err := unix.SchedSetaffinity(0, &orig); err != nil {
			// The thread keeps the narrow mask: keep it out of the
			// scheduler's pool for good rather than let other goroutines
			// run pinned, and rather than end it (see above).
			select {}
		}
		runtime.UnlockOSThread()
	}()
	return <-errc
}

// env is the runtime's whole environment: the agent's own is never passed,
// since it may hold the agent's credentials.
func (r *replica) env() []string {
	home := os.Getenv("HOME")
	if c := r.d.cred; c != nil {
		home = c.home
	}
	if r.uid != 0 {
		home = "/" // a uid of the range has no home
	}
	if home == "" {
		home = "/"
	}
	return append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"OMP_NUM_THREADS=" + strconv.Itoa(max(len(r.cores), 1)),
		"CUDA_VISIBLE_DEVICES=" + r.devices,
		"MP_REPLICA_ID=" + r.spec.ID,
	}, append(slices.Clone(r.d.cfg.Env), r.entry.Env...)...)
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}

// freePort returns prefer when it is free on host, else a port the kernel
// hands out.
func freePort(host string, prefer int) (int, error) {
	if prefer > 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(prefer))); err == nil {
			l.Close()
			return prefer, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("allocate a port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portTaken reports whether the replica's port, or its runtime's metrics
// port, is held by another process now that the replica's own has ended.
func (r *replica) portTaken() bool {
	r.mu.Lock()
	port, metricsPort := r.port, r.metricsPort
	r.mu.Unlock()
	taken := func(host string, p int) bool {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return true
		}
		l.Close()
		return false
	}
	if metricsPort != 0 && taken("127.0.0.1", metricsPort) {
		return true
	}
	// A guarded replica's port is the guard's; the runtime's is its own.
	return !r.guarded() && taken(r.d.cfg.Host, port)
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// probe asks path and wants 200.
func (r *replica) probe(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.scheme()+r.Addr()+path, nil)
	if err != nil {
		return err
	}
	resp, err := r.d.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	return nil
}

// probeReady asks the entry's ready path for the replica's model; for an
// entry whose ready path lists models (vLLM's /v1/models), the list must
// name the model the replica serves under too.
func (r *replica) probeReady(ctx context.Context) error {
	path := r.entry.ReadyPath(r.spec.Model)
	if !r.entry.ReadyLists {
		return r.probe(ctx, path)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.scheme()+r.Addr()+path, nil)
	if err != nil {
		return err
	}
	resp, err := r.d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	// vLLM serves under the endpoint's name (catalog.Entry.Argv).
	served := r.spec.Endpoint
	if served == "" {
		served = r.spec.Model
	}
	ok, err := catalog.Listed(resp.Body, served)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s does not list model %s yet", path, served)
	}
	return nil
}

// metrics scrapes the runtime's metrics through the entry's adapter: on
// the runtime's own metrics port when it has one (catalog.Entry.MetricsPort),
// else on the replica's address.
func (r *replica) metrics(ctx context.Context) (catalog.Metrics, error) {
	addr, scheme := r.Addr(), r.scheme()
	if r.entry.MetricsPort {
		r.mu.Lock()
		p := r.metricsPort
		r.mu.Unlock()
		if p == 0 {
			return catalog.Metrics{}, errors.New("the runtime has no metrics port (started by an agent that gave it none)")
		}
		// The runtime's own loopback port, plain HTTP.
		addr, scheme = net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), "http://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+addr+r.entry.Metrics, nil)
	if err != nil {
		return catalog.Metrics{}, err
	}
	resp, err := r.d.client.Do(req)
	if err != nil {
		return catalog.Metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return catalog.Metrics{}, fmt.Errorf("%s: status %d", r.entry.Metrics, resp.StatusCode)
	}
	return catalog.Parse(r.entry.Adapter, resp.Body)
}

// capLog keeps the log under LogMaxBytes: past it, its last LogMaxBytes go
// to <log>.1 and the file is truncated. The runtime writes in append mode,
// so its next write lands at the new end. Lines written between the copy
// and the truncation are lost; that is the price of never sitting between
// the runtime and its log.
func (r *replica) capLog() {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	path := r.d.logPath(r.spec.ID)
	st, err := os.Stat(path)
	if err != nil || st.Size() <= r.d.cfg.LogMaxBytes {
		return
	}
	if err := rotate(path, r.d.cfg.LogMaxBytes); err != nil {
		r.log.Warn("log not rotated", slog.String("error", err.Error()))
	}
}

func rotate(path string, keep int64) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if off := st.Size() - keep; off > 0 {
		if _, err := src.Seek(off, io.SeekStart); err != nil {
			return err
		}
	}
	tmp := path + ".1.tmp"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, io.LimitReader(src, keep))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+".1")
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Truncate(path, 0)
}

// logTail is the last line of the replica's log, for a failure's reason:
// "; last log line: …", or "".
func (r *replica) logTail() string {
	f, err := os.Open(r.d.logPath(r.spec.ID))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	const window = 4096
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(buf, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) == 0 || bytes.HasPrefix(l, []byte("--- modelplane agent:")) {
			continue
		}
		if len(l) > 200 {
			l = l[:200]
		}
		return "; last log line: " + string(l)
	}
	return ""
}

// writeRepository writes a Triton replica's model repository into its own
// directory (v.WorkDir/repository; v.WorkDir is made afresh on each
// start) with package triton, which the Kubernetes driver's init
// container shares. It returns the repository's directory and what it
// wrote there, for the replica's launch.
func (r *replica) writeRepository(v catalog.Vars) (string, []busapi.LaunchFile, error) {
	if err := os.RemoveAll(v.WorkDir); err != nil {
		return "", nil, fmt.Errorf("model repository: %w", err)
	}
	repo := filepath.Join(v.WorkDir, "repository")
	files, err := triton.WriteRepository(repo, v, r.spec.Settings, len(r.spec.Slots))
	if err != nil {
		return "", nil, err
	}
	return repo, files, nil
}

// launchOf is the launch a heartbeat reports of a process started with
// argv and env, with files written under dir: the replica's token never
// in it (its variable reads busapi.LaunchSecret, and so would any argument
// or file that held it), nor the value of any variable whose name says it
// is a credential (credentialName), nor those of the variables Config.Env
// adds (env ends with them), which are the operator's and may hold secrets
// under any name, except the settings known to be none (shownSettings):
// an operator debugging a launch needs the library path.
func (r *replica) launchOf(argv, env []string, dir string, files []busapi.LaunchFile) *busapi.Launch {
	hide := func(s string) string {
		if r.spec.Token == "" {
			return s
		}
		return strings.ReplaceAll(s, r.spec.Token, busapi.LaunchSecret)
	}
	l := busapi.Launch{Argv: make([]string, len(argv)), Dir: dir}
	for i, a := range argv {
		l.Argv[i] = hide(a)
	}
	own := len(env) - len(r.d.cfg.Env) - len(r.entry.Env)
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		operators := i >= own && i < len(env)-len(r.entry.Env)
		if credentialName(k) || operators && !shownSettings[k] {
			kv = k + "=" + busapi.LaunchSecret
		}
		l.Env = append(l.Env, hide(kv))
	}
	for _, f := range files {
		f.Content, f.Link = hide(f.Content), hide(f.Link)
		l.Files = append(l.Files, f)
	}
	l = l.Bounded()
	return &l
}

// shownSettings are the variables the agent itself adds to Config.Env
// whose values are settings, never credentials: where the ONNX Runtime
// library is (runtime/onnx.LibraryEnv).
var shownSettings = map[string]bool{"MP_ONNXRUNTIME_LIB": true}

// credentialWords are the parts of a variable's name that say its value is
// a credential: HF_TOKEN, AWS_SECRET_ACCESS_KEY, PGPASSWORD,
// OTEL_EXPORTER_OTLP_HEADERS (which carries authorization headers).
var credentialWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "HEADERS", "COOKIE", "SESSION"}

// credentialName says whether an environment variable named k holds a
// credential, so that a launch shows its value as busapi.LaunchSecret.
func credentialName(k string) bool {
	k = strings.ToUpper(k)
	for _, w := range credentialWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
