package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/internal/wait"
)

// cpuReplica is a classifier on cores of a CPU node.
func cpuReplica(id string, cores, memoryMB int) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{
		ID: id, Team: "fraud", Endpoint: "fraud-cpu", Model: "fraud-xgb", Version: "v23", Task: "classification",
		GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, CPUCores: cores, MemoryMB: memoryMB, Sim: json.RawMessage(classifierSim),
	}
}

// cpuConfig is testConfig for a CPU node of 8 cores and 16 GiB.
func cpuConfig(t *testing.T, node string) Config {
	cfg := testConfig(t, node, nil)
	cfg.GPUs, cfg.CPUCores, cfg.MemoryMB = nil, 8, 16*1024
	return cfg
}

func TestCPUNodeConfig(t *testing.T) {
	t.Parallel()
	base := Config{Node: "cpu-1", StateDir: t.TempDir()}
	tests := []struct {
		name string
		mod  func(*Config)
		want string // a part of the error; "" for none
	}{
		{"cores and memory, no GPUs", func(c *Config) { c.CPUCores, c.MemoryMB = 16, 65536 }, ""},
		{"nothing at all", func(c *Config) {}, "at least one GPU, or cpus and memory"},
		{"cores without memory", func(c *Config) { c.CPUCores = 4 }, "memory 0 MiB"},
		{"memory without cores", func(c *Config) { c.MemoryMB = 4096 }, "cpus 0"},
		{"negative cores", func(c *Config) { c.CPUCores, c.MemoryMB = -2, 4096 }, "cpus -2"},
		{"GPUs and cores", func(c *Config) {
			c.GPUs = []busapi.GPU{{Index: 0, Type: "A100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Profile: busapi.ProfileFull}}}}
			c.CPUCores, c.MemoryMB = 8, 4096
		}, "a GPU node or a CPU node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"65536": 65536, "64GB": 65536, "64gib": 65536, "512MB": 512, "2 G": 2048} {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "0", "1.5GB", "64TB", "lots"} {
		if got, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) = %d, want an error", in, got)
		}
	}
}

// TestCPUNodeRunsCPUReplicasWithinItsCores runs a CPU agent: its heartbeat
// carries the CPU inventory and what the replicas hold; replicas that fit
// the cores run, one past them fails with the reason, and a GPU replica
// sent to it fails too.
func TestCPUNodeRunsCPUReplicasWithinItsCores(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := cpuConfig(t, "cpu-hb")
	beats := make(chan busapi.NodeStatus, 64)
	sub, err := e.nc.Subscribe(busapi.NodeStatusSubject("cpu-hb"), func(m *nats.Msg) {
		var st busapi.NodeStatus
		if json.Unmarshal(m.Data, &st) == nil {
			select {
			case beats <- st:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// 4 + 3 cores fit the 8; the third asks for 2 more.
	e.put(t, "cpu-hb", 3, cpuReplica("a", 4, 4096), cpuReplica("b", 3, 2048), cpuReplica("c", 2, 1024), classifier("gpu", 0))
	a := start(t, cfg, e.nc)
	wait.Eventually(t, 10*time.Second, func() bool {
		rs := replicas(a)
		return rs["a"].State == busapi.StateReady && rs["b"].State == busapi.StateReady && rs["c"].State == busapi.StateFailed &&
			rs["gpu"].State == busapi.StateFailed
	}, "want a and b ready, c and gpu failed: %v", wait.Show(func() any { return replicas(a) }))
	rs := replicas(a)
	if !strings.Contains(rs["c"].Reason, "needs 2 cores; 1 of the node's 8 are free") {
		t.Errorf("c's reason = %q, want the cores it lacks", rs["c"].Reason)
	}
	if !strings.Contains(rs["gpu"].Reason, "CPU node") {
		t.Errorf("gpu's reason = %q, want a GPU replica refused on a CPU node", rs["gpu"].Reason)
	}
	var st busapi.NodeStatus
	wait.Eventually(t, time.Minute, func() bool {
		for {
			select {
			case st = <-beats:
				if st.CPUCoresUsed == 7 {
					return true
				}
			default:
				return false
			}
		}
	}, "no heartbeat with a and b holding their cores")
	if len(st.GPUs) != 0 || st.CPUCores != 8 || st.MemoryMB != 16*1024 || st.MemoryUsedMB != 6144 {
		t.Fatalf("heartbeat inventory = gpus %v, %d cores, %d MiB, %d MiB used; want no GPUs, 8 cores, 16384 MiB, 6144 used",
			st.GPUs, st.CPUCores, st.MemoryMB, st.MemoryUsedMB)
	}
}

// TestMeteringOneRecordPerCorePerSecond checks that a CPU replica is
// metered in core-seconds: each second one record per allocated core,
// typed cpu / cpu-core, the requests on the first.
func TestMeteringOneRecordPerCorePerSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := cpuConfig(t, "cpu-meter")
	e.put(t, "cpu-meter", 1, cpuReplica("two", 2, 2048), cpuReplica("one", 1, 1024))
	a := start(t, cfg, e.nc)
	addrs := allReady(t, a, "two", "one")
	for range 4 {
		predict(t, addrs["two"])
	}
	var stored map[string]busapi.UsageBatch
	var requests int64
	wait.Eventually(t, 10*time.Second, func() bool {
		stored = checkLedger(t, readUsage(t, e.js), "cpu-meter", 3)
		requests = 0
		for _, b := range stored {
			for _, r := range b.Records {
				requests += r.Requests
			}
		}
		return requests == 4 && len(stored) >= 3
	}, "%v metered; want 4 requests in at least 3 batches", wait.Show(func() any { return fmt.Sprintf("%d batches, %d requests", len(stored), requests) }))
	for _, b := range stored {
		cores := map[string][]int{}
		for _, r := range b.Records {
			if r.GPUType != busapi.CPUType || r.Profile != busapi.ProfileCPU || r.GPU != 0 || r.Endpoint != "fraud-cpu" {
				t.Fatalf("record %+v, want a cpu / cpu-core record of fraud-cpu", r)
			}
			if r.Slice > 0 && r.Requests != 0 {
				t.Errorf("core %d of %s carries %d requests; the first core counts them", r.Slice, r.Replica, r.Requests)
			}
			cores[r.Replica] = append(cores[r.Replica], r.Slice)
		}
		if fmt.Sprint(cores["two"]) != "[0 1]" || fmt.Sprint(cores["one"]) != "[0]" {
			t.Fatalf("batch %s cores per replica = %v; want two: [0 1], one: [0]", b.ID, cores)
		}
	}
}
