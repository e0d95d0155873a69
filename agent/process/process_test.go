package process

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"modelplane/agent"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

func TestReadyOnlyOnceTheReadyPathSaysSo(t *testing.T) {
	t.Parallel()
	sig := openDir(t)
	readyFile := filepath.Join(sig, "ready")
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil, "-ready-file", readyFile)
	r := start(t, d, spec("r-ready"), "")
	// The runtime lives (its health path answers) but is loading.
	wait.Eventually(t, long, func() bool { return r.probe(t.Context(), "/v2/health/live") == nil }, "runtime never answered its health path")
	for range 3 {
		if o := observe(t, r); o.Ready {
			t.Fatalf("ready while the ready path says 503: %+v", o)
		}
	}
	if err := os.WriteFile(readyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := waitReady(t, r)
	if o.Failures != 0 || o.Restarts != 0 || o.Reason != "" {
		t.Errorf("a clean start reports %+v", o)
	}
	if code, err := predict(r.Addr()); err != nil || code != http.StatusOK {
		t.Errorf("predict = %d, %v", code, err)
	}
	if o := observe(t, r); o.Requests != 1 {
		t.Errorf("requests from the runtime's metrics = %d, want 1", o.Requests)
	}
}

func TestRuntimeGetsItsDevicesThreadsAndNothingOfTheAgent(t *testing.T) {
	// t.Setenv: not parallel.
	t.Setenv("MP_AGENT_TOKEN", "agent-secret")
	secret := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(secret, []byte("agent-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	last := -1
	for i := range 1024 {
		if all.IsSet(i) {
			last = i
		}
	}
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.CPUs = []int{last}
		c.MIGDevices = map[busapi.Slot]string{{GPU: 1, Slice: 2}: "MIG-4f1c2d"}
	}, "-try-read", secret)

	s := spec("r-env")
	s.Slots = []busapi.Slot{{GPU: 2, Slice: 0}, {GPU: 3, Slice: 0}}
	r := start(t, d, s, "")
	waitReady(t, r)
	e := envOf(t, r)
	for name, want := range map[string]string{"CUDA_VISIBLE_DEVICES": "2,3", "OMP_NUM_THREADS": "1", "MP_REPLICA_ID": "r-env"} {
		if got, _ := e.get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, ok := e.get("MP_AGENT_TOKEN"); ok {
		t.Error("the runtime sees the agent's MP_AGENT_TOKEN")
	}
	if e.CPUs != strconv.Itoa(last) {
		t.Errorf("runtime's CPU affinity = %q, want core %d alone", e.CPUs, last)
	}
	if os.Geteuid() == 0 {
		if e.UID == 0 {
			t.Error("the agent runs as root and so does its runtime")
		}
		if e.Readable {
			t.Error("the runtime reads a file private to the agent")
		}
	}

	mig := spec("r-mig")
	mig.Profile, mig.Slots = "mig-1g.10gb", []busapi.Slot{{GPU: 1, Slice: 2}}
	waitReady(t, start(t, d, mig, ""))
	if got, _ := envOf(t, runningReplica(d, "r-mig")).get("CUDA_VISIBLE_DEVICES"); got != "MIG-4f1c2d" {
		t.Errorf("MIG replica's CUDA_VISIBLE_DEVICES = %q, want its MIG device id", got)
	}
	unknown := spec("r-mig-unknown")
	unknown.Profile, unknown.Slots = "mig-1g.10gb", []busapi.Slot{{GPU: 0, Slice: 5}}
	if _, err := d.Start(t.Context(), unknown, agent.StartOptions{}); err == nil || !strings.Contains(err.Error(), "no MIG device id") {
		t.Errorf("start on an unknown MIG slot: err = %v, want one naming the missing device id", err)
	}
}

func TestKilledRuntimeIsRestartedAndServesAgain(t *testing.T) {
	t.Parallel()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil)
	r := start(t, d, spec("r-kill"), "")
	waitReady(t, r)
	addr, pid := r.Addr(), envOf(t, r).PID
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, r); return o.Ready && o.Restarts == 1 },
		"killed runtime not back: %v", wait.Show(func() any { return o }))
	if got := envOf(t, r).PID; got == pid {
		t.Errorf("pid %d still answers after kill -9", pid)
	}
	if r.Addr() != addr {
		t.Errorf("restarted on %s, want its old address %s so routes stay valid", r.Addr(), addr)
	}
	if o.Failures != 0 {
		t.Errorf("failures in a row after it served again = %d, want 0", o.Failures)
	}
	if code, err := predict(r.Addr()); err != nil || code != http.StatusOK {
		t.Errorf("predict after the restart = %d, %v", code, err)
	}
}

