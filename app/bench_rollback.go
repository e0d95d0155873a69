package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent/proto"
	"modelplane/bus"
	"modelplane/db"
	"modelplane/gateway"
	"modelplane/internal/pgproc"
	"modelplane/migrations"
	"modelplane/outbox"
)

// Settings of `modelplane bench rollback`.
const (
	rbBenchGateways = 50
	// rbBenchSwitches routing writes alternate rollback (candidate at
	// weight 0) and restore (candidate back at rbBenchCanaryWeight); half
	// of them are the rollbacks the p99 is taken over.
	rbBenchSwitches = 300
	// rbBenchIdleSwitches come first, with no load, for comparison.
	rbBenchIdleSwitches = 100
	rbBenchCanaryWeight = 10
	// rbBenchSettle is the pause after every gateway has a switch, so
	// that each switch starts from a settled fleet under load.
	rbBenchSettle = 40 * time.Millisecond
	// rbBenchLoadGap paces each gateway's client: one request at a time,
	// then this pause.
	rbBenchLoadGap = 20 * time.Millisecond
	// rbBenchPoll is the watcher's pause between two passes over every
	// gateway's routing generation: the resolution of the measure.
	rbBenchPoll      = 100 * time.Microsecond
	rbBenchEndpoint  = "rollback-bench"
	rbBenchIncumbent = "v42"
	rbBenchCandidate = "v43"
)

