// Package busapi is the NATS contract between the control plane, the node
// agents and the gateways: subjects, the KV buckets and streams with their
// settings, and the message structs. It imports only the standard library so
// that every side can depend on it; it holds no behaviour beyond naming.
package busapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
	// BucketIdentity holds what gateways need to accept OIDC bearer tokens
	// without a database: the issuer, audience and signing keys (key
	// IdentityOIDCKey) and each user's memberships (key IdentityUserKey).
	BucketIdentity = "mp_identity"
	// BucketGrantQuota holds the shared counters of grants' daily quotas
	// (key GrantQuotaKey): how many requests gateways have reserved of one
	// consumer's quota on one endpoint on one UTC day. Gateways reserve in
	// chunks by compare-and-set (docs/sharing.md); it is the one bucket
	// they write.
	BucketGrantQuota = "mp_grant_quota"
)

// GrantQuotaTTL is how long a daily quota counter is kept: the day it
// counts and the next, so a gateway whose clock is slightly behind still
// finds it.
const GrantQuotaTTL = 48 * time.Hour

// GrantQuotaKey is the key in BucketGrantQuota of team's counter on the
// endpoint of id endpointID on the UTC day of day (YYYYMMDD).
func GrantQuotaKey(endpointID int64, team, day string) string {
	return strconv.FormatInt(endpointID, 10) + "." + team + "." + day
}

// Streams and their subject prefixes.
const (
	StreamUsage       = "MP_USAGE"
	StreamPredictions = "MP_PREDICTIONS"
	StreamReqStats    = "MP_REQSTATS"
	StreamEvents      = "MP_EVENTS"
)

// Bucket is a KV bucket's settings. MaxBytes bounds the bucket's storage:
// only the control plane writes buckets, and the bound keeps the account's
// disk limit (the sum of every bucket's and stream's) a true bound.
//
// MaxConsumers, when set, bounds the consumers of the bucket's stream: on
// mp_desired, whose consumers every node may create (a watch of its own
// key), it keeps what nodes make below the account's cap, so gateways'
// route watches and the control plane's consumers always find room.
type Bucket struct {
	Name         string
	History      int
	MaxBytes     int64
	MaxConsumers int
	// TTL, when set, expires each key that long after its last write.
	TTL time.Duration
}

// Stream is a JetStream stream's settings. Every stream uses file storage and
// explicit acks; Duplicates is the Nats-Msg-Id deduplication window.
//
// MaxBytes bounds the stream's storage: once full, its oldest messages are
// dropped, so a publisher that floods one stream never takes the room of
// another stream or bucket (routes, keys, desired replica sets). MaxMsgSize
// bounds one message. MaxMsgsPerSubject, when set, bounds the messages one
// subject keeps (a subject's oldest go first): on MP_USAGE a subject is one
// node, so one node's flood drops its own oldest batches, not others'.
type Stream struct {
	Name              string
	Subjects          []string
	MaxAge            time.Duration
	Duplicates        time.Duration
	MaxBytes          int64
	MaxMsgSize        int32
	MaxMsgsPerSubject int64
}

// Sizes of the contract's buckets and streams. JetStream reserves a
// stream's MaxBytes against the server's store (by default 75% of the free
// disk) when the stream is created, so their sum, about 6 GiB, must fit
// on every machine that runs a NATS server, a developer's laptop included.
// A fleet whose usage outgrows them raises them here; the account's limit
// follows (bus.AccountDiskBytes).
const (
	// BucketMaxBytes bounds each KV bucket.
	BucketMaxBytes = 128 << 20
	// UsageMaxBytes bounds MP_USAGE. Agents publish about one batch a
	// second of a few KiB, so 4 GiB is days of a small fleet and hours of
	// a large one: MaxAge is then not what bounds an ingest outage.
	UsageMaxBytes = 4 << 30
	// UsageMaxMsgsPerNode bounds the batches MP_USAGE keeps of one node:
	// a day and more at one batch a second.
	UsageMaxMsgsPerNode = 100_000
	// MaxMsgBytes bounds one message of every stream: a usage batch of
	// 1,000 records is a few hundred KiB.
	MaxMsgBytes = 1 << 20
	// DesiredMaxConsumers bounds mp_desired's consumers: one watch per
	// node (two while it resets), so a fleet of a few thousand nodes; it
	// is half the account's consumer cap (bus.AccountMaxConsumers), and
	// both grow together.
	DesiredMaxConsumers = 5_000
)

// Buckets are the KV buckets the control plane creates at start.
var Buckets = []Bucket{
	{Name: BucketDesired, History: 1, MaxBytes: BucketMaxBytes, MaxConsumers: DesiredMaxConsumers},
	{Name: BucketRoutes, History: 1, MaxBytes: BucketMaxBytes},
	{Name: BucketKeys, History: 1, MaxBytes: BucketMaxBytes},
	{Name: BucketIdentity, History: 1, MaxBytes: BucketMaxBytes},
	{Name: BucketGrantQuota, History: 1, MaxBytes: BucketMaxBytes, TTL: GrantQuotaTTL},
}

