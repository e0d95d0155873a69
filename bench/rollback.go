package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/gateway"
	"modelplane/outbox"
)

// Settings of `modelplane bench rollback`.
const (
	defaultGateways = 50
	// loadSwitches routing writes alternate rollback (candidate at weight
	// 0) and restore (candidate back at canaryWeight); half of them are the
	// rollbacks the p99 is taken over.
	loadSwitches = 300
	// idleSwitches come first, with no load, for comparison.
	idleSwitches = 100
	canaryWeight = 10
	// settle is the pause after every gateway has a switch, so that each
	// switch starts from a settled fleet under load.
	settle = 40 * time.Millisecond
	// loadGap paces each gateway's client: one request at a time, then
	// this pause.
	loadGap = 20 * time.Millisecond
	// pollGap is the watcher's pause between two passes over every
	// gateway's routing generation: the resolution of the measure.
	pollGap          = 100 * time.Microsecond
	rollbackEndpoint = "rollback-bench"
	incumbentVersion = "v42"
	candidateVersion = "v43"
)

// RollbackResult is what `modelplane bench rollback` prints.
type RollbackResult struct {
	Name string `json:"name"`
	// PropagationP99Ms is the p99, over the rollbacks, of the time from the
	// decision (the start of the transaction that writes the outbox row)
	// to the moment the last gateway serves the new routing entry.
	PropagationP99Ms float64 `json:"propagation_p99_ms"`
	PropagationP50Ms float64 `json:"propagation_p50_ms"`
	PropagationMaxMs float64 `json:"propagation_max_ms"`
	// FirstGatewayP50Ms is the p50 of the time to the first gateway: the
	// write path (PostgreSQL commit, relay, JetStream) without the fan-out;
	// CommitP50Ms the p50 of the transaction alone.
	FirstGatewayP50Ms float64 `json:"first_gateway_p50_ms"`
	CommitP50Ms       float64 `json:"commit_p50_ms"`
	// IdlePropagationP99Ms and IdlePropagationP50Ms are the same measure
	// over idleSwitches/2 rollbacks written before the load starts.
	IdlePropagationP99Ms float64 `json:"idle_propagation_p99_ms"`
	IdlePropagationP50Ms float64 `json:"idle_propagation_p50_ms"`
	// AllSwitchesP99Ms is the p99 over every write, restores included.
	AllSwitchesP99Ms float64 `json:"all_switches_p99_ms"`
	Gateways         int     `json:"gateways"`
	Rollbacks        int     `json:"rollbacks"`
	Switches         int     `json:"switches"`
	// ErrorsDuringSwitch counts the requests of the load, sent all through
	// the switches, that failed (transport error or any status but 200).
	ErrorsDuringSwitch int `json:"errors_during_switch"`
	// CandidateAfterRollback counts responses from the candidate to
	// requests that started after their gateway held a rollback entry and
	// ended before it held another: must be 0.
	CandidateAfterRollback int `json:"candidate_after_rollback"`
	// Requests were served during the switches, RPS per second of them.
	Requests int     `json:"requests"`
	RPS      float64 `json:"rps"`
	// CandidateShare is the share of requests the candidate answered; about
	// half the canary weight, since it has its weight half of the time.
	CandidateShare float64 `json:"candidate_share"`
	// PollResolutionMs is the watcher's pause between passes.
	PollResolutionMs float64 `json:"poll_resolution_ms"`
	Cores            int     `json:"cores"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	Seconds          float64 `json:"seconds"`
	// Path names how the decision reaches the gateways.
	Path string `json:"path"`
}

// runRollback runs the benchmark and prints its result.
func runRollback(ctx context.Context, cfg Config, out io.Writer) error {
	n := cfg.Gateways
	if n == 0 {
		n = defaultGateways
	}
	if n < 1 || n > 1000 {
		return fmt.Errorf("bench rollback: --gateways %d: want 1 to 1000", n)
	}
	res, err := measureRollback(ctx, n)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "rollback: %d gateways, p99 %.2f ms (p50 %.2f, max %.2f) from the decision to the last gateway over %d rollbacks; %d errors in %d requests during the switches\n",
		res.Gateways, res.PropagationP99Ms, res.PropagationP50Ms, res.PropagationMaxMs, res.Rollbacks, res.ErrorsDuringSwitch, res.Requests)
}

// routeEntry is the endpoint's routing entry of one generation; the
// candidate keeps its replicas at weight 0 (they stay up for inspection).
func routeEntry(gen int64, candidateWeight int, inc, cand []string) []byte {
	rv := func(name string, w int, addrs []string) busapi.RouteVersion {
		v := busapi.RouteVersion{Name: name, Weight: w}
		for i, a := range addrs {
			v.Replicas = append(v.Replicas, busapi.RouteReplica{ID: fmt.Sprintf("%s-%d", name, i), Addr: a})
		}
		return v
	}
	b, _ := json.Marshal(busapi.Route{Endpoint: rollbackEndpoint, Team: "bench", Task: "classification", Generation: gen,
		Versions: []busapi.RouteVersion{rv(incumbentVersion, 100-candidateWeight, inc), rv(candidateVersion, candidateWeight, cand)}})
	return b
}

// isRollback reports whether generation gen is a rollback: generation 1
// is the canary at its weight, then even generations roll back and odd
// ones restore.
func isRollback(gen int64) bool { return gen > 1 && gen%2 == 0 }

// candidateWeightAt is the candidate's weight in generation gen.
func candidateWeightAt(gen int64) int {
	if isRollback(gen) {
		return 0
	}
	return canaryWeight
}

// rollbackBench is one run: the decision's write path, the replicas and
// the gateways watching the routing table.
type rollbackBench struct {
	pool      *pgxpool.Pool
	q         *db.Queries
	subject   string // the endpoint's key in mp_routes, as an outbox subject
	relay     *outbox.Relay
	inc, cand []string
	gws       []*gateway.Gateway
	urls      []string
	key       string
	client    *http.Client
}

// measureRollback measures how long a rollback takes to reach every
// gateway.
//
// The decision is written the way the control plane writes routing: an
// outbox row in a PostgreSQL transaction, published by the outbox relay
// (woken after the commit, as fleet's reconciler wakes it) to the
// mp_routes key through JetStream. n gateways, each with its own NATS
// connection, watch mp_routes and serve a steady load to an endpoint whose
// incumbent and candidate each have two replicas. A watcher polls every
// gateway's routing generation (gateway.RouteGeneration, read from the
// table the request path uses); the propagation of a write is the time
// from the start of its transaction to the pass in which the last gateway
// held it.
func measureRollback(ctx context.Context, n int) (RollbackResult, error) {
	began := time.Now()
	res := RollbackResult{Name: "rollback", Gateways: n, Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		PollResolutionMs: float64(pollGap) / float64(time.Millisecond),
		Path:             "outbox row (PostgreSQL) -> outbox.Relay -> JetStream $KV.mp_routes -> gateway KV watch"}
	s, err := newScratch("mp-bench-rb-")
	if err != nil {
		return res, err
	}
	defer s.close()
	b, err := startRollback(ctx, s, n)
	if err != nil {
		return res, err
	}
	// Without load first, to show what the contention adds: generations 2
	// to idleSwitches+1, ending on a restore.
	idle, err := b.switches(ctx, idleSwitches, 2)
	if err != nil {
		return res, fmt.Errorf("idle switches: %w", err)
	}
	res.IdlePropagationP99Ms = percentile(idle.rollbacks, 0.99)
	res.IdlePropagationP50Ms = percentile(idle.rollbacks, 0.50)

	load := b.startLoad(ctx)
	loadStart := time.Now()
	tm, err := b.switches(ctx, loadSwitches, int64(idleSwitches)+2)
	load.stop()
	elapsed := time.Since(loadStart)
	if err != nil {
		return res, fmt.Errorf("switches under load: %w", err)
	}
	res.CommitP50Ms = percentile(tm.commit, 0.50)
	res.Switches, res.Rollbacks = len(tm.all), len(tm.rollbacks)
	res.PropagationP99Ms = percentile(tm.rollbacks, 0.99)
	res.PropagationP50Ms = percentile(tm.rollbacks, 0.50)
	res.PropagationMaxMs = ms(slices.Max(tm.rollbacks))
	res.FirstGatewayP50Ms = percentile(tm.first, 0.50)
	res.AllSwitchesP99Ms = percentile(tm.all, 0.99)
	res.Requests = int(load.requests.Load())
	res.ErrorsDuringSwitch = int(load.errs.Load())
	res.CandidateAfterRollback = int(load.violations.Load())
	res.RPS = round3(float64(res.Requests) / elapsed.Seconds())
	if res.Requests > 0 {
		res.CandidateShare = round3(float64(load.candidate.Load()) / float64(res.Requests))
	}
	res.Seconds = round3(time.Since(began).Seconds())
	return res, nil
}

// startRollback starts PostgreSQL, NATS with a key, the outbox relay,
// four replicas (two per version) and n gateways, writes generation 1 and
// waits until every gateway serves it.
func startRollback(ctx context.Context, s *scratch, n int) (*rollbackBench, error) {
	b := &rollbackBench{subject: busapi.KVSubject(busapi.BucketRoutes, rollbackEndpoint)}
	var err error
	if b.pool, err = s.postgres(ctx); err != nil {
		return nil, err
	}
	b.q = db.New(b.pool)
	natsURL, js, err := s.nats(ctx)
	if err != nil {
		return nil, err
	}
	if b.key, err = putKey(ctx, js); err != nil {
		return nil, err
	}
	b.relay = outbox.NewRelay(b.pool, js, slog.New(slog.DiscardHandler), quartz.NewReal())
	if err := b.relay.Start(ctx); err != nil {
		return nil, err
	}
	s.onClose(b.relay.Stop)
	for i := range 4 {
		addr, err := s.serve(replica())
		if err != nil {
			return nil, err
		}
		if i < 2 {
			b.inc = append(b.inc, addr)
		} else {
			b.cand = append(b.cand, addr)
		}
	}
	if err := b.write(ctx, routeEntry(1, canaryWeight, b.inc, b.cand)); err != nil {
		return nil, fmt.Errorf("first routing entry: %w", err)
	}
	if err := b.startGateways(ctx, s, natsURL, n); err != nil {
		return nil, err
	}
	b.client = loadClient(s, 4*n, 4)
	return b, b.waitFirst(ctx)
}

// write is the decision: one transaction with the outbox row, then the
// relay's wake-up.
func (b *rollbackBench) write(ctx context.Context, payload []byte) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := b.q.WithTx(tx).OutboxInsert(ctx, db.OutboxInsertParams{Subject: b.subject, Payload: payload}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	b.relay.Wake()
	return nil
}

// startGateways starts n gateways, each with its own NATS connection and
// HTTP listener.
func (b *rollbackBench) startGateways(ctx context.Context, s *scratch, natsURL string, n int) error {
	gctx, stopGateways := context.WithCancel(ctx)
	s.onClose(stopGateways)
	b.gws, b.urls = make([]*gateway.Gateway, n), make([]string, n)
	for i := range n {
		nc, err := nats.Connect(natsURL, s.natsOpts()...)
		if err != nil {
			return err
		}
		s.onClose(nc.Close)
		g, err := startGateway(gctx, nc, filepath.Join(s.dir, fmt.Sprintf("gw%d", i)), fmt.Sprintf("bench-gw-%d", i), 10*time.Second)
		if err != nil {
			return err
		}
		s.onClose(g.Stop)
		addr, err := s.serve(g.Handler())
		if err != nil {
			return err
		}
		b.gws[i], b.urls[i] = g, "http://"+addr+"/v1/endpoints/"+rollbackEndpoint+"/predict"
	}
	return nil
}

// waitFirst waits until every gateway holds generation 1 and answers.
func (b *rollbackBench) waitFirst(ctx context.Context) error {
	for i, g := range b.gws {
		deadline := time.Now().Add(30 * time.Second)
		for {
			gen, _ := g.RouteGeneration(rollbackEndpoint)
			_, err := predict(ctx, b.client, b.key, b.urls[i], predictIn)
			if gen == 1 && err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway %d never served generation 1 (holds %d): %v", i, gen, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// timings are a run of switches' times from the decision: the rollbacks'
// and every switch's to the last gateway, every switch's to the first and
// its commit alone.
type timings struct{ rollbacks, all, first, commit []time.Duration }

// switches writes count routing entries from generation gen0 on and
// times each from its decision to the first and to the last gateway.
func (b *rollbackBench) switches(ctx context.Context, count int, gen0 int64) (timings, error) {
	var tm timings
	held := make([]bool, len(b.gws))
	for s := range count {
		gen := gen0 + int64(s)
		payload := routeEntry(gen, candidateWeightAt(gen), b.inc, b.cand)
		clear(held)
		t0 := time.Now()
		if err := b.write(ctx, payload); err != nil {
			return tm, fmt.Errorf("generation %d: %w", gen, err)
		}
		tm.commit = append(tm.commit, time.Since(t0))
		first, err := b.watch(gen, t0, held)
		if err != nil {
			return tm, err
		}
		d := time.Since(t0)
		tm.all = append(tm.all, d)
		tm.first = append(tm.first, first)
		if isRollback(gen) {
			tm.rollbacks = append(tm.rollbacks, d)
		}
		time.Sleep(settle)
	}
	return tm, nil
}

// watch polls every gateway's routing generation, a pass every pollGap,
// until all hold gen, and returns the time from t0 to the first that did.
// held says which gateways hold it, all false on the call.
func (b *rollbackBench) watch(gen int64, t0 time.Time, held []bool) (time.Duration, error) {
	left := len(b.gws)
	var firstAt time.Duration
	for left > 0 {
		for i, g := range b.gws {
			if held[i] {
				continue
			}
			if got, _ := g.RouteGeneration(rollbackEndpoint); got >= gen {
				held[i] = true
				left--
				if firstAt == 0 {
					firstAt = time.Since(t0)
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Since(t0) > 30*time.Second {
			return 0, fmt.Errorf("generation %d: %d gateways never got it", gen, left)
		}
		time.Sleep(pollGap)
	}
	return firstAt, nil
}

// rollbackLoad is one client per gateway, one request at a time, and what
// they counted.
type rollbackLoad struct {
	stop                                  func()
	requests, errs, candidate, violations atomic.Int64
}

// startLoad starts the clients; stop ends them and waits.
func (b *rollbackBench) startLoad(ctx context.Context) *rollbackLoad {
	l := &rollbackLoad{}
	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, g := range b.gws {
		wg.Go(func() { b.client1(lctx, l, g, b.urls[i]) })
	}
	l.stop = func() { stopLoad(); wg.Wait() }
	return l
}

// client1 sends requests to one gateway until ctx ends. A response from
// the candidate to a request that started and ended while its gateway
// held one rollback entry is a violation.
func (b *rollbackBench) client1(ctx context.Context, l *rollbackLoad, g *gateway.Gateway, u string) {
	for ctx.Err() == nil {
		before, _ := g.RouteGeneration(rollbackEndpoint)
		v, err := predict(ctx, b.client, b.key, u, predictIn)
		after, _ := g.RouteGeneration(rollbackEndpoint)
		if ctx.Err() != nil && err != nil {
			return // the load's end cut it
		}
		l.requests.Add(1)
		switch {
		case err != nil:
			l.errs.Add(1)
		case v == candidateVersion:
			l.candidate.Add(1)
			if before == after && isRollback(before) {
				l.violations.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(loadGap):
		}
	}
}
