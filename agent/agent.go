package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// Timeouts of single calls the agent makes.
const (
	natsCallTimeout = 5 * time.Second
	startTimeout    = 30 * time.Second
	// stopTimeout bounds a replica's drain; a replica that takes longer is
	// left to finish in the background.
	stopTimeout    = 60 * time.Second
	observeTimeout = 2 * time.Second
	// maxBackoff caps the wait between start attempts of a failing replica.
	maxBackoff = 5 * time.Minute
	// lostAfter is how many observations in a row a replica may fail to
	// answer before the agent counts it gone and starts it again.
	lostAfter = 3
	// readyPoll is how often a starting replica's readiness is checked, so
	// that it is reported ready (and routed to) within this time.
	readyPoll = 200 * time.Millisecond
)

// Agent is one node's agent. Build it with New, run it with Start, end it
// with Stop. Stop leaves the replicas running (unless the agent owns its
// driver): a new Agent on the same driver, or a new process with the same
// state directory, adopts them.
type Agent struct {
	cfg           Config
	nc            *nats.Conn
	js            jetstream.JetStream
	log           *slog.Logger
	drv           Driver
	ownDriver     *SimDriver // set when the agent made its driver, to close it on Stop
	bootID        string
	leaseSeconds  int
	statusSubject string
	usageSubject  string

	// nudge wakes the main loop to reconcile and send a heartbeat.
	nudge chan struct{}
	// logSub answers log requests when the driver keeps logs.
	logSub *nats.Subscription

	mu       sync.Mutex // guards the fields below
	gen      int64
	desired  []busapi.ReplicaSpec
	replicas map[string]*managed
	// stopping holds the ids whose replica is being stopped; nothing of
	// that id starts until the stop has finished, so two copies never run.
	stopping map[string]bool
	// prepping holds, per id, a channel closed when that id's model
	// directory preparation ends: a new spec of the id waits for the old
	// one's, which writes the same directory.
	prepping map[string]chan struct{}
	saved    []byte // the state file last written

	// The meter goroutine alone uses these after Start.
	spool   *spool
	lastSec int64
	// spoolSize lets Counters read the spool's size from any goroutine.
	spoolSize atomic.Pointer[spool]
	backlog   bool // batches wait for NATS; logged once per outage

	n counters

	runMu   sync.Mutex
	cancel  context.CancelFunc
	started bool
	stopped bool
	wg      sync.WaitGroup
}

// managed is the agent's view of one desired replica.
type managed struct {
	spec busapi.ReplicaSpec
	hash string
	rep  Replica // nil while not running
	// valid is false when the spec does not fit the inventory (a slot that
	// does not exist or is another replica's); such a replica is neither
	// started nor metered.
	valid  bool
	state  string
	reason string
	obs    Observation
	// observeErrs counts observations in a row that failed.
	observeErrs int
	failures    int
	retryAt     time.Time
	// preferAddr is the address the replica had before a restart.
	preferAddr string
	// metered is set once the meter has a baseline of the replica's request
	// count; lastRequests is that baseline.
	metered      bool
	lastRequests uint64
	// prepared is set once the cache has made the replica's model
	// directory, dir; cancelPrep ends a preparation in progress.
	prepared   bool
	dir        string
	cancelPrep context.CancelFunc
	// downloadMS and verifyMS are the cold start's first two parts.
	downloadMS, verifyMS int64
	// What runPrep needs of a preparation prepareLocked set up.
	prepCtx  context.Context
	prepPrev chan struct{}
	prepDone chan struct{}
}

// needsFiles reports whether the replica's model directory must be
// prepared before it starts: the agent keeps a cache and the version has
// files, unless it runs on the simulator, which reads none.
func (a *Agent) needsFiles(spec busapi.ReplicaSpec) bool {
	return a.cfg.Cache != nil && spec.Manifest != "" && spec.Runtime != "sim"
}