// Streams are the streams the control plane creates at start. MaxAge bounds
// how long an ingest outage can last before records are lost, unless
// MaxBytes is reached first (see UsageMaxBytes).
var Streams = []Stream{
	{Name: StreamUsage, Subjects: []string{"mp.usage.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute,
		MaxBytes: UsageMaxBytes, MaxMsgSize: MaxMsgBytes, MaxMsgsPerSubject: UsageMaxMsgsPerNode},
	{Name: StreamPredictions, Subjects: []string{"mp.pred.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute,
		MaxBytes: 1 << 30, MaxMsgSize: MaxMsgBytes},
	{Name: StreamReqStats, Subjects: []string{"mp.reqstats.>"}, MaxAge: 7 * 24 * time.Hour, Duplicates: 2 * time.Minute,
		MaxBytes: 512 << 20, MaxMsgSize: MaxMsgBytes},
	// Events are published through the outbox like everything else, and a
	// JetStream publish needs a stream to land in; live pages read them with
	// a plain subscription, so a day of history is plenty.
	{Name: StreamEvents, Subjects: []string{"mp.events.>"}, MaxAge: 24 * time.Hour, Duplicates: 2 * time.Minute,
		MaxBytes: 128 << 20, MaxMsgSize: MaxMsgBytes},
}

// NodeStatusSubject is where an agent publishes its heartbeats (core NATS).
func NodeStatusSubject(node string) string { return "mp.node." + node + ".status" }

// NodeStatusWildcard matches every node's heartbeats.
const NodeStatusWildcard = "mp.node.*.status"

// UsageSubject is where an agent publishes its usage batches (MP_USAGE).
func UsageSubject(node string) string { return "mp.usage." + node }

// EventsSubject carries rollout, approval and alert events of a team.
func EventsSubject(team string) string { return "mp.events." + team }

// Event is one message on EventsSubject: something happened to a team's
// object (a rollout's state, step or verdict, an approval). Readers fetch the
// object for details; the event says only what changed.
type Event struct {
	// Kind is what the event is about, such as "rollout".
	Kind string `json:"kind"`
	// ID is the object's id; Name its name (the endpoint, for a rollout).
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// Type is what happened, such as "state", "verdict" or "approval".
	Type    string    `json:"type"`
	State   string    `json:"state,omitempty"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// WakeSubject is where a gateway asks, on core NATS, for a replica of an
// endpoint scaled to zero (min_replicas 0): when it answers 202 because none
// runs, and now and then while it serves the endpoint, so that the control
// plane keeps one running while requests arrive. At most once per endpoint
// per second per gateway; a lost message is repeated by the next request.
func WakeSubject(endpoint string) string { return "mp.wake." + endpoint }

// WakeWildcard matches every endpoint's wake requests.
const WakeWildcard = "mp.wake.*"

// Wake is the message on WakeSubject.
type Wake struct {
	Endpoint string `json:"endpoint"`
	// Gateway is the ID of the gateway that asked.
	Gateway string `json:"gateway"`
	// Served is set when the gateway served the request (a replica runs)
	// and asks only that it keeps running.
	Served bool      `json:"served,omitempty"`
	At     time.Time `json:"at"`
}

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
	// ProfileCPU is the allocation profile of a CPU replica's cores, with
	// GPUType CPUType: in a ReplicaSpec, and in each usage record, which
	// is one core during one second, priced by the cost rate of that type
	// and profile.
	ProfileCPU = "cpu-core"
	// CPUType stands for the GPU type of a CPU replica and its usage.
	CPUType = "cpu"
)

// Desired is the full desired replica set of one node, the value of its key in
// BucketDesired. Generation increases with every change; an agent ignores a
// generation at or below the one it has applied.
type Desired struct {
	Node       string        `json:"node"`
	Generation int64         `json:"generation"`
	Replicas   []ReplicaSpec `json:"replicas"`
	// Quotas are the quotas of the teams with replicas here, by team:
	// resource (a GPU type, "cpu", "memory") → amount (GPUs, cores, MiB).
	// A cluster agent writes them as each team namespace's ResourceQuota,
	// a backstop under the control plane's own cap; node agents ignore
	// them. Omitted when no team here has a quota.
	Quotas map[string]map[string]float64 `json:"quotas,omitempty"`
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
	// tensor parallelism. A CPU replica (GPUType CPUType, Profile
	// ProfileCPU) has none.
	Slots []Slot `json:"slots"`
	// CPUCores and MemoryMB are a CPU replica's allocation on its CPU
	// node: whole cores, for it alone, and memory in MiB; 0 on a GPU
	// replica.
	CPUCores int `json:"cpu_cores,omitempty"`
	MemoryMB int `json:"memory_mb,omitempty"`
	// Sim is the version's sim profile, for the sim driver.
	Sim json.RawMessage `json:"sim,omitempty"`
	// VersionID is the version's registry id; with Version it names what
	// the replica serves.
	VersionID int64 `json:"version_id,omitempty"`
	// Runtime is the registry runtime that serves the version ("xgboost",
	// "onnxruntime", "vllm", "sim"…); Format is the format of its model
	// file ("onnx", "xgboost-json", "safetensors"…).
	Runtime string `json:"runtime,omitempty"`
	Format  string `json:"format,omitempty"`
	// Manifest is the lowercase hex sha256 of the version's canonical
	// manifest (path → sha256 of each file), empty for a version whose
	// files the control plane does not hold. The agent fetches the
	// manifest and then each file by digest from the control plane's
	// content-addressed store (GET /internal/artifacts/{sha256}), so that
	// a node's mp_desired value stays small however many files a version
	// has (NATS caps a value at 1 MB).
	Manifest string `json:"manifest,omitempty"`
	// Settings are the runtime's own settings; for the built-in runtime a
	// serveapi.Config, which the agent writes into the replica's model
	// directory as model.ConfigFile.
	Settings json.RawMessage `json:"settings,omitempty"`
	// Token is the replica's token, made by the control plane at placement:
	// the runtime answers only requests that carry it in
	// ReplicaTokenHeader, which gateways learn from the routing entry.
	// The agent passes it on and never vouches for it.
	Token string `json:"token,omitempty"`
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
	Generation int64 `json:"generation"`
	// GPUs is a GPU node's inventory; empty on a CPU node.
	GPUs []GPU `json:"gpus"`
	// CPUCores and MemoryMB are a CPU node's inventory: the whole cores
	// and the memory, in MiB, its replicas may be given; 0 on a GPU node.
	// CPUCoresUsed and MemoryUsedMB are what its replicas hold.
	CPUCores     int             `json:"cpu_cores,omitempty"`
	MemoryMB     int             `json:"memory_mb,omitempty"`
	CPUCoresUsed int             `json:"cpu_cores_used,omitempty"`
	MemoryUsedMB int             `json:"memory_used_mb,omitempty"`
	Replicas     []ReplicaStatus `json:"replicas"`
	// Cache is the node's artifact cache; nil when the agent keeps none
	// (a simulated node).
	Cache *CacheStatus `json:"cache,omitempty"`
	// Runtimes are the runtime catalogue entries this node can run
	// ("builtin", "vllm", "triton", …: agent/catalog names, sorted), so
	// that placement puts a version only where its runtime's binary is.
	// AnyRuntime alone means every runtime (a simulated node serves them
	// all). Nil, as an agent from before this field sends it (absent or
	// null), means the node does not say: placement does not filter it.
	// An empty list means the node runs none.
	Runtimes []string `json:"runtimes"`
}

// AnyRuntime in NodeStatus.Runtimes stands for every runtime.
const AnyRuntime = "*"

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
	ID    string `json:"id"`
	State string `json:"state"`
	Addr  string `json:"addr,omitempty"`
	// ServerName is the name the replica's certificate names when it is
	// not Addr's host: a Kubernetes pool's pods serve one certificate for
	// the pool's name. The control plane copies it into the replica's
	// route entry (RouteReplica.ServerName). Empty: Addr's host, or no TLS.
	ServerName string `json:"server_name,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// QueueDepth is the number of requests waiting (not yet in a batch).
	QueueDepth int `json:"queue_depth"`
	// KVUsedPct is the share of KV-cache pages in use (LLM replicas).
	KVUsedPct float64 `json:"kv_used_pct"`
	// Requests is the number of requests completed since the replica started.
	Requests int64 `json:"requests"`
	// InFlight is the number of requests received and not yet answered,
	// queued ones included; BatchSize the runtime's batch: the mean
	// executed batch since start for a batching predictor (Triton's
	// inferences per execution), the sequences in the engine's batch for
	// an LLM runtime. The autoscaler's in-flight signal reads InFlight.
	InFlight  int     `json:"in_flight,omitempty"`
	BatchSize float64 `json:"batch_size,omitempty"`
	// TokensPerSecond is the rate of generated tokens and TTFTMS the time
	// to first token, in milliseconds, over the last few seconds: the mean
	// from a runtime's histogram, the simulator's median. LLM runtimes
	// whose metrics say; 0 otherwise.
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	TTFTMS          float64 `json:"ttft_ms,omitempty"`
	// Tokens counts the tokens an LLM replica generated since it started
	// and PromptTokens the prompt tokens of the requests it took in:
	// counters, which the autoscaler's loop turns into tokens/s and
	// prompt tokens/s over its rate window (autoscale.RateWindow). Nil
	// where the runtime does not say, and from an agent older than them:
	// missing, never 0.
	Tokens       *int64 `json:"tokens,omitempty"`
	PromptTokens *int64 `json:"prompt_tokens,omitempty"`
	// BatchQueueMS is how long requests waited in the runtime's batcher
	// before they executed, in milliseconds, over the last few seconds;
	// GPUUtil the replica's GPU utilisation as a share from 0 to 1. The
	// autoscaler's batch_queue_ms and gpu_util signals read them; 0 where
	// the runtime does not say.
	BatchQueueMS float64 `json:"batch_queue_ms,omitempty"`
	GPUUtil      float64 `json:"gpu_util,omitempty"`
	// The replica's cold start, split: DownloadMS is the time spent
	// fetching the version's files that were not in the node cache (0 when
	// all were), VerifyMS the time spent checking their sha256 digests,
	// LoadMS the runtime's time to load the model and WarmupMS its warm-up
	// with the version's sample inputs before it reported ready. The agent
	// measures the first two, the driver the last two; 0 is unknown or none.
	DownloadMS int64 `json:"download_ms,omitempty"`
	VerifyMS   int64 `json:"verify_ms,omitempty"`
	LoadMS     int64 `json:"load_ms,omitempty"`
	WarmupMS   int64 `json:"warmup_ms,omitempty"`
	// Failures counts the replica's failures in a row on this node since it
	// was last ready: failed starts, crashes, start timeouts. The control
	// plane places a replica that keeps failing on another node.
	Failures int `json:"failures,omitempty"`
	// Launch is what the node runs for the replica: the command line its
	// driver executed and the files it generated for the runtime (Triton's
	// config.pbtxt), so that operators can read what runs. It is in every
	// heartbeat, not only when it changes: it is bounded (LaunchMaxBytes,
	// a few hundred bytes for vLLM, about a KiB with a config.pbtxt) and
	// repeating it means a lost heartbeat or a restarted control plane
	// never leaves a stale one; the control plane writes it only when it
	// changed. It never holds the replica's token, which a runtime gets in
	// its environment. Nil where the driver launches nothing: the sim
	// driver serves its replicas inside the agent, so there is no command
	// to show.
	Launch *Launch `json:"launch,omitempty"`
	// Absent names the metrics fields above, by their JSON names (the
	// Metric* constants), that the replica's runtime does not report: a
	// llama-server build without the KV gauge leaves "kv_used_pct" out, a
	// Triton replica reports no tokens, and a runtime whose metrics could
	// not be read this time reports none of them. Such a field reads 0
	// here, and the control plane takes it as missing, never as 0 (the
	// autoscaler freezes on a signal no replica reports). Empty when every
	// field is reported; the simulator names batch_queue_ms alone.
	Absent []string `json:"absent,omitempty"`
	// Runtime is the catalogue entry running the replica ("vllm",
	// "triton", "llama-server", "builtin"); empty for a simulated one. The
	// control plane names it where a field is absent.
	Runtime string `json:"runtime,omitempty"`
}

// The JSON names of ReplicaStatus's metrics fields, as ReplicaStatus.Absent
// lists them.
const (
	MetricQueueDepth      = "queue_depth"
	MetricInFlight        = "in_flight"
	MetricRequests        = "requests"
	MetricBatchSize       = "batch_size"
	MetricKVUsedPct       = "kv_used_pct"
	MetricTokensPerSecond = "tokens_per_second"
	MetricTokens          = "tokens"
	MetricPromptTokens    = "prompt_tokens"
	MetricTTFTMS          = "ttft_ms"
	MetricBatchQueueMS    = "batch_queue_ms"
	MetricGPUUtil         = "gpu_util"
)

// Metrics lists every name ReplicaStatus.Absent may hold.
var Metrics = []string{MetricQueueDepth, MetricInFlight, MetricRequests, MetricBatchSize, MetricKVUsedPct,
	MetricTokensPerSecond, MetricTTFTMS, MetricBatchQueueMS, MetricGPUUtil, MetricTokens, MetricPromptTokens}

// Reports says whether the replica's runtime reports the metrics field
// named (a Metric* constant). A counter left nil is not reported, whatever
// Absent says: an agent older than the field does not name it there.
func (r ReplicaStatus) Reports(field string) bool {
	switch {
	case field == MetricTokens && r.Tokens == nil, field == MetricPromptTokens && r.PromptTokens == nil:
		return false
	}
	for _, a := range r.Absent {
		if a == field {
			return false
		}
	}
	return true
}

// Bounds of a ReplicaStatus.Launch: each file's content and each argument
// is cut to LaunchMaxFileBytes, and files past LaunchMaxBytes in all
// (arguments included) are left out, with Truncated set wherever
// something was cut.
const (
	LaunchMaxFileBytes = 4 << 10
	LaunchMaxBytes     = 8 << 10
	// LaunchSecret stands in for a value a launch must not show.
	LaunchSecret = "<secret>"
)

// Launch is what a driver ran for one replica.
type Launch struct {
	// Argv is the runtime's command line as it was executed, the program
	// first.
	Argv []string `json:"argv"`
	// Env is the runtime's environment as KEY=value, with LaunchSecret for
	// the value of anything secret (the replica's token) or not the
	// driver's own (settings an operator gave every runtime).
	Env []string `json:"env,omitempty"`
	// Dir is the directory on the node that the files' paths are
	// relative to (Triton's model repository); empty with no files.
	Dir   string       `json:"dir,omitempty"`
	Files []LaunchFile `json:"files,omitempty"`
	// Truncated says something was cut to keep the launch within its
	// bounds.
	Truncated bool `json:"truncated,omitempty"`
}

// LaunchFile is one file a driver generated for a runtime: its content,
// or, for a link, where it points.
type LaunchFile struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
	Link    string `json:"link,omitempty"`
	// Truncated says Content is the file's first LaunchMaxFileBytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Bounded returns l within the bounds above: what every side does to a
// launch before it sends or stores it, so that neither a large generated
// file nor an agent's claim can grow a heartbeat or a replica row.
func (l Launch) Bounded() Launch {
	out := Launch{Dir: cutUTF8(l.Dir, LaunchMaxFileBytes), Truncated: l.Truncated}
	budget := LaunchMaxBytes - len(out.Dir)
	cut := func(s string) string {
		c := cutUTF8(s, LaunchMaxFileBytes)
		if len(c) < len(s) {
			out.Truncated = true
		}
		return c
	}
	for _, list := range []struct {
		in  []string
		out *[]string
	}{{l.Argv, &out.Argv}, {l.Env, &out.Env}} {
		for _, a := range list.in {
			a = cut(a)
			// Each element costs its quotes and comma in JSON too.
			if len(a)+3 > budget {
				out.Truncated = true
				break
			}
			budget -= len(a) + 3
			*list.out = append(*list.out, a)
		}
	}
	if out.Argv == nil {
		out.Argv = []string{}
	}
	for _, f := range l.Files {
		g := LaunchFile{Path: cut(f.Path), Link: cut(f.Link), Truncated: f.Truncated}
		if c := cutUTF8(f.Content, LaunchMaxFileBytes); len(c) < len(f.Content) {
			g.Content, g.Truncated = c, true
		} else {
			g.Content = f.Content
		}
		n := len(g.Path) + len(g.Link) + len(g.Content) + 32
		if n > budget {
			out.Truncated = true
			break
		}
		budget -= n
		out.Truncated = out.Truncated || g.Truncated
		out.Files = append(out.Files, g)
	}
	return out
}

// cutUTF8 is s cut to at most n bytes, never inside a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// CacheStatus is the node's artifact cache as a heartbeat reports it.
type CacheStatus struct {
	// BytesUsed is what the cached files take on disk, partial downloads
	// included; BytesLimit is the configured size (--cache-bytes).
	BytesUsed  int64 `json:"bytes_used"`
	BytesLimit int64 `json:"bytes_limit"`
	// Versions is the number of versions the cache holds whole.
	Versions int `json:"versions"`
	// Hits counts replica preparations that found every file of their
	// version in the cache; Misses those that downloaded at least one.
	// Evictions counts versions evicted. All three count since the agent
	// started.
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	Evictions uint64 `json:"evictions"`
}

// UsageBatch is one MP_USAGE message. ID is also its Nats-Msg-Id; a batch
// spooled during an outage is replayed with the same ID. An agent sends it
// in binary (AppendUsageBatch); agents of earlier versions sent it as JSON,
// with these field names.
type UsageBatch struct {
	ID      string  `json:"id"`
	Node    string  `json:"node"`
	Records []Usage `json:"records"`
}

// Usage is one GPU allocation during one second, or one core of a CPU
// replica (GPUType CPUType, Profile ProfileCPU, GPU 0, Slice the core's
// ordinal in the replica's allocation) during one second.
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
	// EndpointID is the endpoint's id in the control plane. Statistics and
	// samples carry it, so an endpoint deleted and created again under the
	// same name (perhaps by another team) never reads the old one's data.
	EndpointID int64  `json:"endpoint_id,omitempty"`
	Team       string `json:"team"`
	// Task is the model's task; RouteTaskGraph for a graph endpoint, which
	// the gateway runs itself: its versions carry their Graph and no
	// replicas.
	Task string `json:"task"`
	// Generation increases with every change of the entry.
	Generation int64          `json:"generation"`
	Versions   []RouteVersion `json:"versions"`
	// InputSchema is the model's JSON Schema for one instance (predict) or
	// one request body (LLM); empty or {} accepts anything.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// FeatureNames are the model's input features, in order, for samples.
	FeatureNames []string `json:"feature_names,omitempty"`
	// SamplingRate is the share of predictions sampled to MP_PREDICTIONS,
	// 0 (off, the default) to 1.
	SamplingRate float64 `json:"sampling_rate"`
	// Experiment, when set, assigns each caller that sends X-User-Id to one
	// of its arms by a stable hash of the experiment's name and the user id;
	// callers without it get the weighted split.
	Experiment *RouteExperiment `json:"experiment,omitempty"`
	// RateLimitRPS and RateLimitBurst bound the endpoint's requests, across
	// callers, at each gateway; 0 uses the gateway's configured default.
	RateLimitRPS   float64 `json:"rate_limit_rps,omitempty"`
	RateLimitBurst int     `json:"rate_limit_burst,omitempty"`
	// TimeoutMS bounds one request upstream, in milliseconds; 0 uses the
	// gateway's configured default.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// ScaledToZero is set when the endpoint wants no replica (min_replicas
	// 0): a request finding no ready replica is answered 202 with
	// Retry-After instead of 503.
	ScaledToZero bool `json:"scaled_to_zero,omitempty"`
	// Blocked, set only with ScaledToZero, says why no replica will be
	// started on a wake: a budget with block enforcement covering the
	// endpoint (its team's or its own) reached 100 percent this month. A
	// request finding no ready replica gets this reason rather than 202
	// and a wait that cannot end; empty when nothing blocks.
	Blocked string `json:"blocked,omitempty"`
	// ColdStartBudgetS, set only with ScaledToZero, is how long a gateway
	// holds a request that finds no ready replica while the wake starts
	// one, in seconds: a replica ready within it answers the request as
	// usual; past it the caller gets 202 with Retry-After. The endpoint's
	// autoscaling policy's cold_start_budget_s, else 30 s for CPU versions
	// and 120 s when a version needs a GPU. 0 holds nothing (202 at once).
	ColdStartBudgetS int `json:"cold_start_budget_s,omitempty"`
	// Grants are the other teams the endpoint's owners let call it, by
	// team name, each with its own limits (package grant); empty when
	// none. A caller of a team neither owning nor granted gets 404.
	Grants []RouteGrant `json:"grants,omitempty"`
}

// RouteGrant is one consumer team's call access to an endpoint.
type RouteGrant struct {
	Team string `json:"team"`
	// RateLimitRPS and RateLimitBurst bound the team's requests at each
	// gateway (bursts of the rate rounded up when 0); 0 is unlimited.
	RateLimitRPS   float64 `json:"rate_limit_rps,omitempty"`
	RateLimitBurst int     `json:"rate_limit_burst,omitempty"`
	// DailyQuota bounds the team's requests per UTC day across gateways
	// (BucketGrantQuota); 0 is unlimited.
	DailyQuota int64 `json:"daily_quota,omitempty"`
	// Sampling says whether the team's requests may be sampled into
	// MP_PREDICTIONS at the endpoint's sampling rate.
	Sampling bool `json:"sampling,omitempty"`
}

// RouteExperiment is an endpoint's active A/B experiment.
type RouteExperiment struct {
	// Name seeds the assignment: another name reshuffles the users.
	Name string     `json:"name"`
	Arms []RouteArm `json:"arms"`
}

// RouteArm is one arm of an experiment: a version and its share of the
// users, in percent (the arms' shares sum to 100).
type RouteArm struct {
	Version string `json:"version"`
	Share   int    `json:"share"`
}

// RouteVersion is one version of an endpoint in the routing table.
type RouteVersion struct {
	Name string `json:"name"`
	// Weight is the version's share of unpinned traffic, in percent.
	Weight int `json:"weight"`
	// Shadow is the share of the endpoint's requests, in percent, mirrored
	// to this version (which then has weight 0); its answers never reach the
	// caller.
	Shadow   float64        `json:"shadow,omitempty"`
	Replicas []RouteReplica `json:"replicas"`
	// Protocol is how the version's replicas are called: empty for the
	// platform's /predict shape, ProtocolV2 for a runtime that speaks only
	// the KServe V2 / Open Inference protocol (Triton), whose requests the
	// gateway translates.
	Protocol string `json:"protocol,omitempty"`
	// V2Model is the model name in /v2/models/{model}/infer when Protocol
	// is ProtocolV2.
	V2Model string `json:"v2_model,omitempty"`
	// ColdStartMS, set only on an entry with ScaledToZero, is the median of
	// the version's latest measured replica cold starts (download, verify,
	// load and warm-up), in milliseconds; 0 when none was measured. The
	// gateway's Retry-After of a 202 comes from it.
	ColdStartMS int64 `json:"cold_start_ms,omitempty"`
	// Graph is a graph version's definition (package graph), which the
	// gateway executes, calling each step through its own routing as the
	// graph's team; empty for a model version.
	Graph json.RawMessage `json:"graph,omitempty"`
}

// RouteTaskGraph is Route.Task of a graph endpoint.
const RouteTaskGraph = "graph"

// ProtocolV2 is RouteVersion.Protocol of a runtime that speaks only the
// KServe V2 / Open Inference protocol.
const ProtocolV2 = "v2"

// RouteReplica is one ready replica.
type RouteReplica struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Token is the replica's token (ReplicaSpec.Token), which the gateway
	// sends in ReplicaTokenHeader on every call to it.
	Token string `json:"token,omitempty"`
	// ServerName is the name the replica's certificate must name when it
	// is not the host of Addr: a pod of a Kubernetes pool serves a
	// certificate for its pool's name (<pool>.replicas.modelplane.internal),
	// since no issuer can name a pod's IP in advance. Empty: Addr's host.
	ServerName string `json:"server_name,omitempty"`
}

