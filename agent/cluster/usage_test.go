package cluster_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// TestUsageIsMeteredOnlyForPodsOnANode: the cluster agent meters through
// the node agent's own path (per second, per slot, spooled, deduplicated
// batch ids), and only what holds a node's resources: a replica the
// scheduler could not place costs nothing.
func TestUsageIsMeteredOnlyForPodsOnANode(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	// The node has two 1g.10gb slices and someone else's pod holds one,
	// so the second replica is the scheduler's to refuse (the agent, which
	// counts the pool's two slices, lets it through).
	d, nodes := pool(t, c, cluster.KindGPU, kubetest.Node{GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 2}})
	inv, err := cluster.ReadInventory(nodes, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	squat(t, c, "1g.10gb", 1)
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Node: "pool-" + uniq(t), GPUs: inv.GPUs, StateDir: t.TempDir(), Lease: 15 * time.Second,
		Heartbeat: time.Second, Driver: d, Clock: quartz.NewReal()}, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	placed, refused := migSpec("fraud-v1-r1", 0), migSpec("fraud-v1-r2", 1)
	placed.Slots, refused.Slots = []busapi.Slot{{GPU: 0, Slice: 0}}, []busapi.Slot{{GPU: 0, Slice: 1}}
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(d.NamespacePrefix(), "risk")
	// The placed replica first, so that it is the one the scheduler binds.
	for gen, reps := range [][]busapi.ReplicaSpec{{placed}, {placed, refused}} {
		desired, _ := json.Marshal(busapi.Desired{Node: "pool-" + uniq(t), Generation: int64(gen + 1), Replicas: reps})
		if _, err := kv.Put(ctx, "pool-"+uniq(t), desired); err != nil {
			t.Fatal(err)
		}
		if gen == 0 {
			c.WaitScheduled(t, ns, podOf(t, c, placed, d).Name)
		}
	}

	var st busapi.NodeStatus
	wait.Eventually(t, time.Minute, func() bool {
		st = a.Status()
		for _, r := range st.Replicas {
			if r.ID == refused.ID {
				return r.State == busapi.StateFailed && r.Reason != ""
			}
		}
		return false
	}, "the refused replica was never reported failed: %v", wait.Show(func() any { return st.Replicas }))
	c.MarkRunning(t, c.WaitScheduled(t, ns, podOf(t, c, placed, d).Name), "")
	wait.Eventually(t, time.Minute, func() bool { return a.Counters().BatchesAcked >= 3 }, "no usage acknowledged")

	cons, err := js.OrderedConsumer(ctx, busapi.StreamUsage, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	records := 0
	for m := range batch.Messages() {
		b, err := busapi.DecodeUsage(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range b.Records {
			records++
			if u.Replica != placed.ID || u.Profile != "mig-1g.10gb" || u.GPUType != "A100-80GB" || u.Team != "risk" {
				t.Fatalf("usage record %+v, want only the placed replica's 1g.10gb slice", u)
			}
		}
	}
	if records == 0 {
		t.Fatal("no usage records in MP_USAGE")
	}
}
