package ingest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// usageSource makes the usage batches an exactly-once case publishes:
// synthetic seconds of a fleet, or what a real agent metered with one of
// its drivers and published to a NATS of its own.
type usageSource struct {
	name    string
	batches func(t *testing.T) []busapi.UsageBatch
}

// usageSources are the producers every exactly-once case runs against: a
// node agent's sim driver and the cluster agent's kubernetes driver (pods
// on a real API server and scheduler, metered per slot-second only while
// bound) as well as synthetic batches.
var usageSources = []usageSource{
	{"synthetic", func(*testing.T) []busapi.UsageBatch {
		var out []busapi.UsageBatch
		for sec := range int64(10) {
			for n := range 3 {
				out = append(out, nodeSecond(fmt.Sprintf("node-%d", n), sec, 4))
			}
		}
		return out
	}},
	{"sim", simUsage},
	{"kubernetes", clusterUsage},
}

// TestExactlyOnceForEveryUsageSource runs the ledger's exactly-once cases
// over each source's batches: every batch published twice inside the
// duplicate window, every batch replayed after the window forgot its id
// (as an agent replays its spool late), and every slot-second sent again
// under another batch id with a repeat inside the batch (issue 25's
// attack). Each time ClickHouse holds one row, one bill, per slot-second.
func TestExactlyOnceForEveryUsageSource(t *testing.T) {
	t.Parallel()
	for _, src := range usageSources {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			batches := src.batches(t)
			if len(batches) == 0 {
				t.Fatal("the source made no usage")
			}
			t.Run("duplicates inside the window", func(t *testing.T) {
				e := newEnv(t, nil, 0)
				e.start(t, e.usageConfig(t, e.js))
				e.publishAsync(t, e.js, batches)
				for _, b := range batches {
					if ack := e.publish(t, e.js, b); !ack.Duplicate {
						t.Fatalf("second publish of %s inside the window: not reported as a duplicate", b.ID)
					}
				}
				e.waitDrained(t, "", 30*time.Second)
				e.l.check(t, e.ch)
			})
			t.Run("replayed after the window", func(t *testing.T) {
				e := newEnv(t, nil, time.Second)
				e.publishAsync(t, e.js, batches)
				e.start(t, e.usageConfig(t, e.js))
				e.waitDrained(t, "", 30*time.Second)
				for _, b := range batches {
					wait.Eventually(t, 10*time.Second, func() bool { return !e.publish(t, e.js, b).Duplicate },
						"replay of %s still a duplicate: the window never forgot it", b.ID)
				}
				e.waitDrained(t, "", 30*time.Second)
				e.l.check(t, e.ch)
			})
			t.Run("a slot-second under another id", func(t *testing.T) {
				e := newEnv(t, nil, 0)
				u := e.start(t, e.usageConfig(t, e.js))
				e.publishAsync(t, e.js, batches)
				e.waitDrained(t, "", 30*time.Second)
				var again []busapi.UsageBatch
				for _, b := range batches {
					b.ID += "-again"
					b.Records = append(b.Records[:len(b.Records):len(b.Records)], b.Records[0])
					again = append(again, b)
				}
				e.publishAsync(t, e.js, again)
				e.waitDrained(t, "", 30*time.Second)
				e.l.check(t, e.ch)
				records := 0
				for _, b := range batches {
					records += len(b.Records)
				}
				if st := u.Stats(); st.Rows != uint64(records) || st.RepeatedRows != uint64(records+len(batches)) {
					t.Errorf("stats: %d rows stored, %d repeats dropped; want %d and %d", st.Rows, st.RepeatedRows, records, records+len(batches))
				}
			})
		})
	}
}