// The headers between a gateway and a replica (docs/security.md,
// "Replicas answer only the gateway").
const (
	// ReplicaTokenHeader carries the replica's token; a runtime given a
	// token answers 401 to any other request than its health, readiness
	// and metrics probes.
	ReplicaTokenHeader = "X-Modelplane-Replica-Token"
	// TeamHeader is the calling team as the gateway authenticated it,
	// empty for an org-wide key. A runtime keys tenant fairness on it and
	// on nothing the request body says. The gateway never forwards a
	// client's headers, so a client cannot set it.
	TeamHeader = "X-Modelplane-Team"
	// ReplicaTokenFDEnv names the descriptor a runtime that checks the
	// token reads it from, once, at start (a pipe the agent wrote it to):
	// in the environment the token would show in /proc/<pid>/environ to
	// every process of the runtime's user.
	ReplicaTokenFDEnv = "MP_REPLICA_TOKEN_FD"
)

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
	// Name is the key's name, as its team named it: a team key is also
	// the service identity a client certificate of
	// spiffe://<trust-domain>/team/<team>/sa/<name> authenticates as at
	// a gateway that verifies client certificates (docs/tls.md).
	Name string `json:"name,omitempty"`
}

// IdentityOIDCKey is the key of the OIDCEntry in BucketIdentity.
const IdentityOIDCKey = "oidc"

