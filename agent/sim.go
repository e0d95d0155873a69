package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/sim/replica"
)

// SimDriverConfig configures the sim driver.
type SimDriverConfig struct {
	// LoadDelay is how long each replica "loads its model" after it starts
	// listening; it reports starting until then. Default 0.
	LoadDelay time.Duration
	// Log defaults to discarding.
	Log *slog.Logger
	// PortFirst and PortLast, when set, are the only ports replicas listen
	// on (127.0.0.1, inclusive): the range the platform registered for the
	// node, outside which the control plane does not believe a replica's
	// address. Zero: any free port.
	PortFirst, PortLast int
	// TLS, when set, is what every replica's listener serves (the node's
	// certificate, reloaded when it changes) and ClientTLS what the
	// driver's probes of replicas left by another process trust; nil:
	// plain HTTP.
	TLS       *tls.Config
	ClientTLS *tls.Config
	// Tracer, when set, is what the replicas continue their callers'
	// traces with (sim/replica's Config.Tracer); nil traces nothing.
	Tracer trace.TracerProvider
}

// SimDriver serves each replica as a sim/replica HTTP server in this
// process, on its own 127.0.0.1 port. It outlives the agents that use it:
// Close ends its replicas. Safe for concurrent use.
type SimDriver struct {
	cfg    SimDriverConfig
	log    *slog.Logger
	client *http.Client

	mu      sync.Mutex
	running map[string]*simReplica
}

// NewSimDriver returns a driver that runs nothing yet.
func NewSimDriver(cfg SimDriverConfig) *SimDriver {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SimDriver{
		cfg: cfg,
		log: log,
		// Probes of replicas another process left behind: a live replica
		// answers in milliseconds, a dead port refuses at once, so a short
		// timeout only guards against a hung peer.
		client:  &http.Client{Timeout: 2 * time.Second, Transport: transportWith(cfg.ClientTLS)},
		running: make(map[string]*simReplica),
	}
}