func TestRuntimeFailingItsLivenessIsKilledAndRestarted(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	sick := filepath.Join(openDir(t), "sick")
	var logs syncBuffer
	d := newDriver(t, t.TempDir(), clock, func(c *Config) {
		c.LiveInterval = 5 * time.Second
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	}, "-sick-file", sick)
	r := start(t, d, spec("r-wedged"), "")
	waitReady(t, r)
	pid := envOf(t, r).PID
	if err := os.WriteFile(sick, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Three probes in a row fail, one per tick of the liveness ticker.
	var o agent.Observation
	wait.Eventually(t, long, func() bool {
		clock.Advance(5 * time.Second).MustWait(t.Context())
		o = observe(t, r)
		return o.Restarts == 1
	}, "wedged runtime never restarted: %v", wait.Show(func() any { return o }))
	if !strings.Contains(logs.String(), "liveness probe failed 3 times in a row") {
		t.Errorf("failure not logged with its reason; log:\n%s", logs.String())
	}
	if unix.Kill(pid, 0) == nil {
		t.Errorf("the wedged runtime (pid %d) still runs", pid)
	}
}

func TestRuntimeCrashingOnEveryStartFailsWithItsReasonAndBacksOff(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	backoff := clock.Trap().NewTimer("process", "backoff")
	defer backoff.Close()
	d := newDriver(t, t.TempDir(), clock, func(c *Config) { c.BackoffBase = 4 * time.Second }, "-crash")
	r := start(t, d, spec("r-crash"), "")
	// The first failure restarts at once, the second waits BackoffBase,
	// the third twice that.
	for i, want := range []time.Duration{4 * time.Second, 8 * time.Second} {
		call := backoff.MustWait(t.Context())
		if call.Duration != want {
			t.Errorf("backoff %d = %s, want %s", i+1, call.Duration, want)
		}
		call.MustRelease(t.Context())
		o := observe(t, r)
		if o.Ready || o.Failures != i+2 {
			t.Errorf("after failure %d: %+v", i+2, o)
		}
		clock.Advance(call.Duration).MustWait(t.Context())
	}
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, r); return o.Failures >= 3 }, "third failure not seen: %v", wait.Show(func() any { return o }))
	for _, want := range []string{"runtime exited before it was ready", "exit status 3", "crashing on start as told"} {
		if !strings.Contains(o.Reason, want) {
			t.Errorf("reason %q lacks %q", o.Reason, want)
		}
	}
}

func TestRuntimeNeverReadyFailsAtTheStartTimeout(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	timer := clock.Trap().NewTimer("process", "start")
	defer timer.Close()
	never := filepath.Join(openDir(t), "never")
	d := newDriver(t, t.TempDir(), clock, func(c *Config) { c.StartTimeout = 90 * time.Second }, "-ready-file", never)
	r := start(t, d, spec("r-slow"), "")
	call := timer.MustWait(t.Context())
	call.MustRelease(t.Context())
	wait.Eventually(t, long, func() bool { return r.probe(t.Context(), "/v2/health/live") == nil }, "runtime never answered its health path")
	pid := envOf(t, r).PID
	if o := observe(t, r); o.Ready || o.Failures != 0 {
		t.Fatalf("before the timeout: %+v", o)
	}
	clock.Advance(90 * time.Second).MustWait(t.Context())
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, r); return o.Failures == 1 }, "start timeout not counted: %v", wait.Show(func() any { return o }))
	if !strings.Contains(o.Reason, "not ready within 1m30s") || o.Ready {
		t.Errorf("after the timeout: %+v", o)
	}
	r.mu.Lock()
	next := r.proc
	r.mu.Unlock()
	if next != nil && next.pid == pid {
		select {
		case <-next.exited:
		default:
			t.Errorf("the timed-out runtime (pid %d) still runs", pid)
		}
	}
}