// IdentityUserKey is the key of a user's MemberEntry in BucketIdentity:
// "u_" and the hex SHA-256 of the token's issuer, a zero byte and its
// subject, so that the bucket names no user.
func IdentityUserKey(issuer, subject string) string {
	sum := sha256.Sum256([]byte(issuer + "\x00" + subject))
	return "u_" + hex.EncodeToString(sum[:])
}

// OIDCEntry is what a gateway verifies an OIDC bearer token with: the
// signature against JWKS, then iss, aud and exp.
type OIDCEntry struct {
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	// CLIAudience is a further audience accepted: the public client of
	// `modelplane login` at the same issuer; "" for none.
	CLIAudience string `json:"cli_audience,omitempty"`
	// JWKS is the issuer's JSON Web Key Set, as the issuer serves it.
	JWKS json.RawMessage `json:"jwks"`
}

// MemberEntry is a user's authorisation, for tokens: its team memberships
// and org-wide role. A user with neither has no entry.
type MemberEntry struct {
	Teams        []MemberTeam `json:"teams,omitempty"`
	PlatformRole string       `json:"platform_role,omitempty"`
}

// MemberTeam is one team membership.
type MemberTeam struct {
	Team string `json:"team"`
	Role string `json:"role"`
}

// ReqStatsSubject is where gateways before ReqStatsBatch published the
// statistics of one endpoint (MP_REQSTATS); the ingest still reads them.
func ReqStatsSubject(endpoint string) string { return "mp.reqstats." + endpoint }

