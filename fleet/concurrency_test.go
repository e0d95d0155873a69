package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/endpoint"
)

// TestHeartbeatsAndPassesDoNotDeadlock runs heartbeats that report every
// replica of their node while passes scale the endpoint up and down: a pass
// locks replicas before nodes and a heartbeat the other way round, which
// deadlocked before heartbeats took the placement lock shared.
func TestHeartbeatsAndPassesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	nodes := []string{"node-a", "node-b", "node-c"}
	inv := gpus(0, 4, "A100-80GB", seven1g())
	for _, n := range nodes {
		f.heartbeat(t, n, inv)
	}
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 40)
	f.reconcile(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	errs := make(chan error, 1000)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				var reps []busapi.ReplicaStatus
				rows, err := f.pool.Query(ctx, "SELECT r.name FROM replicas r JOIN nodes n ON n.id = r.node_id WHERE n.name = $1", n)
				if err != nil {
					continue
				}
				for rows.Next() {
					var name string
					_ = rows.Scan(&name)
					state := busapi.StateReady
					if i%2 == 0 {
						state = busapi.StateStarting
					}
					reps = append(reps, busapi.ReplicaStatus{ID: name, State: state, Addr: "127.0.0.1:1"})
				}
				rows.Close()
				if _, err := f.fleet.Observe(ctx, busapi.NodeStatus{Node: n, BootID: "b", LeaseSeconds: 15, GPUs: inv, Replicas: reps}); err != nil && ctx.Err() == nil {
					errs <- err
				}
			}
		})
	}
	passes := 0
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			n := int32(40)
			if i%2 == 1 {
				n = 4
			}
			if _, err := f.eps.Update(ctx, f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: n, MaxReplicas: 40,
				Tier: "critical", RetentionDays: 30}); err != nil && ctx.Err() == nil {
				errs <- err
			}
			if _, err := f.fleet.Reconcile(ctx, f.start); err != nil && ctx.Err() == nil {
				errs <- err
			}
			passes++
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if passes < 4 {
		t.Fatalf("only %d passes in 4 s", passes)
	}
}