func TestTakenPortIsNotUsed(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().String()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil)
	r := start(t, d, spec("r-port"), taken)
	if r.Addr() == taken {
		t.Fatalf("replica given the taken address %s", taken)
	}
	o := waitReady(t, r)
	if o.Failures != 0 {
		t.Errorf("a taken preferred port counted as a failure: %+v", o)
	}
}

// TestPortsStayInTheNodesRange: with a port range (the node's registered
// address), every runtime listens inside it, a taken port of the range is
// skipped, two replicas never share one, and a full range is an error.
func TestPortsStayInTheNodesRange(t *testing.T) {
	t.Parallel()
	// Three consecutive ports that are free now; the first is then held
	// by another program.
	var first int
	var hold net.Listener
	for p := 33000; p < 34000 && hold == nil; p += 3 {
		ls := []net.Listener{}
		for i := range 3 {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == 3 {
			first, hold = p, ls[0]
			ls[1].Close()
			ls[2].Close()
		} else {
			for _, l := range ls {
				l.Close()
			}
		}
	}
	if hold == nil {
		t.Skip("no three free consecutive ports")
	}
	defer hold.Close()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) { c.PortFirst, c.PortLast = first, first+2 })
	// A preferred port outside the range is not taken.
	a := start(t, d, spec("r-range-a"), "127.0.0.1:"+strconv.Itoa(first+500))
	b := start(t, d, spec("r-range-b"), "")
	waitReady(t, a)
	waitReady(t, b)
	got := map[string]bool{a.Addr(): true, b.Addr(): true}
	want := map[string]bool{"127.0.0.1:" + strconv.Itoa(first+1): true, "127.0.0.1:" + strconv.Itoa(first+2): true}
	if len(got) != 2 || !got["127.0.0.1:"+strconv.Itoa(first+1)] || !got["127.0.0.1:"+strconv.Itoa(first+2)] {
		t.Fatalf("replicas on %v, want %v", got, want)
	}
	if _, err := d.Start(t.Context(), spec("r-range-c"), agent.StartOptions{}); err == nil || !strings.Contains(err.Error(), "no free port") {
		t.Fatalf("a third replica in a range of two free ports: %v, want no free port", err)
	}
}

func TestPortLostToAnotherProcessIsRetriedOnAnotherPort(t *testing.T) {
	t.Parallel()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil)
	// The port is free when the driver picks it and taken before the
	// runtime binds it: the race between the driver and any other program.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := d.newReplica(spec("r-race"), specHash(spec("r-race")), fake(), Launch{Runtime: "fake", ModelDir: openDir(t)}, "")
	r.cores = []int{d.cfg.CPUs[0]}
	r.preferPort = port
	d.mu.Lock()
	d.running[r.spec.ID] = r
	d.mu.Unlock()
	p, err := r.spawn()
	if err != nil {
		t.Fatal(err)
	}
	// Another program takes the port the moment the runtime lets go of
	// it; the runtime's next start would fail to bind.
	r.signal(p, unix.SIGKILL)
	<-p.exited
	hold, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	go r.supervise(p)
	o := waitReady(t, r)
	if r.Addr() == "127.0.0.1:"+strconv.Itoa(port) {
		t.Errorf("still on the lost port %d", port)
	}
	if o.Failures != 0 {
		t.Errorf("a lost port counted as a failure: %+v", o)
	}
}

// TestStopDrainsInFlightRequests: stopping a replica fails none of the
// requests it is answering, also when they go through the agent's token
// guard (a runtime that does not check the token itself).
func TestStopDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	for name, token := range map[string]string{"direct": "", "guarded": "replica-token-1"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testStopDrains(t, token)
		})
	}
}