// meteredBy runs an agent of cfg with drv on a NATS of its own, gives it
// the replicas, calls running once it started, waits until it has metered
// at least five seconds, and returns what it published to MP_USAGE.
func meteredBy(t *testing.T, cfg agent.Config, drv agent.Driver, running func(), reps ...busapi.ReplicaSpec) []busapi.UsageBatch {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.Lease, cfg.Heartbeat, cfg.Driver, cfg.Clock = t.TempDir(), 15*time.Second, time.Second, drv, quartz.NewReal()
	a, err := agent.New(cfg, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			a.Stop()
		}
	})
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	desired, _ := json.Marshal(busapi.Desired{Node: cfg.Node, Generation: 1, Replicas: reps})
	if _, err := kv.Put(ctx, cfg.Node, desired); err != nil {
		t.Fatal(err)
	}
	if running != nil {
		running()
	}
	// Five seconds metered, two of them after every replica left
	// starting: a pool meters a pod from its binding on, which the
	// cluster's scheduler may take seconds to make (five seconds alone
	// once ended before the second pod was bound).
	started, from := false, uint64(0)
	wait.Eventually(t, 2*time.Minute, func() bool {
		acked := a.Counters().BatchesAcked
		if !started {
			st := a.Status().Replicas
			if len(st) != len(reps) || slices.ContainsFunc(st, func(r busapi.ReplicaStatus) bool { return r.State == busapi.StateStarting }) {
				return false
			}
			started, from = true, acked
		}
		return acked >= max(5, from+2)
	}, "%s metered no five seconds with every replica started: %v", cfg.Node, wait.Show(func() any { return a.Status().Replicas }))
	a.Stop()
	stopped = true
	cons, err := js.OrderedConsumer(ctx, busapi.StreamUsage, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.FetchNoWait(10_000)
	if err != nil {
		t.Fatal(err)
	}
	var out []busapi.UsageBatch
	for m := range msgs.Messages() {
		b, err := busapi.DecodeUsage(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func poolSpec(id, profile string, slot busapi.Slot) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{ID: id, Team: "risk", Endpoint: "fraud", Model: "fraud-xgb", Version: "v3", Task: "classification",
		GPUType: "A100-80GB", Profile: profile, Slots: []busapi.Slot{slot}, Runtime: "builtin", Token: "token-" + id}
}

// simUsage is a node agent's usage with the sim driver: a whole GPU and a
// 1g.10gb slice.
func simUsage(t *testing.T) []busapi.UsageBatch {
	drv := agent.NewSimDriver(agent.SimDriverConfig{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		drv.Close(ctx)
	})
	gpus, err := agent.ParseInventory([]string{"2xA100-80GB"}, "1:7x1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	return meteredBy(t, agent.Config{Node: "sim-node", GPUs: gpus}, drv, nil,
		poolSpec("sim-r0", busapi.ProfileFull, busapi.Slot{GPU: 0}), poolSpec("sim-r1", "mig-1g.10gb", busapi.Slot{GPU: 1, Slice: 2}))
}

// clusterUsage is a cluster agent's usage: a pool of one node with a
// whole GPU and a MIG GPU on the shared test cluster, a replica's pod on
// each, which the test's kubelet runs once the scheduler bound them.
func clusterUsage(t *testing.T) []busapi.UsageBatch {
	c := kubetest.Shared(t)
	sum := sha256.Sum256([]byte(t.Name()))
	id := "u" + hex.EncodeToString(sum[:])[:8]
	n := c.AddNode(t, kubetest.Node{GPUs: 1, GPUProduct: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, MIG: map[string]int{"1g.10gb": 7},
		Labels: map[string]string{"test.modelplane.io/pool": id}})
	inv, err := cluster.ReadInventory([]corev1.Node{*n}, cluster.KindGPU)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := cluster.New(cluster.Config{Client: c.Client(), Pool: "pool-" + id, Kind: cluster.KindGPU, Inventory: inv,
		NamespacePrefix: id + "-", Image: "modelplane/modelplane:test", ControlPlaneURL: "http://cp.example:8080",
		ArtifactToken: func() string { return "artifact-token" }, NodeSelector: map[string]string{"test.modelplane.io/pool": id},
		Clock: quartz.NewReal()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := drv.Watch(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		drv.Close()
		list, err := c.Client().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, id+"-") {
				_ = c.Client().CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
			}
		}
	})
	running := func() { c.AutoRun(t, func(p *corev1.Pod) bool { return p.Spec.NodeName == n.Name }, nil) }
	out := meteredBy(t, agent.Config{Node: "pool-" + id, GPUs: inv.GPUs}, drv, running,
		poolSpec("kube-r0", busapi.ProfileFull, busapi.Slot{GPU: 0}), poolSpec("kube-r1", "mig-1g.10gb", busapi.Slot{GPU: 1, Slice: 2}))
	profiles := map[string]string{}
	for _, b := range out {
		for _, r := range b.Records {
			profiles[r.Replica] = r.Profile
		}
	}
	if len(profiles) != 2 || profiles["kube-r0"] != busapi.ProfileFull || profiles["kube-r1"] != "mig-1g.10gb" {
		t.Fatalf("the pool metered %v, want its two pods' slots", profiles)
	}
	return out
}
