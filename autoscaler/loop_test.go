package autoscaler_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/autoscale"
	"modelplane/autoscaler"
	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/replica"
	"modelplane/rollout"
)

// rpsPolicy scales on requests/s (target per replica) between lo and hi,
// with a scale-down window of down.
func rpsPolicy(target float64, lo, hi int32, down time.Duration) autoscale.PolicyDoc {
	p := autoscale.DocOf(autoscale.DefaultPolicy(autoscale.TaskClassification, true, int(lo)))
	p.Signals = []autoscale.TargetDoc{{Signal: "rps", Target: target}}
	p.MinReplicas, p.MaxReplicas = lo, hi
	p.ScaleDownStabilizationS = down.Seconds()
	return p
}

// scaledFraud makes endpoint fraud-ep (fraud's v1 on a 1g MIG slice, one
// replica) and sets its autoscaling policy p.
func (f *fixture) scaledFraud(t *testing.T, p autoscale.PolicyDoc) {
	t.Helper()
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	if _, err := f.eps.SetAutoscaling(t.Context(), f.eng, "fraud-ep", p, f.fleet.Grace()); err != nil {
		t.Fatal(err)
	}
}

// placedFraud is scaledFraud on node-a's one A100 in seven 1g slices,
// placed; it returns node-a's GPUs.
func (f *fixture) placedFraud(t *testing.T, p autoscale.PolicyDoc) []busapi.GPU {
	t.Helper()
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.scaledFraud(t, p)
	f.reconcile(t)
	return inv
}

// scaledChat makes endpoint chat-ep (chat's c1 on a 3g MIG slice of
// node-b's H100s, one replica) with the LLM policy mod sets, 1 to 4
// replicas, places it, and returns node-b's GPUs and the replica as ready.
func (f *fixture) scaledChat(t *testing.T, mod func(*autoscale.PolicyDoc)) ([]busapi.GPU, busapi.ReplicaStatus) {
	t.Helper()
	inv := gpus(0, 2, "H100-80GB", nil)
	f.heartbeat(t, "node-b", inv)
	f.endpoint(t, "chat-ep", "chat", "c1", "mig-3g.40gb", "standard", 1)
	p := autoscale.DocOf(autoscale.DefaultPolicy(autoscale.TaskLLM, true, 1))
	p.MinReplicas, p.MaxReplicas = 1, 4
	mod(&p)
	if _, err := f.eps.SetAutoscaling(t.Context(), f.eng, "chat-ep", p, f.fleet.Grace()); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	rs := ready(f.desired(t, "node-b"))
	if len(rs) != 1 {
		t.Fatalf("replicas = %+v, want one", rs)
	}
	return inv, rs[0]
}

// serve reports every replica of node's desired state ready, each having
// answered served more requests than at the last call (counts keeps the
// counters), so that the intake reads served / elapsed requests/s.
func (f *fixture) serve(t *testing.T, node string, inv []busapi.GPU, counts map[string]int64, served int64) []busapi.ReplicaStatus {
	t.Helper()
	rs := ready(f.desired(t, node))
	for i := range rs {
		counts[rs[i].ID] += served
		rs[i].Requests = counts[rs[i].ID]
	}
	f.heartbeat(t, node, inv, rs...)
	return rs
}

