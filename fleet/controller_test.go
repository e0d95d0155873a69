package fleet_test

import (
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/internal/wait"
)

// TestEndpointChangesWakeTheReconciler: creating, updating and deleting an
// endpoint each wake the reconciler (endpoint.Service.OnChange, as the
// assembly wires it), so the node's desired state follows at once. The
// clock is moved only through the controller's startup Settle, to its
// first pass; after that it stands still, so the one-hour tick never
// fires and every later pass is one a change woke.
func TestEndpointChangesWakeTheReconciler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	settle := f.clock.Trap().NewTimer()
	defer settle.Close()
	ticker := f.clock.Trap().NewTicker()
	defer ticker.Close()
	ctrl := fleet.NewController(f.fleet, fleet.ControllerOptions{Interval: time.Hour, Listening: listeningSince(f.start)})
	f.eps.OnChange(ctrl.Wake)
	if err := ctrl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	settle.MustWait(ctx).MustRelease(ctx)
	f.clock.Advance(fleet.Settle).MustWait(ctx)
	ticker.MustWait(ctx).MustRelease(ctx)

	// replicas is node-a's latest desired replica count, -1 before any.
	replicas := func() int {
		var payload []byte
		err := f.pool.QueryRow(ctx, "SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1",
			busapi.KVSubject(busapi.BucketDesired, "node-a")).Scan(&payload)
		if err != nil {
			return -1
		}
		var d busapi.Desired
		if err := json.Unmarshal(payload, &d); err != nil {
			t.Errorf("desired of node-a: %v", err)
			return -1
		}
		return len(d.Replicas)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return replicas() == 0 }, "the first pass wrote no desired state (%v)",
		wait.Show(func() any { return replicas() }))
	frozen := f.clock.Now()

	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	wait.Eventually(t, 10*time.Second, func() bool { return replicas() == 1 }, "create: node-a desires %v replicas, want 1",
		wait.Show(func() any { return replicas() }))

	if _, err := f.eps.Update(ctx, f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 3, MaxReplicas: 3,
		Tier: "standard", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return replicas() == 3 }, "update: node-a desires %v replicas, want 3",
		wait.Show(func() any { return replicas() }))

	if err := f.eps.Delete(ctx, f.eng, "fraud-ep"); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return replicas() == 0 }, "delete: node-a desires %v replicas, want 0",
		wait.Show(func() any { return replicas() }))
	if !f.clock.Now().Equal(frozen) {
		t.Fatalf("the clock moved from %s to %s: a tick, not a wake, may have placed the replicas", frozen, f.clock.Now())
	}
}

// listeningSince is an intake that has heard the fleet since its time.
type listeningSince time.Time

func (l listeningSince) ListeningSince() time.Time { return time.Time(l) }

// TestReconcilePassTraced: each reconcile pass is one fleet.reconcile
// span, the root of a trace of its own, whose attributes count what the
// pass did: the first places the endpoint's replica and writes the node's
// desired state, the one its update to three replicas wakes places two.
func TestReconcilePassTraced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.heartbeat(t, "node-a", gpus(0, 1, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	settle := f.clock.Trap().NewTimer()
	defer settle.Close()
	ticker := f.clock.Trap().NewTicker()
	defer ticker.Close()
	ctrl := fleet.NewController(f.fleet, fleet.ControllerOptions{Interval: time.Hour, Listening: listeningSince(f.start), Tracer: tp})
	f.eps.OnChange(ctrl.Wake)
	if err := ctrl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	settle.MustWait(ctx).MustRelease(ctx)
	f.clock.Advance(fleet.Settle).MustWait(ctx)
	ticker.MustWait(ctx).MustRelease(ctx)

	// passes are the pass spans ended so far, each as its attributes.
	passes := func() []map[string]int64 {
		var out []map[string]int64
		for _, s := range exp.GetSpans() {
			if s.Name != "fleet.reconcile" {
				t.Errorf("span %q, want only fleet.reconcile", s.Name)
				continue
			}
			if s.Parent.IsValid() || s.SpanKind != trace.SpanKindInternal {
				t.Errorf("pass span has parent %v, kind %v; want a root, internal", s.Parent.SpanID(), s.SpanKind)
			}
			a := map[string]int64{}
			for _, kv := range s.Attributes {
				a[string(kv.Key)] = kv.Value.AsInt64()
			}
			out = append(out, a)
		}
		return out
	}
	wait.Eventually(t, 10*time.Second, func() bool { return len(passes()) >= 1 }, "no pass span")
	first := passes()[0]
	for k, want := range map[string]int64{"fleet.replicas_placed": 1, "fleet.desired_written": 1, "fleet.replicas_removed": 0,
		"fleet.nodes_lost": 0, "fleet.replicas_unplaced": 0} {
		if got, ok := first[k]; !ok || got != want {
			t.Errorf("first pass: %s = %d (set %v), want %d; all %v", k, got, ok, want, first)
		}
	}
	if _, err := f.eps.Update(ctx, f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 3, MaxReplicas: 3,
		Tier: "standard", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	placedTwo := func() bool {
		for _, p := range passes() {
			if p["fleet.replicas_placed"] == 2 && p["fleet.desired_written"] == 1 {
				return true
			}
		}
		return false
	}
	wait.Eventually(t, 10*time.Second, placedTwo, "no pass span counts the two replicas the update added: %v",
		wait.Show(func() any { return passes() }))
}