// ReqStatsBatchSubject is where a gateway publishes its ReqStatsBatch
// messages (MP_REQSTATS).
const ReqStatsBatchSubject = "mp.reqstats.batch"

// ReqStatsBatch is one MP_REQSTATS message: a gateway's statistics of one
// window, of as many endpoint versions as fit in BatchMaxBytes (a window
// takes several when they do not). A message per endpoint version cost the
// ingest as much in NATS deliveries and acks as in decoding (`modelplane
// bench ingest`). ID, the Nats-Msg-Id, is ReqStatsBatchID's; each of Stats
// keeps its own ID, by which the ingest stores it once. A gateway sends it
// in binary (StatsBody); gateways of earlier versions sent it as JSON, with
// these field names.
type ReqStatsBatch struct {
	ID      string     `json:"id"`
	Gateway string     `json:"gateway"`
	Stats   []ReqStats `json:"stats"`
}

// ReqStatsBatchID is the id of the part-th message of one gateway's
// window (start in Unix milliseconds).
func ReqStatsBatchID(gateway string, windowStart int64, part int) string {
	return gateway + "/" + strconv.FormatInt(windowStart, 10) + "/" + strconv.Itoa(part)
}

// latencyBoundsUS are the upper bounds, in microseconds, of the buckets of
// every ReqStats histogram (latency, TTFT, TPOT): the E24 series from 0.1 ms
// to 91 s, so that neighbouring bounds are about 10 percent apart and a p99
// read from the buckets tells 22 ms from 30 ms, and a 20 percent regression
// from noise. A last bucket past the final bound counts the rest (+Inf).
var latencyBoundsUS = [...]uint64{
	100, 110, 120, 130, 150, 160, 180, 200, 220, 240, 270, 300, 330, 360, 390, 430, 470, 510,
	560, 620, 680, 750, 820, 910, 1_000, 1_100, 1_200, 1_300, 1_500, 1_600, 1_800, 2_000, 2_200,
	2_400, 2_700, 3_000, 3_300, 3_600, 3_900, 4_300, 4_700, 5_100, 5_600, 6_200, 6_800, 7_500,
	8_200, 9_100, 10_000, 11_000, 12_000, 13_000, 15_000, 16_000, 18_000, 20_000, 22_000,
	24_000, 27_000, 30_000, 33_000, 36_000, 39_000, 43_000, 47_000, 51_000, 56_000, 62_000,
	68_000, 75_000, 82_000, 91_000, 100_000, 110_000, 120_000, 130_000, 150_000, 160_000,
	180_000, 200_000, 220_000, 240_000, 270_000, 300_000, 330_000, 360_000, 390_000, 430_000,
	470_000, 510_000, 560_000, 620_000, 680_000, 750_000, 820_000, 910_000, 1_000_000,
	1_100_000, 1_200_000, 1_300_000, 1_500_000, 1_600_000, 1_800_000, 2_000_000, 2_200_000,
	2_400_000, 2_700_000, 3_000_000, 3_300_000, 3_600_000, 3_900_000, 4_300_000, 4_700_000,
	5_100_000, 5_600_000, 6_200_000, 6_800_000, 7_500_000, 8_200_000, 9_100_000, 10_000_000,
	11_000_000, 12_000_000, 13_000_000, 15_000_000, 16_000_000, 18_000_000, 20_000_000,
	22_000_000, 24_000_000, 27_000_000, 30_000_000, 33_000_000, 36_000_000, 39_000_000,
	43_000_000, 47_000_000, 51_000_000, 56_000_000, 62_000_000, 68_000_000, 75_000_000,
	82_000_000, 91_000_000,
}