func (f *fixture) evaluate(t *testing.T, a *autoscaler.Loop) autoscaler.Round {
	t.Helper()
	r, err := a.Evaluate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAutoscalerScalesUpAtOnceAndBackAfterTheWindow: requests/s four times
// the target raise the count in the first evaluation that sees them (one
// decision, 1 → 4), the reconciler places the replicas, and once the load
// is gone the count returns to the minimum after the scale-down window,
// each change stored with its reason and winning signal.
func TestAutoscalerScalesUpAtOnceAndBackAfterTheWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := f.placedFraud(t, rpsPolicy(100, 1, 6, 10*time.Second))
	woke := 0
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace(), Changed: func() { woke++ }})
	counts := map[string]int64{}
	f.serve(t, "node-a", inv, counts, 0)
	if r := f.evaluate(t, a); len(r.Decisions) != 0 {
		t.Fatalf("idle round decided %+v, want nothing", r.Decisions)
	}

	// 800 requests in 2 s on one replica: 400 req/s against 100.
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 800)
	r := f.evaluate(t, a)
	d, ok := r.Decisions["fraud-ep"]
	if !ok || d.Current != 1 || d.Desired != 4 || d.Signal != autoscale.RPS || woke != 1 {
		t.Fatalf("round under load = %+v (reconciler woken %d times), want 1 → 4 on rps, the reconciler woken", r, woke)
	}
	if p := f.reconcile(t); p.Placed != 3 {
		t.Fatalf("pass after the decision = %+v, want 3 replicas placed", p)
	}
	if e := f.get(t, "fraud-ep"); len(e.Replicas) != 4 {
		t.Fatalf("replicas = %d, want 4", len(e.Replicas))
	}

	// The load stops: the window (10 s, also panic's) holds 4, then the
	// count halves per decision down to the minimum.
	var seen []int
	for range 20 {
		f.clock.Advance(2 * time.Second)
		f.serve(t, "node-a", inv, counts, 0)
		if d, ok := f.evaluate(t, a).Decisions["fraud-ep"]; ok {
			seen = append(seen, d.Desired)
			if f.clock.Now().Sub(f.start) < 12*time.Second { // the burst was seen at 2 s
				t.Fatalf("scaled down to %d at %s, inside the 10 s window", d.Desired, f.clock.Now().Sub(f.start))
			}
		}
		f.reconcile(t)
	}
	if !slices.Equal(seen, []int{2, 1}) {
		t.Fatalf("scale-down decisions %v, want [2 1]", seen)
	}
	if e := f.get(t, "fraud-ep"); len(e.Replicas) != 1 {
		t.Fatalf("replicas after the load = %d, want 1 (min_replicas)", len(e.Replicas))
	}
	ds, err := f.eps.AutoscaleDecisions(t.Context(), f.eng, "fraud-ep", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 || ds[2].Before != 1 || ds[2].After != 4 || ds[2].Signal != "rps" || !strings.HasPrefix(ds[2].Reason, "panic: rps 400/100 → 1 → 4") ||
		len(ds[2].Inputs.Readings) != 1 || ds[2].Inputs.Readings[0].Value != 400 || ds[0].After != 1 {
		t.Fatalf("stored decisions = %+v, want 1 → 4 on rps 400/100 with its reading, then down to 1", ds)
	}
}

// TestRestartedAutoscalerResumesWithoutDoublePlacement: a controller stops
// after deciding 1 → 4 and placing the replicas, none ready yet; a new one
// (nothing in memory) resumes from the stored count: it places nothing
// more, and the ready replica's load alone does not scale again.
func TestRestartedAutoscalerResumesWithoutDoublePlacement(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := f.placedFraud(t, rpsPolicy(100, 1, 6, 300*time.Second))
	old := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	counts := map[string]int64{}
	first := f.serve(t, "node-a", inv, counts, 0)
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 800)
	if d := f.evaluate(t, old).Decisions["fraud-ep"]; d.Desired != 4 {
		t.Fatalf("first controller decided %+v, want 4", d)
	}
	if p := f.reconcile(t); p.Placed != 3 {
		t.Fatalf("first controller's pass = %+v, want 3 placed", p)
	}
	// It stops here, mid-scale: 3 replicas starting, 1 ready and loaded.
	restarted := fleet.New(f.pool, fleet.Options{Clock: f.clock})
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: restarted.Grace()})
	for range 3 {
		f.clock.Advance(2 * time.Second)
		counts[first[0].ID] += 800
		first[0].Requests = counts[first[0].ID]
		f.heartbeat(t, "node-a", inv, first[0]) // the new ones still starting: no metrics
		if r := f.evaluate(t, a); len(r.Decisions) != 0 {
			t.Fatalf("restarted controller decided %+v, want nothing (4 set, 3 starting are capacity)", r.Decisions)
		}
		p, err := restarted.Reconcile(t.Context(), f.start)
		if err != nil {
			t.Fatal(err)
		}
		if p.Placed != 0 || p.Removed != 0 {
			t.Fatalf("restarted controller's pass = %+v, want nothing placed or removed", p)
		}
	}
	if e := f.get(t, "fraud-ep"); len(e.Replicas) != 4 {
		t.Fatalf("replicas after the restart = %d, want 4", len(e.Replicas))
	}
	// Nor does it scale down before a whole window has passed since it
	// took over: the old controller's window went with it.
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 0)
	if r := f.evaluate(t, a); len(r.Decisions) != 0 {
		t.Fatalf("restarted controller with the load gone decided %+v, want nothing within its first window", r.Decisions)
	}
}