// New checks cfg and builds an agent on the connection nc, which the caller
// owns; give it infinite reconnects (nats.MaxReconnects(-1)) so that the
// agent outlives any NATS outage. It starts nothing.
func New(cfg Config, nc *nats.Conn, log *slog.Logger) (*Agent, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if nc == nil {
		return nil, errors.New("agent config: a NATS connection is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(slog.String("node", cfg.Node))
	// Without a timeout, a publish whose ack never comes while the
	// connection stays up would hold its in-flight slot until a reconnect.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight), jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	a := &Agent{
		cfg:           cfg,
		nc:            nc,
		js:            js,
		log:           log,
		drv:           cfg.Driver,
		bootID:        newBootID(),
		leaseSeconds:  int((cfg.Lease + time.Second - 1) / time.Second),
		statusSubject: busapi.NodeStatusSubject(cfg.Node),
		usageSubject:  busapi.UsageSubject(cfg.Node),
		nudge:         make(chan struct{}, 1),
		replicas:      make(map[string]*managed),
		stopping:      make(map[string]bool),
		prepping:      make(map[string]chan struct{}),
	}
	if a.drv == nil {
		a.ownDriver = NewSimDriver(SimDriverConfig{Log: log})
		a.drv = a.ownDriver
	}
	return a, nil
}

func newBootID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BootID identifies this agent's run in its heartbeats.
func (a *Agent) BootID() string { return a.bootID }

// Start reads the state directory, adopts the replicas that still run,
// starts those that do not, and runs the agent until ctx ends or Stop is
// called. It returns once the background loops run; an error means the
// state directory is unusable.
func (a *Agent) Start(ctx context.Context) error {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if a.started {
		return errors.New("agent already started")
	}
	// Others may pass through the state directory but not list it: the
	// process driver's runtimes run as another user and must reach their
	// model files in the cache beneath it, while the credentials beside it
	// are files only the agent reads (0600) and the spool is 0700.
	if err := os.MkdirAll(a.cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(a.cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	sp, err := openSpool(filepath.Join(a.cfg.StateDir, "spool"), a.cfg.SpoolMaxBytes)
	if err != nil {
		return err
	}
	a.spool = sp
	a.spoolSize.Store(sp)
	if n := sp.len(); n > 0 {
		a.log.Info("replaying spooled usage batches", slog.Int("batches", n))
	}
	st, err := loadState(a.cfg.StateDir)
	if err != nil {
		// A state file we cannot read must not keep the agent down: the
		// desired state comes again from NATS. Keep it for a person.
		a.log.Error("state file unreadable; starting from the desired state alone", slog.String("error", err.Error()))
		_ = os.Rename(filepath.Join(a.cfg.StateDir, stateFile), filepath.Join(a.cfg.StateDir, stateFile+".bad"))
		st = savedState{}
	}
	if st.Node != "" && st.Node != a.cfg.Node {
		a.log.Error("state file belongs to another node; ignoring it", slog.String("file_node", st.Node))
		st = savedState{}
	}
	a.adopt(ctx, st)
	// Every agent answers, a driver without logs (the simulated one) that
	// it has none, so the control plane never mistakes it for a silent node.
	lr, _ := a.drv.(LogReader)
	if a.logSub, err = a.nc.Subscribe(busapi.LogsSubject(a.cfg.Node), func(m *nats.Msg) { a.answerLog(lr, m) }); err != nil {
		return fmt.Errorf("subscribe to log requests: %w", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.started = true
	a.wg.Add(2)
	go a.run(runCtx)
	go a.meterLoop(runCtx)
	return nil
}

// Stop ends the agent's loops and waits for them. Usage batches not yet
// acknowledged stay in the spool for the next run. Replicas keep running
// unless the agent made its own driver, which it then closes.
func (a *Agent) Stop() {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if !a.started || a.stopped {
		return
	}
	a.stopped = true
	if a.logSub != nil {
		_ = a.logSub.Unsubscribe()
	}
	a.cancel()
	a.wg.Wait()
	if a.ownDriver != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		a.ownDriver.Close(ctx)
		cancel()
	}
}

// adopt restores the desired set of the state file and takes over its
// replicas still running: from the driver when it outlived the previous
// agent, else by probing the address the state file recorded. What is not
// found is started by the first reconcile, on its old address if free.
func (a *Agent) adopt(ctx context.Context, st savedState) {
	running := make(map[string]Replica)
	for _, r := range a.drv.Running() {
		running[r.Spec().ID] = r
	}
	// Probes may take a moment; nothing else runs yet, but Status and
	// Counters may be called, so the lock is taken only to install.
	var found []*managed
	var stale []Replica
	seen := make(map[string]bool)
	for _, sr := range st.Replicas {
		spec := sr.Spec
		if spec.ID == "" || seen[spec.ID] {
			continue
		}
		seen[spec.ID] = true
		m := &managed{spec: spec, hash: specHash(spec), state: busapi.StateStarting, preferAddr: sr.Addr}
		if r, ok := running[spec.ID]; ok {
			if specHash(r.Spec()) == m.hash {
				m.rep = r
			} else {
				stale = append(stale, r)
			}
		} else if sr.Addr != "" {
			actx, cancel := context.WithTimeout(ctx, observeTimeout)
			r, err := a.drv.Adopt(actx, spec, sr.Addr)
			cancel()
			if err == nil {
				m.rep = r
			} else {
				a.log.Info("replica of the previous run is gone; starting it again", slog.String("replica", spec.ID), slog.String("addr", sr.Addr), slog.String("reason", err.Error()))
			}
		}
		if m.rep != nil && a.needsFiles(spec) {
			// Its directory is the previous run's: keep its files.
			a.cfg.Cache.Pin(spec.ID, spec.Manifest)
			m.prepared, m.dir = true, a.cfg.Cache.Dir(spec.ID)
		}
		if m.rep != nil {
			a.n.adoptions.Add(1)
			m.preferAddr = m.rep.Addr()
			a.log.Info("adopted replica", slog.String("replica", spec.ID), slog.String("addr", m.rep.Addr()))
		}
		found = append(found, m)
	}
	if a.cfg.Cache != nil {
		if err := a.cfg.Cache.Prune(); err != nil {
			a.log.Warn("model directories of gone replicas not removed", slog.String("error", err.Error()))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen = st.Generation
	for _, m := range found {
		a.replicas[m.spec.ID] = m
		a.desired = append(a.desired, m.spec)
	}
	for _, r := range stale {
		a.retireLocked(r.Spec().ID, r) // runs another spec than recorded
	}
	// Replicas the driver runs that the state file does not list are left
	// alone: a driver may serve several agents (a simulated fleet in one
	// process), and ids are unique in the fleet, so they are another
	// node's. Should one be this node's after all (its state file was
	// lost), the desired state names it and the driver's Start hands back
	// the running replica instead of a second copy.
}

// run is the main loop: the desired-state watch, reconciles, heartbeats.
func (a *Agent) run(ctx context.Context) {
	defer a.wg.Done()
	a.reconcile(ctx)
	a.refresh(ctx)
	a.heartbeat()

	hb := a.cfg.Clock.NewTicker(a.cfg.Heartbeat, "agent", "heartbeat")
	defer hb.Stop()
	// Watching is retried on the wall clock: it waits for NATS, not for
	// anything the agent schedules.
	watchRetry := time.NewTimer(0)
	defer watchRetry.Stop()
	wake := a.cfg.Clock.NewTimer(time.Hour, "agent", "wake")
	defer wake.Stop()
	var (
		w       jetstream.KeyWatcher
		unwatch context.CancelFunc
		updates <-chan jetstream.KeyValueEntry
		waiting bool // logged that the bucket is missing
	)
	drop := func() {
		if w != nil {
			_ = w.Stop()
			unwatch()
		}
		w, unwatch, updates = nil, nil, nil
	}
	defer drop()
	// After an outage the watch's consumer may be gone with the server;
	// the ordered consumer would notice only after missing heartbeats, so
	// watch afresh on every reconnect. The current value comes again and,
	// unless it is new, is ignored as replayed.
	reconnected := a.nc.StatusChanged(nats.CONNECTED)
	defer a.nc.RemoveStatusListener(reconnected)
	for {
		a.schedule(wake)
		select {
		case <-ctx.Done():
			return
		case <-watchRetry.C:
			var err error
			if w, unwatch, err = a.watch(ctx); err != nil {
				if !waiting {
					a.log.Warn("cannot watch the desired state yet; retrying every second", slog.String("error", err.Error()))
					waiting = true
				}
				watchRetry.Reset(time.Second)
				continue
			}
			waiting = false
			updates = w.Updates()
		case e, ok := <-updates:
			if !ok {
				// The subscription ended (connection closed); watch again.
				drop()
				watchRetry.Reset(time.Second)
				continue
			}
			if a.apply(e) {
				a.reconcile(ctx)
				a.refresh(ctx)
				a.heartbeat()
			}
		case <-reconnected:
			a.log.Info("nats reconnected; watching the desired state afresh")
			drop()
			watchRetry.Reset(0)
			a.heartbeat()
		case <-hb.C:
			a.heartbeat()
		case <-a.nudge:
			a.reconcile(ctx)
			a.refresh(ctx)
			a.heartbeat()
		case <-wake.C:
			a.reconcile(ctx)
			if a.refresh(ctx) {
				a.heartbeat()
			}
		}
	}
}

// poke asks the main loop to reconcile and report soon.
func (a *Agent) poke() {
	select {
	case a.nudge <- struct{}{}:
	default:
	}
}

// watch opens the watcher of this node's desired-state key. The bucket is
// the control plane's to create; until it exists this fails and run
// retries. The watch lives as long as its context, so it gets its own,
// which cancel ends; creation is still bounded by natsCallTimeout.
func (a *Agent) watch(ctx context.Context) (jetstream.KeyWatcher, context.CancelFunc, error) {
	if !a.nc.IsConnected() {
		return nil, nil, errors.New("nats is not connected")
	}
	cctx, cancel := context.WithTimeout(ctx, natsCallTimeout)
	defer cancel()
	kv, err := a.js.KeyValue(cctx, busapi.BucketDesired)
	if err != nil {
		return nil, nil, fmt.Errorf("bucket %s: %w", busapi.BucketDesired, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	slow := time.AfterFunc(natsCallTimeout, wcancel)
	w, err := kv.Watch(wctx, a.cfg.Node)
	if !slow.Stop() {
		err = cmp.Or(err, context.DeadlineExceeded)
	}
	if err != nil {
		if w != nil {
			_ = w.Stop()
		}
		wcancel()
		return nil, nil, fmt.Errorf("watch %s/%s: %w", busapi.BucketDesired, a.cfg.Node, err)
	}
	return w, wcancel, nil
}

// apply takes one desired-state entry and reports whether the desired set
// changed. A generation at or below the applied one is stale or replayed
// and changes nothing; a deleted key empties the set.
func (a *Agent) apply(e jetstream.KeyValueEntry) bool {
	if e == nil {
		return false // the watch has delivered the current value
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		if len(a.desired) == 0 {
			a.handDesiredLocked()
			return false
		}
		a.log.Info("desired state deleted; stopping every replica")
		a.desired = nil
		a.handDesiredLocked()
		a.n.applied.Add(1)
		return true
	}
	var d busapi.Desired
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		a.n.ignored.Add(1)
		a.log.Error("desired state is not valid JSON; ignoring it", slog.Uint64("revision", e.Revision()), slog.String("error", err.Error()))
		return false
	}
	if d.Node != "" && d.Node != a.cfg.Node {
		a.n.ignored.Add(1)
		a.log.Error("desired state names another node; ignoring it", slog.String("desired_node", d.Node))
		return false
	}
	if d.Generation <= a.gen {
		if d.Generation == a.gen && a.gen > 0 {
			// The one the agent holds, replayed: it is still the
			// control plane's word after a restart with the state file,
			// and the only word on the teams' quotas, which the state
			// file does not keep.
			if qs, ok := a.drv.(QuotaSetter); ok {
				qs.SetTeamQuotas(d.Quotas)
			}
			a.handDesiredLocked()
		}
		a.n.ignored.Add(1)
		a.log.Debug("stale or replayed desired state ignored", slog.Int64("generation", d.Generation), slog.Int64("applied", a.gen))
		return false
	}
	a.gen = d.Generation
	if qs, ok := a.drv.(QuotaSetter); ok {
		qs.SetTeamQuotas(d.Quotas)
	}
	a.desired = a.desired[:0:0]
	seen := make(map[string]bool, len(d.Replicas))
	for _, spec := range d.Replicas {
		if spec.ID == "" || seen[spec.ID] {
			a.log.Error("desired state repeats or omits a replica id; skipping that entry", slog.String("replica", spec.ID), slog.Int64("generation", d.Generation))
			continue
		}
		seen[spec.ID] = true
		a.desired = append(a.desired, spec)
	}
	a.handDesiredLocked()
	a.n.applied.Add(1)
	a.log.Info("desired state", slog.Int64("generation", d.Generation), slog.Int("replicas", len(d.Replicas)))
	return true
}

// handDesiredLocked hands the desired set to a driver that sweeps what
// its replicas leave behind (DesiredSetter). Only apply calls it, so
// never before the first desired state of the run and always after
// adoption.
func (a *Agent) handDesiredLocked() {
	if ds, ok := a.drv.(DesiredSetter); ok {
		ds.SetDesired(slices.Clone(a.desired))
	}
}

// reconcile makes the running replicas match the desired set: it stops
// what is not desired (or runs another spec under the same id), starts
// what is missing, and retries failed starts whose backoff has passed. It
// is idempotent; only the main loop calls it.
func (a *Agent) reconcile(ctx context.Context) {
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	want := make(map[string]bool, len(a.desired))
	var order []*managed
	// Model directories to release and to prepare, once the lock is
	// dropped: a release of an id comes before a new preparation of it.
	var releases []string
	var preps []*managed
	for _, spec := range a.desired { // ids unique and set: apply and adopt see to it
		want[spec.ID] = true
		h := specHash(spec)
		m := a.replicas[spec.ID]
		if m != nil && m.hash != h {
			a.log.Info("replica spec changed; restarting it", slog.String("replica", spec.ID))
			if m.rep != nil {
				a.retireLocked(spec.ID, m.rep)
			}
			releases = append(releases, a.forgetLocked(m)...)
			m = nil
		}
		if m == nil {
			m = &managed{spec: spec, hash: h, state: busapi.StateStarting}
			a.replicas[spec.ID] = m
		}
		order = append(order, m)
	}
	for id, m := range a.replicas {
		if want[id] {
			continue
		}
		if m.rep != nil {
			a.retireLocked(id, m.rep)
		}
		releases = append(releases, a.forgetLocked(m)...)
		delete(a.replicas, id)
	}
	a.followLocked()
	a.validateLocked(order)
	var starts []*managed
	for _, m := range order {
		if m.rep != nil && !m.valid {
			// Adopted, but it no longer fits the inventory (the node's GPUs
			// changed between runs): nothing it holds is really its own.
			a.retireLocked(m.spec.ID, m.rep)
			m.rep, m.metered = nil, false
		}
		if m.rep != nil && m.observeErrs >= lostAfter {
			a.log.Warn("replica stopped answering; starting it again", slog.String("replica", m.spec.ID))
			a.retireLocked(m.spec.ID, m.rep)
			m.rep, m.observeErrs, m.metered = nil, 0, false
			a.failLocked(m, now, "replica stopped answering")
		}
		if !m.valid || m.rep != nil || a.stopping[m.spec.ID] {
			continue
		}
		if m.state == busapi.StateFailed && now.Before(m.retryAt) {
			continue
		}
		if a.needsFiles(m.spec) && !m.prepared {
			if m.cancelPrep == nil {
				preps = append(preps, m)
			}
			continue
		}
		starts = append(starts, m)
	}
	for _, m := range preps {
		a.prepareLocked(ctx, m)
	}
	a.mu.Unlock()
	for _, id := range releases {
		a.cfg.Cache.Release(id)
	}
	for _, m := range preps {
		a.runPrep(m)
	}

	// Starts run outside the lock so that the meter and heartbeats carry
	// on; only this goroutine changes which replicas exist.
	for _, m := range starts {
		sctx, cancel := context.WithTimeout(ctx, startTimeout)
		r, err := a.drv.Start(sctx, m.spec, StartOptions{Addr: m.preferAddr, ModelDir: m.dir})
		cancel()
		a.mu.Lock()
		if a.replicas[m.spec.ID] != m {
			// Cannot happen while only this goroutine edits the set; keep
			// the invariant anyway: a replica nobody tracks is stopped.
			if err == nil {
				a.retireLocked(m.spec.ID, r)
			}
			a.mu.Unlock()
			continue
		}
		if err != nil {
			// The retry time is set before the failure is counted: a test
			// that sees the count may move the clock on.
			a.failLocked(m, a.cfg.Clock.Now(), err.Error())
			a.n.startFailures.Add(1)
			a.log.Error("replica failed to start", slog.String("replica", m.spec.ID), slog.String("error", err.Error()),
				slog.Int("failures", m.failures), slog.Time("retry_at", m.retryAt))
		} else {
			a.n.starts.Add(1)
			m.rep, m.state, m.reason, m.obs = r, busapi.StateStarting, "", Observation{}
			m.preferAddr = r.Addr()
			m.metered, m.lastRequests = true, 0 // a fresh replica counts from zero
			a.log.Info("replica started", slog.String("replica", m.spec.ID), slog.String("addr", r.Addr()))
		}
		a.mu.Unlock()
	}
	a.saveState()
}

// forgetLocked ends what the agent does for a replica it no longer runs
// under this spec: a preparation in progress is cancelled, and the ids
// whose model directories must be released are returned (they are
// released outside the lock).
func (a *Agent) forgetLocked(m *managed) []string {
	if m.cancelPrep != nil {
		m.cancelPrep()
		m.cancelPrep = nil
	}
	if !a.needsFiles(m.spec) {
		return nil
	}
	return []string{m.spec.ID}
}

// prepMsg is a starting replica's reason while its files are prepared.
const prepMsg = "preparing model files"

// prepareLocked marks m as being prepared; runPrep, called once the lock
// is dropped, does it in the background, so that a download never delays
// heartbeats. A later reconcile starts the replica.
func (a *Agent) prepareLocked(ctx context.Context, m *managed) {
	pctx, cancel := context.WithCancel(ctx)
	m.cancelPrep = cancel
	if m.state != busapi.StateFailed {
		// A retry keeps its failure's reason until it gets further.
		m.state, m.reason = busapi.StateStarting, prepMsg
	}
	prev := a.prepping[m.spec.ID]
	done := make(chan struct{})
	a.prepping[m.spec.ID] = done
	m.prepCtx, m.prepPrev, m.prepDone = pctx, prev, done
}

// runPrep prepares m's model directory in the background.
func (a *Agent) runPrep(m *managed) {
	a.mu.Lock()
	pctx, prev, done, cancel := m.prepCtx, m.prepPrev, m.prepDone, m.cancelPrep
	spec := m.spec
	a.mu.Unlock()
	a.wg.Go(func() {
		defer close(done)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-pctx.Done():
				return
			}
		}
		p, err := a.cfg.Cache.Prepare(pctx, spec)
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.prepping[spec.ID] == done {
			delete(a.prepping, spec.ID)
		}
		cur := a.replicas[spec.ID]
		if cur != m {
			if cur == nil {
				// Gone while it was prepared: its directory goes too.
				a.wg.Go(func() { a.cfg.Cache.Release(spec.ID) })
			}
			return
		}
		m.cancelPrep = nil
		if pctx.Err() != nil {
			return
		}
		if err != nil {
			a.failLocked(m, a.cfg.Clock.Now(), "prepare model files: "+err.Error())
			a.n.startFailures.Add(1)
			a.log.Error("replica's model files not prepared", slog.String("replica", spec.ID), slog.String("error", err.Error()),
				slog.Int("failures", m.failures), slog.Time("retry_at", m.retryAt))
		} else {
			m.prepared, m.dir = true, p.Dir
			m.downloadMS, m.verifyMS = p.Download.Milliseconds(), p.Verify.Milliseconds()
			if m.reason == prepMsg {
				m.reason = ""
			}
			a.log.Info("replica's model files ready", slog.String("replica", spec.ID), slog.String("dir", p.Dir),
				slog.Int("fetched", p.Fetched), slog.Int64("download_ms", m.downloadMS), slog.Int64("verify_ms", m.verifyMS))
		}
		a.poke()
	})
}

// failLocked marks a replica failed and schedules its next start with an
// exponential backoff, so a replica that cannot start never loops hot.
func (a *Agent) failLocked(m *managed, now time.Time, reason string) {
	m.failures++
	m.state, m.reason = busapi.StateFailed, reason
	m.retryAt = now.Add(min(time.Second<<min(m.failures-1, 20), maxBackoff))
}

// validateLocked checks each desired replica against the inventory and
// gives every slot to one replica at most. Running replicas claim their
// slots first, so a later conflicting spec never displaces one that serves.
func (a *Agent) validateLocked(order []*managed) {
	owner := make(map[busapi.Slot]string)
	var cpu cpuHeld
	check := func(m *managed) {
		reason := ""
		if a.cfg.CPUNode() || isCPU(m.spec) {
			reason = a.checkCPU(m.spec, &cpu)
		} else {
			reason = a.checkSlots(m.spec, owner)
		}
		if reason != "" {
			if m.valid || m.reason != reason {
				a.log.Error("replica does not fit this node", slog.String("replica", m.spec.ID), slog.String("reason", reason))
			}
			m.valid, m.state, m.reason = false, busapi.StateFailed, reason
			return
		}
		if !m.valid && m.rep == nil && m.failures == 0 {
			m.state, m.reason = busapi.StateStarting, ""
		}
		m.valid = true
		for _, s := range m.spec.Slots {
			owner[s] = m.spec.ID
		}
	}
	for _, m := range order {
		if m.rep != nil {
			check(m)
		}
	}
	for _, m := range order {
		if m.rep == nil {
			check(m)
		}
	}
}

// isCPU reports whether spec is a CPU replica's.
func isCPU(spec busapi.ReplicaSpec) bool { return spec.Profile == busapi.ProfileCPU }

// cpuHeld is what the replicas checked so far hold of a CPU node.
type cpuHeld struct{ cores, memoryMB int }

// checkCPU returns why spec does not fit this CPU node, or "", and adds
// what it holds to held. The control plane keeps a node's replicas within
// its inventory; this catches a node restarted with fewer cores, or a
// GPU replica sent to a CPU node and the other way round.
func (a *Agent) checkCPU(spec busapi.ReplicaSpec, held *cpuHeld) string {
	switch {
	case !a.cfg.CPUNode():
		return "a CPU replica on a GPU node; CPU versions run on CPU nodes"
	case !isCPU(spec):
		return fmt.Sprintf("a %s replica on a CPU node, which has no GPUs", cmp.Or(spec.Profile, "GPU"))
	case len(spec.Slots) > 0:
		return "a CPU replica with GPU slots"
	case spec.CPUCores < 1:
		return "no CPU cores allocated"
	case spec.MemoryMB < 0:
		return "negative memory allocated"
	case held.cores+spec.CPUCores > a.cfg.CPUCores:
		return fmt.Sprintf("needs %d cores; %d of the node's %d are free", spec.CPUCores, a.cfg.CPUCores-held.cores, a.cfg.CPUCores)
	case held.memoryMB+spec.MemoryMB > a.cfg.MemoryMB:
		return fmt.Sprintf("needs %d MiB of memory; %d of the node's %d are free", spec.MemoryMB, a.cfg.MemoryMB-held.memoryMB, a.cfg.MemoryMB)
	}
	held.cores += spec.CPUCores
	held.memoryMB += spec.MemoryMB
	return ""
}

// checkSlots returns why spec does not fit, or "".
func (a *Agent) checkSlots(spec busapi.ReplicaSpec, owner map[busapi.Slot]string) string {
	if len(spec.Slots) == 0 {
		return "no GPU slots allocated"
	}
	seen := make(map[busapi.Slot]bool, len(spec.Slots))
	for _, s := range spec.Slots {
		if s.GPU < 0 || s.GPU >= len(a.cfg.GPUs) {
			return fmt.Sprintf("gpu %d does not exist on this node", s.GPU)
		}
		g := a.cfg.GPUs[s.GPU]
		if s.Slice < 0 || s.Slice >= len(g.Slices) {
			return fmt.Sprintf("gpu %d has no slice %d", s.GPU, s.Slice)
		}
		if p := g.Slices[s.Slice].Profile; p != spec.Profile {
			return fmt.Sprintf("gpu %d slice %d is %s, not %s", s.GPU, s.Slice, p, spec.Profile)
		}
		if spec.GPUType != "" && !strings.EqualFold(g.Type, spec.GPUType) {
			return fmt.Sprintf("gpu %d is a %s, not a %s", s.GPU, g.Type, spec.GPUType)
		}
		if seen[s] {
			return fmt.Sprintf("gpu %d slice %d is listed twice", s.GPU, s.Slice)
		}
		seen[s] = true
		if o, ok := owner[s]; ok {
			return fmt.Sprintf("gpu %d slice %d is already replica %s's", s.GPU, s.Slice, o)
		}
	}
	return ""
}

// followLocked takes a pool's current inventory from its driver
// (InventorySource); a node's stays what Config says.
func (a *Agent) followLocked() {
	src, ok := a.drv.(InventorySource)
	if !ok {
		return
	}
	gpus, cores, mem := src.PoolInventory()
	if cores != a.cfg.CPUCores || mem != a.cfg.MemoryMB || !slices.EqualFunc(gpus, a.cfg.GPUs, sameGPU) {
		a.log.Info("pool inventory changed", slog.Int("gpus", len(gpus)), slog.Int("cpu_cores", cores), slog.Int("memory_mb", mem))
	}
	a.cfg.GPUs, a.cfg.CPUCores, a.cfg.MemoryMB = gpus, cores, mem
}

func sameGPU(x, y busapi.GPU) bool {
	return x.Index == y.Index && x.Type == y.Type && x.MemoryMB == y.MemoryMB && x.MIG == y.MIG && slices.Equal(x.Slices, y.Slices)
}

// retireLocked stops a replica in the background, so that a long drain
// never delays heartbeats; its id cannot start again until it has ended.
func (a *Agent) retireLocked(id string, r Replica) {
	a.stopping[id] = true
	a.n.stops.Add(1)
	a.log.Info("stopping replica", slog.String("replica", id))
	a.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			a.log.Error("replica stop failed", slog.String("replica", id), slog.String("error", err.Error()))
		}
		a.mu.Lock()
		delete(a.stopping, id)
		a.mu.Unlock()
		a.poke()
	})
}

// refresh observes the replicas still starting and reports whether any
// became ready.
func (a *Agent) refresh(ctx context.Context) bool {
	a.mu.Lock()
	var todo []*managed
	for _, m := range a.replicas {
		if m.rep != nil && m.state != busapi.StateReady {
			todo = append(todo, m)
		}
	}
	a.mu.Unlock()
	changed := false
	for _, m := range todo {
		if a.observe(ctx, m) {
			changed = true
		}
	}
	return changed
}

// observe takes one observation of m and reports whether its state
// changed. Used by the main loop for starting replicas and by the meter
// every second for all.
func (a *Agent) observe(ctx context.Context, m *managed) bool {
	a.mu.Lock()
	r := m.rep
	a.mu.Unlock()
	if r == nil {
		return false
	}
	octx, cancel := context.WithTimeout(ctx, observeTimeout)
	o, err := r.Observe(octx)
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if m.rep != r {
		return false
	}
	if err != nil {
		m.observeErrs++
		if m.observeErrs == lostAfter {
			a.poke()
		}
		return false
	}
	m.observeErrs = 0
	m.obs = o
	prev, prevReason := m.state, m.reason
	switch {
	case o.Ready:
		m.state, m.reason, m.failures = busapi.StateReady, "", 0
	case o.Failures > 0:
		// The driver restarts its runtime itself; until it is ready again
		// the replica is failed, with the driver's reason.
		m.state, m.reason = busapi.StateFailed, o.Reason
	default:
		m.state = busapi.StateStarting
	}
	return prev != m.state || prevReason != m.reason
}

// schedule sets the wake timer to the next time the main loop has work of
// its own: a readiness check or a start retry, at once when one is due. A
// retry waiting for the stop of its id's old copy is not scheduled: the
// stop pokes the loop when it has ended.
func (a *Agent) schedule(t *quartz.Timer) {
	now := a.cfg.Clock.Now()
	next := time.Hour
	a.mu.Lock()
	for _, m := range a.replicas {
		switch {
		case m.rep != nil && m.state != busapi.StateReady:
			next = min(next, readyPoll)
		case m.rep == nil && m.valid && m.state == busapi.StateFailed && !a.stopping[m.spec.ID]:
			next = min(next, max(m.retryAt.Sub(now), 0))
		}
	}
	a.mu.Unlock()
	t.Reset(next, "agent", "wake")
}

// saveState writes the state file when what it records changed.
func (a *Agent) saveState() {
	a.mu.Lock()
	st := savedState{Node: a.cfg.Node, Generation: a.gen}
	for _, spec := range a.desired {
		m := a.replicas[spec.ID]
		if m == nil || m.spec.ID != spec.ID || slices.ContainsFunc(st.Replicas, func(s savedReplica) bool { return s.Spec.ID == spec.ID }) {
			continue
		}
		sr := savedReplica{Spec: m.spec, Hash: m.hash, Addr: m.preferAddr}
		if m.rep != nil {
			sr.Addr = m.rep.Addr()
		}
		st.Replicas = append(st.Replicas, sr)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil || string(data) == string(a.saved) {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	if err := writeState(a.cfg.StateDir, data); err != nil {
		a.log.Error("state file not written; a restart may start replicas again", slog.String("error", err.Error()))
		return
	}
	a.mu.Lock()
	a.saved = data
	a.mu.Unlock()
}

// Status is the heartbeat the agent would send now.
func (a *Agent) Status() busapi.NodeStatus {
	// Asked before the lock: the process driver looks its programs up
	// on PATH.
	var runtimes []string
	if l, ok := a.drv.(RuntimeLister); ok {
		runtimes = l.Runtimes()
		if runtimes == nil {
			runtimes = []string{} // it said: none
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.followLocked()
	st := busapi.NodeStatus{
		Node:         a.cfg.Node,
		BootID:       a.bootID,
		Time:         a.cfg.Clock.Now().UTC(),
		LeaseSeconds: a.leaseSeconds,
		Generation:   a.gen,
		GPUs:         make([]busapi.GPU, len(a.cfg.GPUs)),
		CPUCores:     a.cfg.CPUCores,
		MemoryMB:     a.cfg.MemoryMB,
		Replicas:     make([]busapi.ReplicaStatus, 0, len(a.replicas)),
	}
	for i, g := range a.cfg.GPUs {
		g.Slices = slices.Clone(g.Slices)
		g.UtilPct, g.MemoryUsedMB = 0, 0
		st.GPUs[i] = g
	}
	for _, m := range a.replicas {
		rs := busapi.ReplicaStatus{ID: m.spec.ID, State: m.state, Reason: m.reason, Failures: m.failures,
			DownloadMS: m.downloadMS, VerifyMS: m.verifyMS}
		if m.rep != nil {
			rs.LoadMS, rs.WarmupMS = m.obs.LoadMS, m.obs.WarmupMS
			rs.Launch = m.obs.Launch
			if m.state != busapi.StateReady {
				// Failed starts the agent counted, then the driver's
				// failures in a row of the runtime it started.
				rs.Failures += m.obs.Failures
			}
			rs.Addr, rs.ServerName = m.rep.Addr(), m.obs.ServerName
			rs.QueueDepth = m.obs.QueueDepth
			rs.KVUsedPct = m.obs.KVUsedPct
			rs.Requests = int64(m.obs.Requests)
			rs.InFlight, rs.BatchSize = m.obs.InFlight, m.obs.BatchSize
			rs.TokensPerSecond, rs.TTFTMS = m.obs.TokensPerSecond, m.obs.TTFTMS
			rs.Tokens, rs.PromptTokens = m.obs.Tokens, m.obs.PromptTokens
			rs.BatchQueueMS, rs.GPUUtil = m.obs.BatchQueueMS, m.obs.GPUUtil
			rs.Absent, rs.Runtime = slices.Clone(m.obs.Absent), m.obs.Runtime
			if rs.GPUUtil == 0 && !isCPU(m.spec) && rs.Reports(busapi.MetricGPUUtil) {
				rs.GPUUtil = min(m.obs.UtilPct/100, 1)
			}
			if m.valid && isCPU(m.spec) {
				st.CPUCoresUsed += m.spec.CPUCores
				st.MemoryUsedMB += m.spec.MemoryMB
			} else if m.valid {
				for i, s := range m.spec.Slots {
					if s.GPU >= len(st.GPUs) || s.Slice >= len(st.GPUs[s.GPU].Slices) {
						continue // a pool's GPU gone since the last check
					}
					g := &st.GPUs[s.GPU]
					g.UtilPct += m.obs.UtilPct * sliceComputeShare(g.Slices[s.Slice].Profile)
					g.MemoryUsedMB += int(slotShare(m.obs.MemoryMB, len(m.spec.Slots), i))
				}
			}
		}
		st.Replicas = append(st.Replicas, rs)
	}
	for i := range st.GPUs {
		st.GPUs[i].UtilPct = min(st.GPUs[i].UtilPct, 100)
	}
	if a.cfg.Cache != nil {
		cs := a.cfg.Cache.Stats()
		st.Cache = &cs
	}
	st.Runtimes = runtimes
	slices.SortFunc(st.Replicas, func(x, y busapi.ReplicaStatus) int { return cmp.Compare(x.ID, y.ID) })
	return st
}

// slotShare splits total over n slots, the remainder on the first.
func slotShare(total int64, n, i int) int64 {
	if n <= 0 {
		return 0
	}
	s := total / int64(n)
	if i == 0 {
		s += total % int64(n)
	}
	return s
}

// heartbeat publishes the status on core NATS. While NATS is unreachable
// it is skipped and counted, not buffered: a stale heartbeat delivered
// late would only mislead the lease.
func (a *Agent) heartbeat() {
	if !a.nc.IsConnected() {
		a.n.hbFailed.Add(1)
		return
	}
	data, err := json.Marshal(a.Status())
	if err == nil {
		err = a.nc.Publish(a.statusSubject, data)
	}
	if err != nil {
		a.n.hbFailed.Add(1)
		a.log.Debug("heartbeat not sent", slog.String("error", err.Error()))
		return
	}
	a.n.hbSent.Add(1)
}

// Counters are the agent's running totals since New, for tests, logs and
// the dev fleet's status.
type Counters struct {
	HeartbeatsSent   uint64
	HeartbeatsFailed uint64
	// DesiredApplied counts desired states that changed the set;
	// DesiredIgnored stale, replayed or unreadable ones.
	DesiredApplied uint64
	DesiredIgnored uint64
	// ReplicaStarts counts successful driver starts, ReplicaStartFailures
	// failed ones, ReplicaStops stops asked of the driver and
	// ReplicaAdoptions replicas taken over at Start.
	ReplicaStarts        uint64
	ReplicaStartFailures uint64
	ReplicaStops         uint64
	ReplicaAdoptions     uint64
	// UsageRecords and UsageBatches count what the meter produced;
	// BatchesAcked those JetStream acknowledged (BatchesDuplicate of them
	// as already stored); PublishFailures attempts left for a replay.
	UsageRecords     uint64
	UsageBatches     uint64
	BatchesAcked     uint64
	BatchesDuplicate uint64
	PublishFailures  uint64
	// BatchesDropped and RecordsDropped were lost to a full or unwritable
	// spool; any above zero is lost revenue and is logged as an error.
	BatchesDropped uint64
	RecordsDropped uint64
	// SpoolBatches and SpoolBytes are what waits in the spool now.
	SpoolBatches int64
	SpoolBytes   int64
}

type counters struct {
	hbSent, hbFailed                             atomic.Uint64
	applied, ignored                             atomic.Uint64
	starts, startFailures, stops, adoptions      atomic.Uint64
	records, batches, acked, duplicate, pubFails atomic.Uint64
	batchesDropped, recordsDropped               atomic.Uint64
}

// Counters returns the running totals.
func (a *Agent) Counters() Counters {
	c := Counters{
		HeartbeatsSent:       a.n.hbSent.Load(),
		HeartbeatsFailed:     a.n.hbFailed.Load(),
		DesiredApplied:       a.n.applied.Load(),
		DesiredIgnored:       a.n.ignored.Load(),
		ReplicaStarts:        a.n.starts.Load(),
		ReplicaStartFailures: a.n.startFailures.Load(),
		ReplicaStops:         a.n.stops.Load(),
		ReplicaAdoptions:     a.n.adoptions.Load(),
		UsageRecords:         a.n.records.Load(),
		UsageBatches:         a.n.batches.Load(),
		BatchesAcked:         a.n.acked.Load(),
		BatchesDuplicate:     a.n.duplicate.Load(),
		PublishFailures:      a.n.pubFails.Load(),
		BatchesDropped:       a.n.batchesDropped.Load(),
		RecordsDropped:       a.n.recordsDropped.Load(),
	}
	if sp := a.spoolSize.Load(); sp != nil {
		c.SpoolBatches, c.SpoolBytes = sp.count.Load(), sp.size.Load()
	}
	return c
}

// answerLog answers one log request (lr nil: the driver keeps no logs) for
// a replica this agent runs (or is starting, or has failed): only those,
// so a request cannot name another file of the node.
func (a *Agent) answerLog(lr LogReader, m *nats.Msg) {
	var req busapi.LogRequest
	var out busapi.LogChunk
	if err := json.Unmarshal(m.Data, &req); err != nil {
		out.Error = "bad log request: " + err.Error()
	} else if !a.runs(req.Replica) {
		out.Error = "replica " + req.Replica + " does not run on node " + a.cfg.Node
	} else if lr == nil {
		out.Error = "node " + a.cfg.Node + " keeps no replica logs: its replicas are simulated and run no process"
	} else if c, err := lr.ReadLog(req, busapi.MaxLogChunk); err != nil {
		out.Error, out.Unsupported = err.Error(), errors.Is(err, ErrLogUnsupported)
	} else {
		out = c
	}
	data, _ := json.Marshal(out)
	if err := m.Respond(data); err != nil {
		a.log.Warn("answer log request", slog.String("replica", req.Replica), slog.String("error", err.Error()))
	}
}

// runs reports whether id is a replica of this agent's desired set or one
// it manages.
func (a *Agent) runs(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.replicas[id]; ok {
		return true
	}
	for _, s := range a.desired {
		if s.ID == id {
			return true
		}
	}
	return false
}