// LatencyBuckets is the number of buckets of a ReqStats histogram: one per
// bound and the +Inf bucket.
const LatencyBuckets = len(latencyBoundsUS) + 1

// LatencyBoundsUS returns the upper bounds, in microseconds, of the buckets
// of every ReqStats histogram; bucket i counts values in
// (bound[i-1], bound[i]], the last bucket those above the last bound. The
// gateway counts with them and request_stats stores the counts in the same
// order, so quantiles are read the same way everywhere. Changing them
// changes the meaning of stored rows: add a field instead.
func LatencyBoundsUS() []uint64 { return append([]uint64(nil), latencyBoundsUS[:]...) }

// LatencyBucket is the index of the bucket that counts d: the first whose
// bound is at least d.
func LatencyBucket(d time.Duration) int {
	lo, hi := 0, len(latencyBoundsUS)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if time.Duration(latencyBoundsUS[mid])*time.Microsecond < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// ReqStats is what one gateway served of one version of one endpoint
// during one window, one of a ReqStatsBatch's. Windows of one gateway and
// version follow each other without gap or overlap, so sums over them are
// exact. Before ReqStatsBatch each was a message of its own, on
// ReqStatsSubject(Endpoint), with ID its Nats-Msg-Id.
type ReqStats struct {
	ID string `json:"id"`
	// WindowStart and WindowEnd bound the window, in Unix milliseconds;
	// a request is counted in the window in which it ended.
	WindowStart int64  `json:"window_start"`
	WindowEnd   int64  `json:"window_end"`
	Gateway     string `json:"gateway"`
	Endpoint    string `json:"endpoint"`
	Team        string `json:"team"`
	Version     string `json:"version"`
	// Count is the number of requests routed to the version, whatever
	// their outcome.
	Count  uint64      `json:"count"`
	Errors ErrorCounts `json:"errors"`
	// Latency counts requests by duration, from the gateway's first byte to
	// the end of the answer, over LatencyBoundsUS; it sums to Count.
	Latency []uint64 `json:"latency"`
	// LatencySumMS is the sum of the durations, in milliseconds.
	LatencySumMS float64 `json:"latency_sum_ms"`
	// Streams is the number of streamed completions, which TTFT counts.
	Streams uint64 `json:"streams"`
	// TTFT counts streamed completions by the time to their first event;
	// it and TPOT are empty for an endpoint that streams nothing.
	TTFT      []uint64 `json:"ttft"`
	TTFTSumMS float64  `json:"ttft_sum_ms"`
	// TPOT counts streamed completions of at least two tokens by their
	// time per output token after the first: (total − TTFT) / (tokens − 1).
	TPOT      []uint64 `json:"tpot"`
	TPOTSumMS float64  `json:"tpot_sum_ms"`
	// Tokens is the number of completion tokens streamed.
	Tokens uint64 `json:"tokens"`
	// Pinned marks the series of requests that chose their version with
	// X-Model-Version: the caller picked the version, so these requests say
	// nothing about how it fares in the split, and the judge and the drift
	// gate never read them. Unpinned and pinned requests of a version are
	// separate series with separate ids.
	Pinned bool `json:"pinned,omitempty"`
	// EndpointID is the routing entry's endpoint id (Route.EndpointID).
	EndpointID int64 `json:"endpoint_id,omitempty"`
	// CallerTeam is the team of a granted caller (Route.Grants) whose
	// requests this series counts; empty for the owning team's own
	// requests. A caller's series is separate, with its own id.
	CallerTeam string `json:"caller_team,omitempty"`
	// ViaGraph and ViaGraphVersion name the inference graph endpoint and
	// its version whose steps this series counts (the gateway calls each
	// step as a request of the graph's team); empty for requests from
	// outside a graph. A graph's series is separate, with its own id, so
	// chargeback can charge the graph its steps' share of the cost.
	ViaGraph        string `json:"via_graph,omitempty"`
	ViaGraphVersion string `json:"via_graph_version,omitempty"`
	// Overhead counts the requests that reached a replica by the time the
	// gateway added (its whole time minus the time waiting on replicas),
	// over LatencyBoundsUS; OverheadSumMS sums it. Empty from gateways
	// that predate it.
	Overhead      []uint64 `json:"overhead,omitempty"`
	OverheadSumMS float64  `json:"overhead_sum_ms,omitempty"`
	// Notable are the window's requests worth finding again: its slowest,
	// its failures and its last sampled request (at most MaxNotable).
	Notable []NotableRequest `json:"notable,omitempty"`
}

// Kinds of NotableRequest.
const (
	NotableSlowest = "slowest"
	NotableFailed  = "failed"
	NotableSampled = "sampled"
)

// MaxNotable bounds ReqStats.Notable: one slowest, one sampled and up to
// MaxNotable-2 failures a window.
const MaxNotable = 12

// NotableRequest is one request a gateway singles out of a statistics
// window, with what an engineer needs to find it again: its ids, where it
// went and how its time splits between the gateway and the replica. No
// request data.
type NotableRequest struct {
	Kind      string `json:"kind"`
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id,omitempty"`
	Replica   string `json:"replica,omitempty"`
	Status    int    `json:"status"`
	// EndMS is when the request ended, in Unix milliseconds.
	EndMS int64 `json:"end_ms"`
	// LatencyMS is the gateway's whole time; UpstreamMS the part spent
	// waiting on replicas (0 when none was called), so the gateway's
	// overhead is the difference.
	LatencyMS  float64 `json:"latency_ms"`
	UpstreamMS float64 `json:"upstream_ms"`
}

// ErrorCounts are a window's failed requests by class; each request is in at
// most one class.
type ErrorCounts struct {
	// Client counts 4xx answers other than 429 (the caller's fault).
	Client uint64 `json:"client"`
	// Upstream counts 5xx answers other than 504: replica failures and
	// no replica reachable.
	Upstream uint64 `json:"upstream"`
	// Timeout counts 504: the replica did not answer in time.
	Timeout uint64 `json:"timeout"`
	// Shed counts 429: rate limited or load shed.
	Shed uint64 `json:"shed"`
	// Canceled counts requests whose caller went away before the answer.
	Canceled uint64 `json:"canceled"`
}

// ReqStatsID is the id of the message of one gateway, endpoint, version and
// window (start in Unix milliseconds).
func ReqStatsID(gateway, endpoint, version string, windowStart int64) string {
	return gateway + "/" + endpoint + "/" + version + "/" + strconv.FormatInt(windowStart, 10)
}

// PredictionSubject is where gateways before PredictionBatch published each
// sample of one endpoint (MP_PREDICTIONS); the ingest still reads them.
func PredictionSubject(endpoint string) string { return "mp.pred." + endpoint }

// PredictionBatchSubject is where a gateway publishes its PredictionBatch
// messages (MP_PREDICTIONS).
const PredictionBatchSubject = "mp.pred.batch"

// PredictionBatch is one MP_PREDICTIONS message: the samples a gateway took
// over a short while, of any endpoints. A message per sample cost the
// ingest more in NATS deliveries and acks than in everything else it does
// (`modelplane bench ingest`). ID, the Nats-Msg-Id, is random: request ids
// are the callers' and can repeat. A gateway sends it in binary
// (SampleBody); gateways of earlier versions sent it as JSON, with these
// field names.
type PredictionBatch struct {
	ID      string             `json:"id"`
	Gateway string             `json:"gateway"`
	Samples []PredictionSample `json:"samples"`
}

// A gateway's PredictionBatch holds at most PredictionBatchMaxSamples
// samples. A gateway's batch message (PredictionBatch, ReqStatsBatch)
// grows past BatchMaxBytes only when its one item is larger (MaxMsgBytes
// bounds that).
const (
	PredictionBatchMaxSamples = 1000
	BatchMaxBytes             = 256 << 10
)

// PredictionSample is one sampled request, with the model's input features
// and its outputs, and never anything else of the request or answer body.
// ID is the request id. Before PredictionBatch each was a message of its
// own, on PredictionSubject(Endpoint), with ID its Nats-Msg-Id.
type PredictionSample struct {
	ID string `json:"id"`
	// Time is when the request ended, in Unix milliseconds.
	Time     int64  `json:"t"`
	Endpoint string `json:"endpoint"`
	Team     string `json:"team"`
	Version  string `json:"version"`
	// LatencyMS is the request's duration through the gateway.
	LatencyMS float64 `json:"latency_ms"`
	// FeatureNames are the route's feature names; every instance's Num and
	// Str are parallel to them.
	FeatureNames []string `json:"feature_names,omitempty"`
	// Instances are a predict request's instances, in order; empty for an
	// LLM endpoint.
	Instances []SampleInstance `json:"instances,omitempty"`
	// Tokens is an LLM completion's length in tokens (the LLM's output).
	Tokens int `json:"tokens,omitempty"`
	// Pinned marks a request that chose its version with X-Model-Version;
	// the drift gate does not read it (see ReqStats.Pinned).
	Pinned bool `json:"pinned,omitempty"`
	// EndpointID is the routing entry's endpoint id (Route.EndpointID).
	EndpointID int64 `json:"endpoint_id,omitempty"`
}

// SampleInstance is one instance's features and output. A numeric (or
// boolean, as 0 or 1) feature has its value in Num and "" in Str; a string
// feature has its value in Str and 0 in Num; a missing, null or nested
// feature has 0 and "".
type SampleInstance struct {
	Num []float64 `json:"num"`
	Str []string  `json:"str"`
	// Score is the predicted score or regression value; Label the predicted
	// class, "" for regression.
	Score float64 `json:"score"`
	Label string  `json:"label,omitempty"`
}

// LogsSubject is where the agent of node answers requests for a replica's
// log (core NATS request and reply; only the control plane may ask).
func LogsSubject(node string) string { return "mp.node." + node + ".logs" }

// MaxLogChunk bounds the bytes of one LogChunk.
const MaxLogChunk = 64 << 10

// LogRequest asks for a replica's log: Tail lines from its end when
// Offset is negative, else the bytes from Offset on (at most MaxLogChunk).
type LogRequest struct {
	Replica string `json:"replica"`
	Offset  int64  `json:"offset"`
	Tail    int    `json:"tail,omitempty"`
	// Previous asks for the container's last terminated run instead of
	// the running one (a crash-looping pod's crash, what `kubectl logs
	// --previous` shows). Container names the pod's container
	// (LogContainers); "" is the runtime's. Only a pool's replicas, pods,
	// have either: a node's replica has one log, every run of its runtime
	// appended to it, and its agent answers LogChunk.Unsupported.
	Previous  bool   `json:"previous,omitempty"`
	Container string `json:"container,omitempty"`
}

// The containers of a pool replica's pod whose log may be asked for
// (LogRequest.Container).
const (
	// LogContainerRuntime is the serving runtime's, the default.
	LogContainerRuntime = "runtime"
	// LogContainerFetch is the init container that downloads and verifies
	// the version's files.
	LogContainerFetch = "fetch"
	// LogContainerGuard is the sidecar that checks the replica token in
	// front of a runtime that does not.
	LogContainerGuard = "guard"
)

// LogContainers lists every LogRequest.Container but "".
var LogContainers = []string{LogContainerRuntime, LogContainerFetch, LogContainerGuard}

// ContainerReason is a pool replica's failure reason (ReplicaStatus.Reason)
// for one container of its pod: "container runtime: why", or "init
// container fetch: why" for an init container. The cluster driver words
// every container's failure with it, and CrashedContainer reads it back.
func ContainerReason(initContainer bool, container, why string) string {
	kind := "container "
	if initContainer {
		kind = "init container "
	}
	return kind + container + ": " + why
}

// CrashedContainer is the container of the pod whose crash loop reason
// names (ContainerReason with a why that starts with CrashLoopBackOff,
// Kubernetes' waiting reason): its previous run's log holds the crash while
// it waits to start again. ok is false for any other reason, and for a
// container not in LogContainers.
func CrashedContainer(reason string) (container string, ok bool) {
	rest, ok := strings.CutPrefix(reason, "init container ")
	if !ok {
		rest, ok = strings.CutPrefix(reason, "container ")
	}
	name, why, named := strings.Cut(rest, ": ")
	if !ok || !named || !slices.Contains(LogContainers, name) || !strings.HasPrefix(why, "CrashLoopBackOff") {
		return "", false
	}
	return name, true
}

// LogChunk answers a LogRequest: Data from Offset, Next the offset to ask
// from to follow the log, Size the log's size when read. Error says why
// nothing was read (no such replica on the node, a driver without logs).
// A log that shrank (it is kept to its last bytes) starts again at 0.
// Unsupported says the node cannot serve what the request asked
// (LogRequest.Previous or Container of a node's replica); Error says why.
type LogChunk struct {
	Data        string `json:"data"`
	Offset      int64  `json:"offset"`
	Next        int64  `json:"next"`
	Size        int64  `json:"size"`
	Error       string `json:"error,omitempty"`
	Unsupported bool   `json:"unsupported,omitempty"`
}