func testStopDrains(t *testing.T, token string) {
	hold := filepath.Join(openDir(t), "release")
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil, "-hold-file", hold)
	s := spec("r-drain")
	s.Token = token
	r := start(t, d, s, "")
	waitReady(t, r)
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			code, err := predictWith(r.Addr(), token)
			if err == nil && code != http.StatusOK {
				err = errors.New("status " + strconv.Itoa(code))
			}
			errs <- err
		})
	}
	wait.Eventually(t, long, func() bool { return observe(t, r).InFlight == n }, "requests never in flight")
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	wait.Eventually(t, long, func() bool { return strings.Contains(readLog(t, d, "r-drain"), "SIGTERM; draining") }, "runtime never got SIGTERM")
	if o, err := r.Observe(t.Context()); err == nil && o.Ready {
		t.Error("a draining replica reports ready")
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Errorf("in-flight request failed: %v", err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, d, "r-drain"); !strings.Contains(log, "drained after 5 requests") {
		t.Errorf("runtime did not drain cleanly; log:\n%s", log)
	}
	if failed != 0 {
		t.Errorf("%d in-flight requests failed during the drain, want 0", failed)
	}
	if _, err := os.Stat(d.recordPath("r-drain")); !os.IsNotExist(err) {
		t.Errorf("record of a stopped replica left behind: %v", err)
	}
	if _, err := r.Observe(t.Context()); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("observe after stop: %v, want ErrNotRunning", err)
	}
}

func TestStopKillsARuntimeThatOutlastsTheGrace(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	grace := clock.Trap().NewTimer("process", "grace")
	defer grace.Close()
	d := newDriver(t, t.TempDir(), clock, func(c *Config) { c.Grace = 10 * time.Second }, "-ignore-term")
	r := start(t, d, spec("r-stubborn"), "")
	waitReady(t, r)
	pid := envOf(t, r).PID
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	call := grace.MustWait(t.Context())
	call.MustRelease(t.Context())
	wait.Eventually(t, long, func() bool { return strings.Contains(readLog(t, d, "r-stubborn"), "SIGTERM ignored") }, "runtime never got SIGTERM")
	select {
	case err := <-stopped:
		t.Fatalf("stop returned %v within the grace while the runtime runs", err)
	default:
	}
	if _, err := d.Start(t.Context(), spec("r-stubborn"), agent.StartOptions{}); err == nil || !strings.Contains(err.Error(), "still stopping") {
		t.Errorf("start while the old copy drains: %v, want still stopping", err)
	}
	clock.Advance(10 * time.Second).MustWait(t.Context())
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if unix.Kill(pid, 0) == nil {
		t.Errorf("pid %d runs after the grace", pid)
	}
}

func TestRestartedDriverAdoptsRunningRuntimes(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	hold := filepath.Join(openDir(t), "release")
	d1 := newDriver(t, state, quartz.NewMock(t), nil, "-hold-file", hold)
	r1 := start(t, d1, spec("r-adopt"), "")
	waitReady(t, r1)
	addr, pid := r1.Addr(), envOf(t, r1).PID
	// Requests in flight across the agent's restart.
	const n = 3
	errs := make(chan error, n)
	for range n {
		go func() {
			code, err := predict(addr)
			if err == nil && code != http.StatusOK {
				err = errors.New("status " + strconv.Itoa(code))
			}
			errs <- err
		}()
	}
	wait.Eventually(t, long, func() bool { return observe(t, r1).InFlight == n }, "requests never in flight")
	launch := observe(t, r1).Launch
	d1.detach() // the agent's process ends; its runtimes do not

	d2 := newDriver(t, state, quartz.NewMock(t), nil, "-hold-file", hold)
	if _, err := d2.Adopt(t.Context(), spec("r-adopt"), "127.0.0.1:1"); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("adopt at another port: %v, want ErrNotRunning", err)
	}
	got, err := d2.Adopt(t.Context(), spec("r-adopt"), addr)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if o := observe(t, got); !o.Ready || o.Restarts != 0 {
		t.Errorf("adopted replica at once: %+v, want ready with no restart", o)
	}
	if got.Addr() != addr || envOf(t, got).PID != pid {
		t.Errorf("adopted %s pid %d, want %s pid %d: the same process", got.Addr(), envOf(t, got).PID, addr, pid)
	}
	// What it was started with comes from the record, not a guess.
	if o := observe(t, got); launch == nil || !reflect.DeepEqual(o.Launch, launch) {
		t.Errorf("adopted replica's launch = %+v, want the one it was started with: %+v", o.Launch, launch)
	}
	if len(d2.Running()) != 1 {
		t.Errorf("running after adoption = %d, want 1", len(d2.Running()))
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("request in flight across the restart failed: %v", err)
		}
	}

	// The adopted runtime is supervised: a kill -9 is restarted.
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, got); return o.Ready && o.Restarts == 1 },
		"adopted runtime not restarted: %v", wait.Show(func() any { return o }))
	pid = envOf(t, got).PID
	d2.detach()

	// Start of an id a previous driver left running adopts it.
	d3 := newDriver(t, state, quartz.NewMock(t), nil, "-hold-file", hold)
	r3 := start(t, d3, spec("r-adopt"), "")
	if envOf(t, r3).PID != pid || observe(t, r3).Restarts != 0 {
		t.Errorf("start of a running replica started another copy")
	}
	d3.detach()

	// A runtime of another spec is not adopted, and does not keep running.
	d4 := newDriver(t, state, quartz.NewMock(t), nil, "-hold-file", hold)
	changed := spec("r-adopt")
	changed.Version = "v2"
	if _, err := d4.Adopt(t.Context(), changed, r3.Addr()); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("adopt of another spec: %v, want ErrNotRunning", err)
	}
	wait.Eventually(t, long, func() bool { return unix.Kill(pid, 0) != nil }, "runtime of the replaced spec (pid %d) still runs", pid)
}

