package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/replica"
)

// Node is a node as people see it.
type Node struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// HeartbeatAgeSeconds is how long ago the last heartbeat arrived.
	HeartbeatAgeSeconds float64   `json:"heartbeat_age_seconds"`
	LastHeartbeat       time.Time `json:"last_heartbeat"`
	LeaseSeconds        int32     `json:"lease_seconds"`
	GPUCount            int       `json:"gpu_count"`
	GPUTypes            []string  `json:"gpu_types"`
	MIG                 bool      `json:"mig"`
	Slices              int64     `json:"slices"`
	SlicesUsed          int64     `json:"slices_used"`
	UtilPct             float64   `json:"util_pct"`
	Generation          int64     `json:"generation"`
	AppliedGeneration   int64     `json:"applied_generation"`
	GPUs                []GPU     `json:"gpus,omitempty"`
	// CPUCores and MemoryMB are a CPU node's inventory (0 on a GPU node);
	// CPUCoresUsed and MemoryUsedMB what its replicas are given of it.
	CPUCores     int `json:"cpu_cores"`
	MemoryMB     int `json:"memory_mb"`
	CPUCoresUsed int `json:"cpu_cores_used"`
	MemoryUsedMB int `json:"memory_used_mb"`
	// Cache is the node's artifact cache as its last heartbeat reported
	// it; absent for an agent that keeps none (the sim driver's nodes).
	Cache *busapi.CacheStatus `json:"cache,omitempty"`
	// Runtimes are the runtime catalogue entries the node reports it can
	// run ("*": every runtime, a simulated node; [] none); null when its
	// agent does not say, and then placement does not filter the node.
	Runtimes []string `json:"runtimes"`
	// Replicas are the replicas placed on the node with their load and
	// cold start; only in a single node's answer.
	Replicas []NodeReplica `json:"replicas,omitempty"`
}

// NodeReplica is one replica on a node, as the node's page shows it.
type NodeReplica struct {
	Name     string          `json:"name"`
	Team     string          `json:"team"`
	Endpoint string          `json:"endpoint"`
	Version  string          `json:"version"`
	State    string          `json:"state"`
	Reason   string          `json:"reason,omitempty"`
	Failures int32           `json:"failures,omitempty"`
	Metrics  replica.Metrics `json:"metrics"`
}

// GPU is one GPU of a node with its slices and who uses them.
type GPU struct {
	Index        int         `json:"index"`
	Type         string      `json:"type"`
	MemoryMB     int         `json:"memory_mb"`
	MIG          bool        `json:"mig"`
	UtilPct      float64     `json:"util_pct"`
	MemoryUsedMB int         `json:"memory_used_mb"`
	Slices       []SliceView `json:"slices"`
}

// SliceView is one slice and the replica holding it, if any.
type SliceView struct {
	Index        int    `json:"index"`
	Profile      string `json:"profile"`
	MemoryMB     int    `json:"memory_mb"`
	Replica      string `json:"replica,omitempty"`
	ReplicaState string `json:"replica_state,omitempty"`
	Team         string `json:"team,omitempty"`
	Endpoint     string `json:"endpoint,omitempty"`
	Version      string `json:"version,omitempty"`
}

func (f *Fleet) nodeView(n db.Node) Node {
	v := Node{Name: n.Name, State: n.State, LastHeartbeat: n.LastHeartbeat, LeaseSeconds: n.LeaseSeconds,
		HeartbeatAgeSeconds: f.now().Sub(n.LastHeartbeat).Seconds(), GPUTypes: []string{}, Generation: n.Generation, AppliedGeneration: n.AppliedGeneration,
		CPUCores: int(n.CPUCores), MemoryMB: int(n.MemoryMB), Runtimes: n.Runtimes}
	if len(n.Cache) > 0 {
		var c busapi.CacheStatus
		if json.Unmarshal(n.Cache, &c) == nil {
			v.Cache = &c
		}
	}
	var inv []inventoryGPU
	_ = json.Unmarshal(n.Inventory, &inv)
	var use []gpuUse
	_ = json.Unmarshal(n.GPUUse, &use)
	v.GPUCount = len(inv)
	seen := map[string]bool{}
	for _, g := range inv {
		if !seen[g.Type] {
			seen[g.Type] = true
			v.GPUTypes = append(v.GPUTypes, g.Type)
		}
		v.MIG = v.MIG || g.MIG
	}
	if len(use) > 0 {
		for _, u := range use {
			v.UtilPct += u.UtilPct
		}
		v.UtilPct /= float64(len(use))
	}
	return v
}