// RollbackBenchResult is what `modelplane bench rollback` prints.
type RollbackBenchResult struct {
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
	// over rbBenchIdleSwitches/2 rollbacks written before the load starts.
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

// runBenchRollback runs the benchmark and prints its result.
func runBenchRollback(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	n := cfg.Gateways
	if n == 0 {
		n = rbBenchGateways
	}
	if n < 1 || n > 1000 {
		return fmt.Errorf("bench rollback: --gateways %d: want 1 to 1000", n)
	}
	res, err := benchRollback(ctx, n)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err = fmt.Fprintf(out, "rollback: %d gateways, p99 %.2f ms (p50 %.2f, max %.2f) from the decision to the last gateway over %d rollbacks; %d errors in %d requests during the switches\n",
		res.Gateways, res.PropagationP99Ms, res.PropagationP50Ms, res.PropagationMaxMs, res.Rollbacks, res.ErrorsDuringSwitch, res.Requests)
	return err
}

// rbRoute is the endpoint's routing entry of one generation; the candidate
// keeps its replicas at weight 0 (they stay up for inspection).
func rbRoute(gen int64, candidateWeight int, inc, cand []string) []byte {
	rv := func(name string, w int, addrs []string) proto.RouteVersion {
		v := proto.RouteVersion{Name: name, Weight: w}
		for i, a := range addrs {
			v.Replicas = append(v.Replicas, proto.RouteReplica{ID: fmt.Sprintf("%s-%d", name, i), Addr: a})
		}
		return v
	}
	b, _ := json.Marshal(proto.Route{Endpoint: rbBenchEndpoint, Team: "bench", Task: "classification", Generation: gen,
		Versions: []proto.RouteVersion{rv(rbBenchIncumbent, 100-candidateWeight, inc), rv(rbBenchCandidate, candidateWeight, cand)}})
	return b
}

// isRollback reports whether generation gen is a rollback: generation 1
// is the canary at its weight, then even generations roll back and odd
// ones restore.
func isRollback(gen int64) bool { return gen > 1 && gen%2 == 0 }

// benchRollback measures how long a rollback takes to reach every gateway.
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
func benchRollback(ctx context.Context, n int) (RollbackBenchResult, error) {
	began := time.Now()
	res := RollbackBenchResult{Name: "rollback", Gateways: n, Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		PollResolutionMs: float64(rbBenchPoll) / float64(time.Millisecond),
		Path:             "outbox row (PostgreSQL) -> outbox.Relay -> JetStream $KV.mp_routes -> gateway KV watch"}
	log := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "mp-bench-rb-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)

	pg, err := pgproc.Start(ctx, filepath.Join(dir, "pg"))
	if err != nil {
		return res, err
	}
	defer pg.Stop()
	pool, err := db.Open(ctx, pg.URL("postgres"))
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := migrations.Postgres(ctx, pool); err != nil {
		return res, err
	}

	ns, err := bus.StartEmbedded(filepath.Join(dir, "nats"))
	if err != nil {
		return res, err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	if err := bus.Ensure(ctx, js); err != nil {
		return res, err
	}
	keys, err := js.KeyValue(ctx, proto.BucketKeys)
	if err != nil {
		return res, err
	}
	key, entry := gwBenchKey()
	kb, _ := json.Marshal(entry)
	if _, err := keys.Put(ctx, entry.Prefix, kb); err != nil {
		return res, err
	}

	rctx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relay := outbox.NewRelay(pool, js, log)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); relay.Run(rctx, time.Second) }()
	defer func() { stopRelay(); <-relayDone }()
	q := db.New(pool)
	subject := proto.KVSubject(proto.BucketRoutes, rbBenchEndpoint)
	// write is the decision: one transaction with the outbox row, then the
	// relay's wake-up.
	write := func(payload []byte) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := q.WithTx(tx).OutboxInsert(ctx, db.OutboxInsertParams{Subject: subject, Payload: payload}); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		relay.Wake()
		return nil
	}

	// Replicas: two per version, each a listener of its own.
	var inc, cand []string
	for i := range 4 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: benchReplica(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		if i < 2 {
			inc = append(inc, ln.Addr().String())
		} else {
			cand = append(cand, ln.Addr().String())
		}
	}
	if err := write(rbRoute(1, rbBenchCanaryWeight, inc, cand)); err != nil {
		return res, fmt.Errorf("first routing entry: %w", err)
	}

	// The gateways, each with its own NATS connection and HTTP listener.
	gctx, stopGateways := context.WithCancel(ctx)
	defer stopGateways()
	gws := make([]*gateway.Gateway, n)
	urls := make([]string, n)
	for i := range n {
		gnc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			return res, err
		}
		defer gnc.Close()
		g, err := gateway.New(gateway.Config{StateDir: filepath.Join(dir, fmt.Sprintf("gw%d", i)), ID: fmt.Sprintf("bench-gw-%d", i),
			KeyRPS: 1e9, KeyBurst: 1e9, EndpointRPS: 1e9, EndpointBurst: 1e9, MaxOutstandingPerReplica: 4096,
			StatsInterval: 10 * time.Second}, gnc, log)
		if err != nil {
			return res, err
		}
		if err := g.Start(gctx); err != nil {
			return res, err
		}
		defer g.Stop()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		gws[i], urls[i] = g, "http://"+ln.Addr().String()+"/v1/endpoints/"+rbBenchEndpoint+"/predict"
	}

	tr := &http.Transport{Proxy: nil, MaxIdleConns: 4 * n, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	do := func(u string) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(gwBenchPredictIn))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Model-Version"), nil
	}
	// Every gateway has generation 1 and answers.
	for i, g := range gws {
		deadline := time.Now().Add(30 * time.Second)
		for {
			gen, _ := g.RouteGeneration(rbBenchEndpoint)
			_, err := do(urls[i])
			if gen == 1 && err == nil {
				break
			}
			if time.Now().After(deadline) {
				return res, fmt.Errorf("gateway %d never served generation 1 (holds %d): %v", i, gen, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// switches writes count routing entries from generation gen0 on and
	// times each from its decision to the first and to the last gateway.
	type timings struct{ rollbacks, all, first, commit []time.Duration }
	held := make([]bool, n)
	switches := func(count int, gen0 int64) (timings, error) {
		var tm timings
		for s := range count {
			gen := gen0 + int64(s)
			w := rbBenchCanaryWeight
			if isRollback(gen) {
				w = 0
			}
			payload := rbRoute(gen, w, inc, cand)
			clear(held)
			left := n
			var firstAt time.Duration
			t0 := time.Now()
			if err := write(payload); err != nil {
				return tm, fmt.Errorf("generation %d: %w", gen, err)
			}
			tm.commit = append(tm.commit, time.Since(t0))
			for left > 0 {
				for i, g := range gws {
					if held[i] {
						continue
					}
					if got, _ := g.RouteGeneration(rbBenchEndpoint); got >= gen {
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
					return tm, fmt.Errorf("generation %d: %d gateways never got it", gen, left)
				}
				time.Sleep(rbBenchPoll)
			}
			d := time.Since(t0)
			tm.all = append(tm.all, d)
			tm.first = append(tm.first, firstAt)
			if isRollback(gen) {
				tm.rollbacks = append(tm.rollbacks, d)
			}
			time.Sleep(rbBenchSettle)
		}
		return tm, nil
	}

	// Without load first, to show what the contention adds: generations 2
	// to rbBenchIdleSwitches+1, ending on a restore.
	idle, err := switches(rbBenchIdleSwitches, 2)
	if err != nil {
		return res, fmt.Errorf("idle switches: %w", err)
	}
	res.IdlePropagationP99Ms = percentile(idle.rollbacks, 0.99)
	res.IdlePropagationP50Ms = percentile(idle.rollbacks, 0.50)

	// The load: one client per gateway, one request at a time.
	var requests, errs, candidate, violations atomic.Int64
	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, g := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				before, _ := g.RouteGeneration(rbBenchEndpoint)
				v, err := do(urls[i])
				after, _ := g.RouteGeneration(rbBenchEndpoint)
				if lctx.Err() != nil && err != nil {
					return // the load's end cut it
				}
				requests.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
				case v == rbBenchCandidate:
					candidate.Add(1)
					if before == after && isRollback(before) {
						violations.Add(1)
					}
				}
				select {
				case <-lctx.Done():
				case <-time.After(rbBenchLoadGap):
				}
			}
		}()
	}
	loadStart := time.Now()
	tm, err := switches(rbBenchSwitches, int64(rbBenchIdleSwitches)+2)
	stopLoad()
	wg.Wait()
	elapsed := time.Since(loadStart)
	if err != nil {
		return res, fmt.Errorf("switches under load: %w", err)
	}
	rollbacks, all, first := tm.rollbacks, tm.all, tm.first
	res.CommitP50Ms = percentile(tm.commit, 0.50)

	res.Switches, res.Rollbacks = len(all), len(rollbacks)
	res.PropagationP99Ms = percentile(rollbacks, 0.99)
	res.PropagationP50Ms = percentile(rollbacks, 0.50)
	res.PropagationMaxMs = gwMs(slices.Max(rollbacks))
	res.FirstGatewayP50Ms = percentile(first, 0.50)
	res.AllSwitchesP99Ms = percentile(all, 0.99)
	res.Requests = int(requests.Load())
	res.ErrorsDuringSwitch = int(errs.Load())
	res.CandidateAfterRollback = int(violations.Load())
	res.RPS = round3(float64(res.Requests) / elapsed.Seconds())
	if res.Requests > 0 {
		res.CandidateShare = round3(float64(candidate.Load()) / float64(res.Requests))
	}
	res.Seconds = round3(time.Since(began).Seconds())
	return res, nil
}