func TestLogIsCapped(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) { c.LogMaxBytes = limit }, "-spam", strconv.Itoa(300<<10))
	r := start(t, d, spec("r-log"), "")
	waitReady(t, r)
	observe(t, r) // each observation caps the log
	for _, p := range []string{d.logPath("r-log"), d.logPath("r-log") + ".1"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > limit {
			t.Errorf("%s is %d bytes, over the cap of %d", filepath.Base(p), st.Size(), limit)
		}
	}
	// The runtime still writes to its log after the truncation.
	if code, err := predict(r.Addr()); err != nil || code != http.StatusOK {
		t.Fatalf("predict = %d, %v", code, err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, d, "r-log"); !strings.Contains(log, "drained after 1 requests") {
		t.Errorf("runtime's writes after the rotation are lost; log: %.200q", log)
	}
}

// TestRuntimeKilledMidRequestFailsItAndIsReportedWithTheReason: kill -9 of
// a runtime holding a request ends that request without an answer (no
// byte of one was sent, so the caller may retry it elsewhere), the replica
// is reported not ready with the signal as its reason while the restarted
// runtime loads, and it serves again once that one is ready.
func TestRuntimeKilledMidRequestFailsItAndIsReportedWithTheReason(t *testing.T) {
	t.Parallel()
	dir := openDir(t)
	readyFile, hold := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	if err := os.WriteFile(readyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil, "-ready-file", readyFile, "-hold-file", hold)
	r := start(t, d, spec("r-midreq"), "")
	waitReady(t, r)
	pid := envOf(t, r).PID
	answered := make(chan error, 1)
	go func() {
		code, err := predict(r.Addr())
		if err == nil {
			err = errors.New("answered " + strconv.Itoa(code))
		}
		answered <- err
	}()
	wait.Eventually(t, long, func() bool { return observe(t, r).InFlight == 1 }, "request never in flight")
	// The next process loads until the ready file is back.
	if err := os.Remove(readyFile); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err == nil || strings.HasPrefix(err.Error(), "answered") {
		t.Errorf("request held by the killed runtime: %v; want it to end without an answer", err)
	}
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, r); return o.Failures == 1 && o.Restarts == 1 },
		"kill not counted: %v", wait.Show(func() any { return o }))
	if o.Ready || !strings.Contains(o.Reason, "runtime exited while serving") || !strings.Contains(o.Reason, "killed") {
		t.Errorf("while the restarted runtime loads: %+v; want not ready, the signal as the reason", o)
	}
	for _, f := range []string{readyFile, hold} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, r)
	if code, err := predict(r.Addr()); err != nil || code != http.StatusOK {
		t.Errorf("predict after the restart = %d, %v", code, err)
	}
}
