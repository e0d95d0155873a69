// Package proto is the NATS contract between the control plane, the node
// agents and the gateways: subjects, the KV buckets and streams with their
// settings, and the message structs. It imports only the standard library so
// that every side can depend on it; it holds no behaviour beyond naming.
package proto

import (
	"encoding/json"
	"strings"
	"time"
)

// KV buckets.
const (
	// BucketDesired holds, per node, the node's full desired replica set.
	BucketDesired = "mp_desired"
	// BucketRoutes holds, per endpoint, the routing table gateways serve from.
	BucketRoutes = "mp_routes"
	// BucketKeys holds, per API key prefix, the key's digest, so that
	// gateways authenticate requests without a database.
	BucketKeys = "mp_keys"
)

// Streams and their subject prefixes.
const (
	StreamUsage       = "MP_USAGE"
	StreamPredictions = "MP_PREDICTIONS"
	StreamReqStats    = "MP_REQSTATS"
)

// Bucket is a KV bucket's settings.
type Bucket struct {
	Name    string
	History int
}

// Stream is a JetStream stream's settings. Every stream uses file storage and
// explicit acks; Duplicates is the Nats-Msg-Id deduplication window.
type Stream struct {
	Name       string
	Subjects   []string
	MaxAge     time.Duration
	Duplicates time.Duration
}

// Buckets are the KV buckets the control plane creates at start.
var Buckets = []Bucket{
	{Name: BucketDesired, History: 1},
	{Name: BucketRoutes, History: 1},
	{Name: BucketKeys, History: 1},
}

