// Package placement decides where replicas run: which node, GPUs and MIG
// slices each replica gets (DESIGN.md section 10). Plan is a pure,
// deterministic function of the fleet's slices and the replicas asked for;
// the package reads no database, talks to no agent and keeps no state. The
// fleet package persists its decisions; to replace a lost node's replicas
// the reconciler calls Plan again with the surviving nodes.
//
// Sizing. A replica on one GPU is offered allocations in order of
// preference by its GPU memory: up to 10 GB mig-1g.10gb, up to 20 GB
// mig-2g.20gb, up to 40 GB mig-3g.40gb then mig-4g.40gb, each followed by
// every larger MIG profile in size order and then a whole GPU ("full");
// above 40 GB a whole GPU, then mig-7g.80gb. A replica that names no memory
// gets a whole GPU; one that needs more than 80 GB on one GPU is refused and
// told to ask for several GPUs. A replica of several GPUs (tensor
// parallelism) gets that many whole GPUs of one type on one node, never MIG
// slices. The endpoint's instance profile (Request.MinProfile) drops every
// allocation smaller than it, in the order 1g.10gb < 2g.20gb < 3g.40gb <
// 4g.40gb < 7g.80gb < full. A whole GPU whose reported memory is below the
// replica's is skipped; MIG profiles carry their memory in their names.
//
// Isolation. A slice is never given to two replicas: a slice with an owner,
// or given earlier in the same Plan, is taken, and a whole GPU is taken as
// soon as any of its slices is. Tiers are kept apart: a GPU that holds
// replicas of one tier takes replicas of that tier only. MIG already isolates
// memory and compute between slices, but trust tiers still get separate
// GPUs; whole GPUs are exclusive, and GPUs are never time-sliced (no MPS).
//
// Choice. Among the free slices of the most preferred profile available,
// Plan takes the one on the node holding the fewest slices of the same
// endpoint (spread), then on the GPU with the most compute already in use
// and the node with the most compute in use (best fit: partly used GPUs and
// nodes fill before fresh ones, which stay whole for large replicas), then
// by node name, GPU index and slice index. Tensor-parallel replicas go to
// the node with the fewest same-endpoint slices, then the fewest free whole
// GPUs of the type that still suffice, taking its lowest-numbered GPUs.
//
// Slices of profiles outside Profiles are never given out, but an owned one
// still counts as held.
//
// CPU replicas. A request with GPUCount 0 and CPUCores set (a version that
// needs no GPU) is placed by whole cores and memory on a CPU node, a node
// without GPU slices that reports cores: never on a GPU node, and a CPU
// node never gets a GPU request. Cores are exclusive, so tiers may share a
// CPU node. Among the nodes with the cores and memory free, Plan takes the
// one with the fewest replicas of the same endpoint (spread), then the
// fewest free cores (best fit), then the least free memory, then by name.
//
// Runtimes. A request that names a runtime catalogue entry
// (Request.Runtime) is placed only on nodes that run it: nodes whose
// Runtimes list it or proto.AnyRuntime, and nodes that do not say (nil
// Runtimes), which take anything. The others are passed over before any
// other rule, so they neither take the replica nor count as GPUs kept for
// other tiers, and Preempt frees no GPU on them. When no node of the
// request's kind runs the entry, Result.Err says so ("no node can run vllm
// (installed on none of 3 GPU nodes)"); when those that do are full, the
// usual reason ends with how few of them there are.
package placement
