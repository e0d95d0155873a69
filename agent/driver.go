package agent

import (
	"context"
	"errors"

	"modelplane/busapi"
)

// Driver runs replicas on this machine: the sim driver serves them in this
// process; a process or Kubernetes driver would launch runtimes. The agent
// decides what runs; the driver only does it. A driver may outlive the
// Agent that uses it, which is how an agent restarted in the same process
// adopts what is running instead of starting it twice.
type Driver interface {
	// Start launches the replica and returns once it accepts connections;
	// it may still be loading (Observation.Ready false). opts.Addr is a
	// preferred listen address, the one a previous run used, or ""; a
	// driver that cannot take it picks another. opts.ModelDir holds the
	// version's verified files. Starting a replica the driver already runs
	// with the same spec returns the running one: one id never runs twice.
	Start(ctx context.Context, spec busapi.ReplicaSpec, opts StartOptions) (Replica, error)
	// Running lists the replicas the driver runs now, of every agent that
	// shares it; an agent picks its own by id.
	Running() []Replica
	// Adopt takes over a replica a previous agent process left running at
	// addr. It returns ErrNotRunning unless something there answers as that
	// replica; the agent then starts it afresh.
	Adopt(ctx context.Context, spec busapi.ReplicaSpec, addr string) (Replica, error)
}

// RuntimeLister is a Driver that can say which runtime catalogue entries
// its node runs (busapi.NodeStatus.Runtimes): the process driver lists the
// entries whose programs are installed, the sim driver busapi.AnyRuntime.
// The agent asks at every heartbeat, so a runtime installed later is
// reported without a restart. A driver without it sends no list, and
// placement then does not filter the node by runtime.
type RuntimeLister interface {
	Runtimes() []string
}

// LogReader is a Driver that keeps its replicas' output: the process
// driver, each runtime's stdout and stderr in a file. The agent answers the
// control plane's log requests (busapi.LogsSubject) from it, so nobody needs
// a shell on the node to read a crash-looping replica's log.
type LogReader interface {
	// ReadLog returns replica req.Replica's last req.Tail lines when
	// req.Offset is negative, else at most max bytes from req.Offset on,
	// of the log req.Previous and req.Container name. A driver whose
	// replicas have no such log returns an error wrapping
	// ErrLogUnsupported.
	ReadLog(req busapi.LogRequest, max int) (busapi.LogChunk, error)
}

// ErrLogUnsupported is a LogReader's answer to a request for a log its
// replicas do not have (a previous run, another container); the agent
// answers it busapi.LogChunk.Unsupported.
var ErrLogUnsupported = errors.New("log not kept on this node")

// PoolDriver is a Driver of a pool rather than a node: a Kubernetes
// cluster, where a replica takes its GPUs or cores when the scheduler
// binds its pod, not when modelplane places it. The meter counts a pool's
// replica only while the driver runs it and its last observation was not
// Unallocated; a node's slots are a replica's from placement on, idle or
// not, so node drivers are not pools.
type PoolDriver interface {
	Driver
	// MetersRunningOnly marks the driver as a pool's.
	MetersRunningOnly()
}

// InventorySource is a PoolDriver whose capacity changes while it runs:
// the Kubernetes driver follows the cluster's nodes (one added, cordoned,
// removed or relaid out). The agent takes it in place of Config's GPUs,
// CPUCores and MemoryMB at each heartbeat and each check of the desired
// replicas, so the control plane's placement sees the change at the next
// heartbeat.
type InventorySource interface {
	PoolInventory() (gpus []busapi.GPU, cpuCores, memoryMB int)
}

// QuotaSetter is a Driver that enforces the teams' quotas itself as well
// (busapi.Desired.Quotas): the Kubernetes driver, as namespace
// ResourceQuotas. The agent hands it each desired state's quotas.
type QuotaSetter interface {
	SetTeamQuotas(map[string]map[string]float64)
}

// DesiredSetter is a Driver whose replicas outlive the agent and its
// state file: the Kubernetes driver, whose pods run on while the agent is
// down and whose objects stay when the agent's state directory is lost.
// The agent hands it the desired set each time it applies the control
// plane's desired state, and again when the watch replays the one it
// holds (an agent restarted with its state file), so the driver can
// remove what it made for replicas neither desired nor running. The
// agent never calls it before the first desired state of its run, after
// its adoption: until then the driver cannot tell a leftover from a
// replica the agent is about to adopt, and must remove nothing.
type DesiredSetter interface {
	SetDesired(specs []busapi.ReplicaSpec)
}