// Nodes lists every node; platform admins only.
func (f *Fleet) Nodes(ctx context.Context, p *auth.Principal) ([]Node, error) {
	if !p.PlatformAdmin() {
		return nil, auth.ErrForbidden
	}
	q := db.New(f.pool)
	rows, err := q.NodeList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	counts, err := q.GPUSliceCountByNode(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	byNode := map[int64]db.GPUSliceCountByNodeRow{}
	for _, c := range counts {
		byNode[c.NodeID] = c
	}
	cpu, err := cpuUse(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]Node, 0, len(rows))
	for _, n := range rows {
		v := f.nodeView(n)
		v.Slices, v.SlicesUsed = byNode[n.ID].Slices, byNode[n.ID].Used
		v.CPUCoresUsed, v.MemoryUsedMB = int(cpu[n.ID].CPUCores), int(cpu[n.ID].MemoryMB)
		out = append(out, v)
	}
	return out, nil
}

// cpuUse is what CPU replicas hold, by node id.
func cpuUse(ctx context.Context, q *db.Queries) (map[int64]db.ReplicaCPUUseByNodeRow, error) {
	rows, err := q.ReplicaCPUUseByNode(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]db.ReplicaCPUUseByNodeRow, len(rows))
	for _, r := range rows {
		out[r.NodeID] = r
	}
	return out, nil
}

// Node returns one node with its GPUs, slices and their users; platform
// admins only.
func (f *Fleet) Node(ctx context.Context, p *auth.Principal, name string) (Node, error) {
	if !p.PlatformAdmin() {
		return Node{}, auth.ErrForbidden
	}
	q := db.New(f.pool)
	n, err := q.NodeGet(ctx, name)
	if err != nil {
		return Node{}, fmt.Errorf("node %s: %w", name, err)
	}
	v := f.nodeView(n)
	cpu, err := cpuUse(ctx, q)
	if err != nil {
		return Node{}, fmt.Errorf("node %s: %w", name, err)
	}
	v.CPUCoresUsed, v.MemoryUsedMB = int(cpu[n.ID].CPUCores), int(cpu[n.ID].MemoryMB)
	var inv []inventoryGPU
	_ = json.Unmarshal(n.Inventory, &inv)
	var use []gpuUse
	_ = json.Unmarshal(n.GPUUse, &use)
	rows, err := q.GPUSliceListByNode(ctx, n.ID)
	if err != nil {
		return Node{}, fmt.Errorf("node %s: %w", name, err)
	}
	for _, g := range inv {
		gv := GPU{Index: g.Index, Type: g.Type, MemoryMB: g.MemoryMB, MIG: g.MIG, Slices: []SliceView{}}
		if g.Index < len(use) {
			gv.UtilPct, gv.MemoryUsedMB = use[g.Index].UtilPct, use[g.Index].MemoryUsedMB
		}
		v.GPUs = append(v.GPUs, gv)
	}
	for _, r := range rows {
		v.Slices++
		if r.Replica != "" {
			v.SlicesUsed++
		}
		if int(r.GPU) >= len(v.GPUs) {
			continue
		}
		g := &v.GPUs[r.GPU]
		g.Slices = append(g.Slices, SliceView{Index: int(r.Slice), Profile: r.Profile, MemoryMB: int(r.MemoryMB), Replica: r.Replica,
			ReplicaState: r.ReplicaState, Team: r.Team, Endpoint: r.Endpoint, Version: r.Version})
	}
	reps, err := q.ReplicaListByNode(ctx, n.ID)
	if err != nil {
		return Node{}, fmt.Errorf("node %s: %w", name, err)
	}
	v.Replicas = make([]NodeReplica, len(reps))
	for i, r := range reps {
		v.Replicas[i] = NodeReplica{Name: r.Name, Team: r.Team, Endpoint: r.Endpoint, Version: r.Version, State: r.State,
			Reason: r.Reason, Failures: r.Failures, Metrics: replica.ParseMetrics(r.Metrics)}
	}
	return v, nil
}