// TestMissingSignalFreezesAndRaisesAnEvent: a ready replica whose node
// stops sending metrics reports no signal; after three evaluations the
// endpoint freezes, once, with an audit record and an event.
func TestMissingSignalFreezesAndRaisesAnEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := gpus(0, 1, "A100-80GB", seven1g())
	f.heartbeat(t, "node-a", inv)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	f.reconcile(t)
	f.serve(t, "node-a", inv, map[string]int64{}, 0)
	f.clock.Advance(20 * time.Second) // older than a heartbeat can be
	var events []string
	for range 5 {
		f.clock.Advance(2 * time.Second)
		if ev, ok := f.evaluate(t, a).Events["fraud-ep"]; ok {
			events = append(events, ev)
		}
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "autoscaling frozen: rps, queue_depth missing") {
		t.Fatalf("events = %q, want one freeze naming rps and queue_depth", events)
	}
	var audits, outbox int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM audit_log WHERE action = $1 AND object_name = 'fraud-ep'", autoscaler.AuditFrozen).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox WHERE subject = $1 AND payload->>'kind' = $2",
		busapi.EventsSubject("risk"), autoscaler.EventKind).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if audits != 1 || outbox != 1 {
		t.Fatalf("audit records %d, events %d; want one each", audits, outbox)
	}
	f.serve(t, "node-a", inv, map[string]int64{}, 0)
	if ev := f.evaluate(t, a).Events["fraud-ep"]; !strings.HasPrefix(ev, "autoscaling resumed") {
		t.Fatalf("event with metrics back = %q, want resumed", ev)
	}
}