// Start serves the replica on opts.Addr when that port is free, else on any
// free loopback port; it reads no model files. Starting a replica the
// driver already runs returns the running one, so a retried start never
// makes a second copy.
func (d *SimDriver) Start(ctx context.Context, spec busapi.ReplicaSpec, opts StartOptions) (Replica, error) {
	addr := opts.Addr
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.running[spec.ID]; ok {
		if specHash(r.spec) != specHash(spec) {
			return nil, fmt.Errorf("replica %s already runs with another spec", spec.ID)
		}
		return r, nil
	}
	mem, err := replicaMemoryMB(spec)
	if err != nil {
		return nil, err
	}
	srv, err := replica.New(replica.Config{
		ReplicaID: spec.ID,
		Token:     spec.Token,
		Endpoint:  spec.Endpoint,
		Version:   spec.Version,
		Task:      replica.Task(spec.Task),
		Profile:   spec.Sim,
		Seed:      seedOf(spec.ID),
		LoadDelay: d.cfg.LoadDelay,
		Log:       d.log,
		TLS:       d.cfg.TLS,
		Tracer:    d.cfg.Tracer,
	})
	if err != nil {
		return nil, err
	}
	// The replica serves until it is stopped, whatever becomes of the
	// caller's context: it outlives the agent that asked for it.
	life := context.WithoutCancel(ctx)
	var listen []string
	if addr != "" && d.inRange(addr) {
		listen = append(listen, addr)
	}
	if d.cfg.PortFirst == 0 {
		listen = append(listen, "127.0.0.1:0")
	}
	for p := d.cfg.PortFirst; p > 0 && p <= d.cfg.PortLast; p++ {
		listen = append(listen, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	if len(listen) == 0 {
		return nil, fmt.Errorf("start replica %s: empty port range %d-%d", spec.ID, d.cfg.PortFirst, d.cfg.PortLast)
	}
	var bound string
	for _, a := range listen {
		na, err := srv.Start(life, a)
		if err == nil {
			bound = na.String()
			break
		}
		if a == listen[len(listen)-1] {
			return nil, fmt.Errorf("start replica %s: %w", spec.ID, err)
		}
		d.log.Debug("preferred address taken", slog.String("replica", spec.ID), slog.String("addr", a), slog.String("error", err.Error()))
	}
	r := &simReplica{d: d, spec: spec, srv: srv, addr: bound, memMB: mem}
	d.running[spec.ID] = r
	return r, nil
}

// transportWith is the default transport trusting tc's roots (nil: the
// default transport itself).
func transportWith(tc *tls.Config) http.RoundTripper {
	if tc == nil {
		return http.DefaultTransport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	return t
}

// scheme is how replicas are reached: "https://" with TLS.
func (d *SimDriver) scheme() string {
	if d.cfg.TLS != nil {
		return "https://"
	}
	return "http://"
}

// inRange reports whether addr's port is one the driver may listen on.
func (d *SimDriver) inRange(addr string) bool {
	if d.cfg.PortFirst == 0 {
		return true
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= d.cfg.PortFirst && p <= d.cfg.PortLast
}

// Runtimes is busapi.AnyRuntime: a simulated replica serves whatever
// runtime its version names, so placement puts any version on a simulated
// node, as before nodes reported their runtimes.
func (d *SimDriver) Runtimes() []string { return []string{busapi.AnyRuntime} }

// Running lists the replicas this driver serves.
func (d *SimDriver) Running() []Replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Replica, 0, len(d.running))
	for _, r := range d.running {
		out = append(out, r)
	}
	return out
}

// Adopt returns the replica when this driver serves it at addr, or when
// something at addr answers /v2/health/live and reports the same replica id
// on /v2/stats (a replica another driver in this process, or a process that
// outlived its agent, serves). The sim driver cannot end a replica it does
// not serve: Stop on such a one only forgets it.
func (d *SimDriver) Adopt(ctx context.Context, spec busapi.ReplicaSpec, addr string) (Replica, error) {
	d.mu.Lock()
	if r, ok := d.running[spec.ID]; ok && r.addr == addr {
		d.mu.Unlock()
		return r, nil
	}
	d.mu.Unlock()
	if addr == "" {
		return nil, ErrNotRunning
	}
	mem, err := replicaMemoryMB(spec)
	if err != nil {
		return nil, err
	}
	r := &simReplica{d: d, spec: spec, addr: addr, memMB: mem}
	if err := d.probeLive(ctx, addr); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	if _, err := r.remoteStats(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	return r, nil
}

// Close stops every replica the driver serves, in parallel, and returns
// when all have ended.
func (d *SimDriver) Close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range d.Running() {
		wg.Go(func() { _ = r.Stop(ctx) })
	}
	wg.Wait()
}

func (d *SimDriver) probeLive(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.scheme()+addr+"/v2/health/live", nil)
	if err != nil {
		return err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("live probe: status %d", resp.StatusCode)
	}
	return nil
}

// simReplica is one replica of the sim driver: srv is set when this driver
// serves it, nil when it was adopted from elsewhere and is reached over
// HTTP.
type simReplica struct {
	d     *SimDriver
	spec  busapi.ReplicaSpec
	srv   *replica.Server
	addr  string
	memMB int64

	mu       sync.Mutex
	util     utilEstimate
	stopOnce sync.Once
	// stopped is set once Stop began: the replica no longer answers,
	// though its in-process server may still be draining.
	stopped atomic.Bool
}

func (r *simReplica) Spec() busapi.ReplicaSpec { return r.spec }
func (r *simReplica) Addr() string             { return r.addr }

func (r *simReplica) Observe(ctx context.Context) (Observation, error) {
	if r.stopped.Load() {
		return Observation{}, fmt.Errorf("replica %s: %w", r.spec.ID, ErrNotRunning)
	}
	var st replica.Stats
	if r.srv != nil {
		st = r.srv.Stats()
	} else {
		var err error
		if st, err = r.remoteStats(ctx); err != nil {
			return Observation{}, err
		}
	}
	r.mu.Lock()
	util := r.util.update(time.Now(), st)
	r.mu.Unlock()
	o := Observation{
		Ready:      st.Ready,
		QueueDepth: st.QueueDepth,
		KVUsedPct:  100 * st.KVUtilization,
		Requests:   st.Requests,
		MemoryMB:   r.memoryUsedMB(),
		InFlight:   st.InFlight,
		BatchSize:  float64(st.BatchSize),
		// The simulator's TTFT is a windowed median; the heartbeat's is
		// a mean, which for its near-symmetric samples is close enough.
		TokensPerSecond: st.TokensPerSecond,
		TTFTMS:          st.TTFTP50Ms,
	}
	if st.Ready {
		o.UtilPct = util
	}
	if st.Task == replica.TaskLLM {
		o.Tokens, o.PromptTokens = counter(st.Tokens), counter(st.PromptTokens)
	}
	// The simulator models no batcher's queue time: absent, not a
	// measured 0 a policy on batch_queue_ms would scale down on.
	o.Absent = []string{busapi.MetricBatchQueueMS}
	return o, nil
}

// counter is a replica's counter as the heartbeat carries it; nil stays
// nil (a replica older than the counter).
func counter(n *uint64) *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}

