package fleet_test

import (
	"encoding/json"
	"testing"
	"time"

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
