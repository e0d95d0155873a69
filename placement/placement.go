// Package placement decides where replicas run: which node, GPUs and MIG
// slices each replica gets (DESIGN.md section 10). It is a pure function of
// the fleet's slices and the replicas asked for; it reads no database and
// talks to no agent. The fleet package persists its decisions.
package placement

import "modelplane/agent/proto"

// Node is one schedulable node (ready, not lost) with every slice it has.
type Node struct {
	Name   string
	Slices []Slice
}

// Slice is one allocatable unit of a GPU: a whole GPU (profile "full",
// index 0) or a MIG partition (profile "mig-1g.10gb", …).
type Slice struct {
	GPU      int
	Index    int
	GPUType  string // "A100-80GB", "H100-80GB"
	Profile  string
	MemoryMB int
	// Owner is the replica holding the slice; empty when free. OwnerEndpoint
	// and OwnerTier describe that replica.
	Owner         string
	OwnerEndpoint string
	OwnerTier     string
}

// Request asks for one replica.
type Request struct {
	// Replica is the new replica's ID; results carry it back.
	Replica  string
	Endpoint string
	// Tier is the endpoint's tier (critical, standard, batch).
	Tier string
	// MemoryMB is the version's GPU memory per GPU; 0 means a whole GPU.
	MemoryMB int
	// GPUCount is the number of GPUs; more than one means tensor
	// parallelism: that many whole GPUs of one type on one node.
	GPUCount int
	// GPUType is required when not empty.
	GPUType string
	// MinProfile is the smallest allocation the endpoint accepts (its
	// instance profile): a MIG profile, or "full". Empty means none.
	MinProfile string
}

// Result is where one requested replica goes, or why it cannot.
type Result struct {
	Replica string
	// Node, GPUType, Profile and Slots are set when placed.
	Node    string
	GPUType string
	Profile string
	Slots   []proto.Slot
	// Err says why the replica could not be placed, for people to read
	// ("no free mig-3g.40gb slice or whole GPU on an H100-80GB"); empty when placed.
	Err string
}