// memoryUsedMB models what the runtime holds on its slots. An LLM runtime
// reserves its KV-cache pool up front, as vLLM does with its default
// gpu_memory_utilization of 0.9; a predictor holds its weights and
// workspace, taken here as 30 percent of the slot. Both hold it from the
// moment they start loading.
func (r *simReplica) memoryUsedMB() int64 {
	if r.spec.Task == string(replica.TaskLLM) {
		return r.memMB * 9 / 10
	}
	return r.memMB * 3 / 10
}

func (r *simReplica) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.stopped.Store(true)
		r.d.mu.Lock()
		if r.d.running[r.spec.ID] == r {
			delete(r.d.running, r.spec.ID)
		}
		r.d.mu.Unlock()
		if r.srv == nil {
			r.d.log.Warn("replica served elsewhere cannot be stopped by the sim driver; forgetting it",
				slog.String("replica", r.spec.ID), slog.String("addr", r.addr))
			return
		}
		done := make(chan struct{})
		go func() { r.srv.Stop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			// Stop keeps draining in the background; the replica is already
			// out of the driver's set, so nothing starts it twice.
		}
	})
	return nil
}

func (r *simReplica) remoteStats(ctx context.Context) (replica.Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.d.scheme()+r.addr+"/v2/stats", nil)
	if err != nil {
		return replica.Stats{}, err
	}
	resp, err := r.d.client.Do(req)
	if err != nil {
		return replica.Stats{}, fmt.Errorf("stats probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return replica.Stats{}, fmt.Errorf("stats probe: status %d", resp.StatusCode)
	}
	var st replica.Stats
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return replica.Stats{}, fmt.Errorf("stats probe: %w", err)
	}
	if st.ReplicaID != r.spec.ID {
		return replica.Stats{}, fmt.Errorf("stats probe: %s serves replica %q, not %q", r.addr, st.ReplicaID, r.spec.ID)
	}
	return st, nil
}

// utilEstimate turns successive Stats into a compute utilisation. A
// predictor serves one request at a time on its GPU, so with arrivals at
// rate λ and a service time W the GPU is busy 1−e^(−λW) of the time (the
// chance at least one request is in service, for Poisson arrivals); λ comes
// from the request count between observations at least half a second
// apart, W from the windowed median latency. An LLM runtime steps its
// batch back to back while anything is running or queued, which is what
// nvidia-smi's utilisation counts, so its estimate is that busy flag
// smoothed over observations.
type utilEstimate struct {
	at       time.Time
	requests uint64
	pct      float64
}

func (u *utilEstimate) update(now time.Time, st replica.Stats) float64 {
	if st.Task == replica.TaskLLM {
		busy := 0.0
		if st.BatchSize > 0 || st.QueueDepth > 0 {
			busy = 100
		}
		u.pct = (u.pct + busy) / 2
		return u.pct
	}
	if u.at.IsZero() || st.Requests < u.requests {
		u.at, u.requests = now, st.Requests
		return u.pct
	}
	dt := now.Sub(u.at).Seconds()
	if dt < 0.5 {
		return u.pct
	}
	rate := float64(st.Requests-u.requests) / dt
	u.at, u.requests = now, st.Requests
	u.pct = 100 * (1 - math.Exp(-rate*st.LatencyP50Ms/1000))
	return u.pct
}

// replicaMemoryMB is the memory of all the replica's slots, or a CPU
// replica's memory.
func replicaMemoryMB(spec busapi.ReplicaSpec) (int64, error) {
	if isCPU(spec) {
		return int64(spec.MemoryMB), nil
	}
	per, ok := ProfileMemoryMB(spec.GPUType, spec.Profile)
	if !ok {
		return 0, fmt.Errorf("replica %s: unknown allocation profile %q on gpu type %q", spec.ID, spec.Profile, spec.GPUType)
	}
	if len(spec.Slots) == 0 {
		return 0, fmt.Errorf("replica %s: no slots", spec.ID)
	}
	return int64(per) * int64(len(spec.Slots)), nil
}

// seedOf gives each replica its own reproducible draws.
func seedOf(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

var _ Driver = (*SimDriver)(nil)