// Streams are the streams the control plane creates at start. MaxAge bounds
// how long an ingest outage can last before records are lost; it is far
// beyond any outage the operations guide expects (docs/operations.md).
var Streams = []Stream{
	{Name: StreamUsage, Subjects: []string{"mp.usage.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute},
	{Name: StreamPredictions, Subjects: []string{"mp.pred.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute},
	{Name: StreamReqStats, Subjects: []string{"mp.reqstats.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute},
}

// NodeStatusSubject is where an agent publishes its heartbeats (core NATS).
func NodeStatusSubject(node string) string { return "mp.node." + node + ".status" }

// NodeStatusWildcard matches every node's heartbeats.
const NodeStatusWildcard = "mp.node.*.status"

// UsageSubject is where an agent publishes its usage batches (MP_USAGE).
func UsageSubject(node string) string { return "mp.usage." + node }

// EventsSubject carries rollout, approval and alert events of a team.
func EventsSubject(team string) string { return "mp.events." + team }

// KVSubject is the subject a JetStream publish uses to put key in bucket; the
// outbox relay publishes desired state and routes this way so that the
// outbox id becomes the Nats-Msg-Id.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// KVKey splits a KVSubject back into bucket and key; ok is false for any
// other subject.
func KVKey(subject string) (bucket, key string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "$KV.")
	if !ok {
		return "", "", false
	}
	bucket, key, ok = strings.Cut(rest, ".")
	return bucket, key, ok && bucket != "" && key != ""
}

// Allocation profiles: a whole GPU, or a MIG slice named by its NVIDIA profile.
const (
	ProfileFull = "full"
	// MIGPrefix starts every MIG allocation profile, as in "mig-1g.10gb".
	MIGPrefix = "mig-"
)

// MIGShape is a MIG partition of an 80 GB GPU (A100-80GB, H100-80GB).
type MIGShape struct {
	// Profile is the allocation profile, as in "mig-1g.10gb".
	Profile string
	// Compute is the share of the GPU's compute, in sevenths.
	Compute int
	// MemorySlices is the share of the GPU's memory, in eighths.
	MemorySlices int
	MemoryMB     int
}

// MIGShapes are the MIG partitions the platform knows, smallest first.
func MIGShapes() []MIGShape {
	return []MIGShape{
		{"mig-1g.10gb", 1, 1, 10 * 1024},
		{"mig-2g.20gb", 2, 2, 20 * 1024},
		{"mig-3g.40gb", 3, 4, 40 * 1024},
		{"mig-4g.40gb", 4, 4, 40 * 1024},
		{"mig-7g.80gb", 7, 8, 80 * 1024},
	}
}

// MIG returns the shape of a MIG allocation profile ("mig-3g.40gb").
func MIG(profile string) (MIGShape, bool) {
	for _, m := range MIGShapes() {
		if m.Profile == profile {
			return m, true
		}
	}
	return MIGShape{}, false
}

// Desired is the full desired replica set of one node, the value of its key in
// BucketDesired. Generation increases with every change; an agent ignores a
// generation at or below the one it has applied.
type Desired struct {
	Node       string        `json:"node"`
	Generation int64         `json:"generation"`
	Replicas   []ReplicaSpec `json:"replicas"`
}

// ReplicaSpec is one replica an agent must run.
type ReplicaSpec struct {
	// ID is the replica's name, unique in the fleet, never reused.
	ID       string `json:"id"`
	Team     string `json:"team"`
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	Version  string `json:"version"`
	// Task is classification, regression or llm.
	Task string `json:"task"`
	// GPUType is the type of the GPUs in Slots, as in "A100-80GB".
	GPUType string `json:"gpu_type"`
	// Profile is the allocation profile of each slot: "full" or a MIG profile.
	Profile string `json:"profile"`
	// Slots are the GPU slices the replica owns; several whole GPUs for
	// tensor parallelism.
	Slots []Slot `json:"slots"`
	// Sim is the version's sim profile, for the sim driver.
	Sim json.RawMessage `json:"sim,omitempty"`
}

// Slot is one allocatable unit: a whole GPU (Slice 0 of a GPU without MIG) or
// one MIG partition.
type Slot struct {
	GPU   int `json:"gpu"`
	Slice int `json:"slice"`
}

// NodeStatus is an agent heartbeat: inventory, replica states and GPU use.
type NodeStatus struct {
	Node   string    `json:"node"`
	BootID string    `json:"boot_id"`
	Time   time.Time `json:"time"`
	// LeaseSeconds is how long the node stays alive without a heartbeat.
	LeaseSeconds int `json:"lease_seconds"`
	// Generation is the last desired generation the agent applied.
	Generation int64           `json:"generation"`
	GPUs       []GPU           `json:"gpus"`
	Replicas   []ReplicaStatus `json:"replicas"`
}

// GPU is one GPU of a node with its partitions and current use.
type GPU struct {
	Index    int    `json:"index"`
	Type     string `json:"type"`
	MemoryMB int    `json:"memory_mb"`
	MIG      bool   `json:"mig"`
	// Slices are the allocatable units: one "full" slice without MIG, the
	// MIG partitions with it.
	Slices       []Slice `json:"slices"`
	UtilPct      float64 `json:"util_pct"`
	MemoryUsedMB int     `json:"memory_used_mb"`
}

// Slice is one allocatable unit of a GPU.
type Slice struct {
	Index   int    `json:"index"`
	Profile string `json:"profile"`
}

// Replica states an agent reports.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateFailed   = "failed"
)

// ReplicaStatus is what an agent observes of one replica.
type ReplicaStatus struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Addr   string `json:"addr,omitempty"`
	Reason string `json:"reason,omitempty"`
	// QueueDepth is the number of requests waiting (not yet in a batch).
	QueueDepth int `json:"queue_depth"`
	// KVUsedPct is the share of KV-cache pages in use (LLM replicas).
	KVUsedPct float64 `json:"kv_used_pct"`
	// Requests is the number of requests completed since the replica started.
	Requests int64 `json:"requests"`
}

// UsageBatch is one MP_USAGE message. ID is also its Nats-Msg-Id; a batch
// spooled during an outage is replayed with the same ID.
type UsageBatch struct {
	ID      string  `json:"id"`
	Node    string  `json:"node"`
	Records []Usage `json:"records"`
}

// Usage is one GPU allocation during one second.
type Usage struct {
	// Time is the second, in Unix seconds.
	Time     int64  `json:"t"`
	Node     string `json:"node"`
	GPU      int    `json:"gpu"`
	Slice    int    `json:"slice"`
	GPUType  string `json:"gpu_type"`
	Profile  string `json:"profile"`
	Team     string `json:"team"`
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	Version  string `json:"version"`
	Replica  string `json:"replica"`
	// UtilPct is the average compute utilisation in that second, 0–100.
	UtilPct float64 `json:"util_pct"`
	// MemoryMB is the GPU memory in use.
	MemoryMB int64 `json:"memory_mb"`
	// Requests is the number of requests completed in that second.
	Requests int64 `json:"requests"`
}

// Route is the value of an endpoint's key in BucketRoutes: everything a
// gateway needs to serve it without asking the control plane.
type Route struct {
	Endpoint string `json:"endpoint"`
	Team     string `json:"team"`
	Task     string `json:"task"`
	// Generation increases with every change of the entry.
	Generation int64          `json:"generation"`
	Versions   []RouteVersion `json:"versions"`
}

// RouteVersion is one version of an endpoint in the routing table.
type RouteVersion struct {
	Name string `json:"name"`
	// Weight is the version's share of unpinned traffic, in percent.
	Weight   int            `json:"weight"`
	Replicas []RouteReplica `json:"replicas"`
}

// RouteReplica is one ready replica.
type RouteReplica struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// KeyEntry is the value of an API key's prefix in BucketKeys: what a gateway
// needs to authenticate the key locally. Only active keys have an entry; the
// control plane deletes it when the key is revoked. It never holds the key.
type KeyEntry struct {
	// Prefix is the key's public lookup id, as in "mpk_0123456789ab".
	Prefix string `json:"prefix"`
	// SHA256 is the hex SHA-256 of the whole key.
	SHA256 string `json:"sha256"`
	// Team is the team the key belongs to; empty for an org-wide key.
	Team string `json:"team,omitempty"`
	// Role is the key's role: a team role, or platform_admin or finance for
	// an org-wide key.
	Role      string     `json:"role"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}