// StartOptions are what the agent gives a driver to start a replica with,
// besides its spec.
type StartOptions struct {
	// Addr is the preferred listen address, host:port, or "".
	Addr string
	// ModelDir is the replica's model directory: every file of the
	// version at its manifest path, each verified against its sha256, and
	// the runtime's settings (spec.Settings) as serveapi.ConfigFile
	// when the spec has any. The directory is the replica's alone and
	// stays until the replica leaves the node; a runtime restarted in
	// place may read it again. "" when the agent keeps no artifact cache
	// or the version has no files to fetch (spec.Manifest empty, or the
	// sim runtime, which reads none).
	ModelDir string
}

// Replica is one replica as its driver runs it.
type Replica interface {
	Spec() busapi.ReplicaSpec
	// Addr is where it serves, host:port.
	Addr() string
	// Observe reports readiness, load and GPU use. An error means the
	// replica no longer answers.
	Observe(ctx context.Context) (Observation, error)
	// Stop ends the replica, draining in-flight requests, and returns when
	// it has ended. It may be called more than once.
	Stop(ctx context.Context) error
}

// ErrNotRunning is Driver.Adopt's answer when the replica is not there.
var ErrNotRunning = errors.New("replica is not running")

// Observation is a replica's state at one moment, as a heartbeat and the
// meter need it.
type Observation struct {
	Ready bool
	// QueueDepth counts requests waiting for a batch slot.
	QueueDepth int
	// KVUsedPct is the share of KV-cache pages in use, 0–100.
	KVUsedPct float64
	// Requests counts requests answered since the replica started.
	Requests uint64
	// UtilPct is the replica's compute utilisation, 0–100, the same on
	// each of its slots.
	UtilPct float64
	// MemoryMB is the GPU memory the replica holds over all its slots.
	MemoryMB int64
	// LoadMS and WarmupMS are the runtime's cold start after the agent
	// handed it the model directory: loading the model, then its warm-up,
	// in milliseconds; 0 while unknown. The heartbeat reports them beside
	// the agent's download and verify times.
	LoadMS   int64
	WarmupMS int64
	// InFlight counts requests received and not yet answered; BatchSize is
	// the mean executed batch. Drivers that cannot tell leave them zero.
	InFlight  int
	BatchSize float64
	// TokensPerSecond and TTFTMS are an LLM runtime's generation rate and
	// mean time to first token over the last few seconds; 0 when unknown.
	TokensPerSecond float64
	TTFTMS          float64
	// Tokens and PromptTokens are an LLM runtime's counters of generated
	// and prompt tokens since it started; nil when unknown
	// (busapi.ReplicaStatus.Tokens).
	Tokens, PromptTokens *int64
	// BatchQueueMS is the mean wait of requests in the runtime's batcher
	// and GPUUtil the replica's GPU utilisation, 0 to 1, over the last few
	// seconds; 0 when unknown (a GPUUtil of 0 falls back to UtilPct,
	// unless Absent names it).
	BatchQueueMS float64
	GPUUtil      float64
	// Failures counts the replica's failures in a row since it was last
	// ready (crashes, start timeouts, dead liveness), for a driver that
	// restarts its runtimes itself; Reason says why the last one failed.
	// While Failures is above zero and Ready false the agent reports the
	// replica failed with Reason, so the control plane can move a replica
	// that keeps failing on this node. Restarts counts restarts since
	// Start, for people.
	Failures int
	Restarts int
	Reason   string
	// Launch is the command line and generated files of the runtime the
	// driver last started for the replica (busapi.ReplicaStatus.Launch),
	// within proto's bounds; nil for a driver that starts no process.
	Launch *busapi.Launch
	// Absent names the metrics fields the runtime does not report, by the
	// heartbeat's JSON names (busapi.ReplicaStatus.Absent); nil when it
	// reports them all. Runtime is the catalogue
	// entry running the replica, empty for a driver without one.
	Absent  []string
	Runtime string
	// ServerName is the name the replica's certificate names when it is
	// not its address's host (busapi.ReplicaStatus.ServerName): a
	// Kubernetes pool's pods serve the pool's certificate. Empty for
	// drivers whose replicas serve their node's name, or plain HTTP.
	ServerName string
	// Unallocated says the replica holds none of its pool's resources
	// yet (a pod no node has taken); a PoolDriver's meter skips it.
	Unallocated bool
}