// TestCanarySizingFollowsTrafficShare: a 1 % canary of a 150-replica
// endpoint runs 2 replicas, not 150; the incumbent keeps its 150 until the
// step has baked, then shrinks to its share while the candidate is warmed
// for the next step (5 %: 8 replicas) before any weight moves.
func TestCanarySizingFollowsTrafficShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var inv [3][]busapi.GPU
	for i := range inv {
		inv[i] = gpus(0, 8, "A100-80GB", seven1g())
		f.heartbeat(t, []string{"node-a", "node-b", "node-c"}[i], inv[i])
	}
	f.scaledFraud(t, rpsPolicy(1000, 150, 200, 300*time.Second))
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	// Parked at weight 0 without a rollout, v2 keeps min_replicas as
	// before; put it back to a single version first.
	if _, err := f.eps.SetTraffic(t.Context(), f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	count := func() map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, r := range f.get(t, "fraud-ep").Replicas {
			out[r.Version]++
		}
		return out
	}
	if got := count(); got["v1"] != 150 {
		t.Fatalf("replicas = %v, want 150 of v1", got)
	}
	rs := rollout.New(f.pool, f.clock, nil)
	if _, err := rs.Start(t.Context(), f.eng, "fraud-ep", rollout.Spec{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	// What the rollout controller does at its start: v2 routed at weight 0.
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO routing_rules (endpoint_id, version_id, weight)
		SELECT e.id, v.id, 0 FROM endpoints e, model_versions v WHERE e.name = 'fraud-ep' AND v.name = 'v2'`); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := count(); got["v1"] != 150 || got["v2"] != 2 {
		t.Fatalf("replicas while the rollout starts = %v, want v1 150, v2 2 (1 %% of 150, rounded up)", got)
	}
	// Step 1 applied: 99/1, baking for 600 s.
	if _, err := f.pool.Exec(t.Context(), `UPDATE routing_rules r SET weight = CASE WHEN v.name = 'v1' THEN 99 ELSE 1 END
		FROM model_versions v WHERE v.id = r.version_id`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(t.Context(), `UPDATE rollouts SET state = 'progressing', step_index = 0, step_started_at = $1, bake_deadline = $2`,
		f.clock.Now(), f.clock.Now().Add(600*time.Second)); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := count(); got["v1"] != 150 || got["v2"] != 2 {
		t.Fatalf("replicas while step 1 bakes = %v, want v1 150 (not shrunk before the bake), v2 2", got)
	}
	f.clock.Advance(601 * time.Second)
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		f.heartbeat(t, n, inv[0], ready(f.desired(t, n))...)
	}
	f.reconcile(t)
	if got := count(); got["v1"] != 149 || got["v2"] != 8 {
		t.Fatalf("replicas after step 1 baked = %v, want v1 149 (99 %%), v2 8 (warmed for 5 %%)", got)
	}
}

// TestAbsentSignalFreezesNamingTheReplica: a llama-server replica whose
// build lacks the KV gauge reports kv_used_pct absent; the autoscaler takes
// the signal as missing, never as 0 KV use (no scale-down on it), and after
// three evaluations freezes naming the replica and its runtime. Once the
// replica reports KV use the endpoint resumes.
func TestAbsentSignalFreezesNamingTheReplica(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv, r := f.scaledChat(t, func(p *autoscale.PolicyDoc) {
		p.Signals = []autoscale.TargetDoc{{Signal: "kv_cache", Target: 0.85}, {Signal: "in_flight", Target: 200}}
	})
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	id := r.ID
	noKV := r
	noKV.InFlight, noKV.Runtime = 150, "llama-server"
	noKV.Absent = []string{busapi.MetricKVUsedPct, busapi.MetricTTFTMS, busapi.MetricBatchQueueMS, busapi.MetricGPUUtil}
	var events []string
	for i := range 5 {
		f.clock.Advance(2 * time.Second)
		f.heartbeat(t, "node-b", inv, noKV)
		r := f.evaluate(t, a)
		if len(r.Decisions) != 0 {
			t.Fatalf("evaluation %d decided %+v: an absent KV gauge is no KV use to scale on", i, r.Decisions)
		}
		if ev, ok := r.Events["chat-ep"]; ok {
			events = append(events, ev)
		}
	}
	want := "autoscaling frozen: kv_cache missing from every ready replica for 3 evaluations (kv_used_pct not reported by replica " + id + " (llama-server))"
	if len(events) != 1 || events[0] != want {
		t.Fatalf("events = %q, want one: %q", events, want)
	}
	m := f.get(t, "chat-ep").Replicas[0].Metrics
	if m.Reports(busapi.MetricKVUsedPct) || !m.Reports(busapi.MetricInFlight) || m.Runtime != "llama-server" {
		t.Errorf("stored metrics = %+v, want kv_used_pct absent, in_flight reported, runtime llama-server", m)
	}
	var audits int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM audit_log WHERE action = $1 AND object_name = 'chat-ep'", autoscaler.AuditFrozen).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 1 {
		t.Errorf("freeze audit records = %d, want 1", audits)
	}
	withKV := noKV
	withKV.Absent, withKV.KVUsedPct = []string{busapi.MetricTTFTMS}, 40
	f.clock.Advance(2 * time.Second)
	f.heartbeat(t, "node-b", inv, withKV)
	if ev := f.evaluate(t, a).Events["chat-ep"]; !strings.HasPrefix(ev, "autoscaling resumed") {
		t.Fatalf("event with the KV gauge back = %q, want resumed", ev)
	}
}

// TestAbsentRequestCounterMakesNoRate: a heartbeat whose runtime did not
// report its requests counter (its metrics could not be read) stores 0
// requests; the next heartbeat's counter is not turned into a burst of
// requests/s from that 0: rps is absent for it, and the rate resumes with
// the heartbeat after.
func TestAbsentRequestCounterMakesNoRate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := f.placedFraud(t, rpsPolicy(100, 1, 6, 10*time.Second))
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	r := ready(f.desired(t, "node-a"))[0]
	r.Requests = 5000
	f.heartbeat(t, "node-a", inv, r)
	f.clock.Advance(2 * time.Second)
	unread := r
	unread.Requests, unread.Absent = 0, slices.Clone(busapi.Metrics)
	f.heartbeat(t, "node-a", inv, unread)
	if d := f.evaluate(t, a).Decisions; len(d) != 0 {
		t.Fatalf("round on unread metrics decided %+v", d)
	}
	f.clock.Advance(2 * time.Second)
	r.Requests = 5200 // read again: 200 more than before the gap
	f.heartbeat(t, "node-a", inv, r)
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; m.Reports(replica.MetricRPS) || m.RPS != 0 {
		t.Fatalf("metrics after the unread heartbeat = %+v, want rps absent, not 5200 requests in 2 s", m)
	}
	if d := f.evaluate(t, a).Decisions; len(d) != 0 {
		t.Fatalf("round after the unread heartbeat decided %+v, want nothing (no rate from a counter read as 0)", d)
	}
	f.clock.Advance(2 * time.Second)
	r.Requests = 6000 // 800 in 2 s: 400/s
	f.heartbeat(t, "node-a", inv, r)
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; !m.Reports(replica.MetricRPS) || m.RPS != 400 {
		t.Fatalf("metrics once the counter is read twice = %+v, want rps 400", m)
	}
	if d, ok := f.evaluate(t, a).Decisions["fraud-ep"]; !ok || d.Desired != 4 {
		t.Fatalf("round at 400/s = %+v, want 1 → 4", d)
	}
}

// TestRoundTraced: each round is one autoscaler.round span, the root of a
// trace of its own, counting the endpoints it evaluated and the counts it
// changed: none while idle, one under load.
func TestRoundTraced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := f.placedFraud(t, rpsPolicy(100, 1, 6, 10*time.Second))
	exp := tracetest.NewInMemoryExporter()
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace(),
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	counts := map[string]int64{}
	f.serve(t, "node-a", inv, counts, 0)
	f.evaluate(t, a)
	f.clock.Advance(2 * time.Second)
	f.serve(t, "node-a", inv, counts, 800)
	f.evaluate(t, a)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per round (2)", len(spans))
	}
	for i, want := range []map[string]int64{
		{"autoscaler.endpoints": 1, "autoscaler.decisions": 0, "autoscaler.events": 0},
		{"autoscaler.endpoints": 1, "autoscaler.decisions": 1, "autoscaler.events": 0},
	} {
		s := spans[i]
		if s.Name != "autoscaler.round" || s.Parent.IsValid() {
			t.Errorf("round %d: span %q with parent %v, want a root autoscaler.round", i, s.Name, s.Parent.SpanID())
		}
		got := map[string]int64{}
		for _, kv := range s.Attributes {
			got[string(kv.Key)] = kv.Value.AsInt64()
		}
		if !maps.Equal(got, want) {
			t.Errorf("round %d: attributes %v, want %v", i, got, want)
		}
	}
}

// TestAutoscalerMeasuresRequestsOverTheRateWindow: a replica's requests/s
// are the counter's growth over autoscale.RateWindow, as the scenarios
// measure them, not between its last two heartbeats: after 15 s at 90
// req/s, 3 s at 300 read 132 (4 × 270 + 900 requests over 15 s) and ask
// for 2 replicas, where the rate between the two heartbeats (300) asked 3.
func TestAutoscalerMeasuresRequestsOverTheRateWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv := f.placedFraud(t, rpsPolicy(100, 1, 6, 10*time.Second))
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	counts := map[string]int64{}
	f.serve(t, "node-a", inv, counts, 0)
	f.evaluate(t, a)
	for range 5 { // 90 req/s, a heartbeat every 3 s
		f.clock.Advance(3 * time.Second)
		f.serve(t, "node-a", inv, counts, 270)
		if r := f.evaluate(t, a); len(r.Decisions) != 0 {
			t.Fatalf("at 90 req/s decided %+v, want nothing", r.Decisions)
		}
	}
	f.clock.Advance(3 * time.Second)
	f.serve(t, "node-a", inv, counts, 900)
	d, ok := f.evaluate(t, a).Decisions["fraud-ep"]
	if !ok || d.Desired != 2 {
		t.Fatalf("after 3 s at 300 req/s decided %+v, want 1 → 2", d)
	}
	if i := slices.IndexFunc(d.Readings, func(r autoscale.Reading) bool { return r.Signal == autoscale.RPS }); i < 0 || d.Readings[i].Value != 132 {
		t.Fatalf("readings %+v; want rps 132 over the window", d.Readings)
	}
	if m := f.get(t, "fraud-ep").Replicas[0].Metrics; m.RPS != 300 {
		t.Fatalf("stored rps %v; want 300 between the last two heartbeats (what the replica page shows)", m.RPS)
	}
}

// TestAutoscalerScalesOnPromptTokensOverTheRateWindow: an LLM endpoint
// scaled on prompt tokens/s (the prefill work asked of a replica) is
// measured from the replica's prompt-token counter over the rate window:
// a first reading makes no value yet, a steady 6,000 a second asks
// nothing, and a busy 3 s after 12 steady ones reads 16,800 over the
// window (not the 60,000 between the last two heartbeats) and asks 1 → 2.
// An agent that sends no counter (older than it) leaves the signal
// missing, never 0: the endpoint freezes naming the replica.
func TestAutoscalerScalesOnPromptTokensOverTheRateWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv, r := f.scaledChat(t, func(p *autoscale.PolicyDoc) {
		p.Signals = []autoscale.TargetDoc{{Signal: "prompt_tokens_per_s", Target: 12000}}
		p.ScaleDownStabilizationS = 10
	})
	a := autoscaler.New(f.pool, autoscaler.Options{Clock: f.clock, Grace: f.fleet.Grace()})
	var prompt int64
	beat := func(n int64) {
		t.Helper()
		prompt += n
		r.PromptTokens = &prompt
		f.heartbeat(t, "node-b", inv, r)
	}
	beat(0)
	f.evaluate(t, a)
	for range 5 { // 6,000 prompt tokens a second, a heartbeat every 3 s
		f.clock.Advance(3 * time.Second)
		beat(18000)
		if d := f.evaluate(t, a).Decisions; len(d) != 0 {
			t.Fatalf("at 6,000 prompt tokens/s decided %+v, want nothing", d)
		}
	}
	f.clock.Advance(3 * time.Second)
	beat(180000)
	d, ok := f.evaluate(t, a).Decisions["chat-ep"]
	if !ok || d.Current != 1 || d.Desired != 2 || d.Signal != autoscale.PromptTokensPerSecond {
		t.Fatalf("after 3 s at 60,000 prompt tokens/s decided %+v, want 1 → 2 on prompt_tokens_per_s", d)
	}
	if i := slices.IndexFunc(d.Readings, func(r autoscale.Reading) bool { return r.Signal == autoscale.PromptTokensPerSecond }); i < 0 || d.Readings[i].Value != 16800 {
		t.Fatalf("readings %+v; want prompt_tokens_per_s 16800 over the window", d.Readings)
	}
	if m := f.get(t, "chat-ep").Replicas[0].Metrics; m.PromptTokens != prompt || !m.Reports(busapi.MetricPromptTokens) {
		t.Fatalf("stored metrics = %+v, want the prompt-token counter %d", m, prompt)
	}

	// A heartbeat without the counter: missing, the endpoint freezes.
	r.PromptTokens = nil
	var events []string
	for range 3 {
		f.clock.Advance(3 * time.Second)
		f.heartbeat(t, "node-b", inv, r)
		if ev, ok := f.evaluate(t, a).Events["chat-ep"]; ok {
			events = append(events, ev)
		}
	}
	if len(events) != 1 || !strings.Contains(events[0], "prompt_tokens not reported by replica "+r.ID) {
		t.Fatalf("events without the counter = %q, want a freeze naming prompt_tokens and the replica", events)
	}
}
