package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/placement"
	"modelplane/replica"
	"modelplane/trust"
)

// sliceMemoryMB is the memory of a slice of an 80 GB GPU; ok is false for a
// profile the fleet does not know.
func sliceMemoryMB(profile string) (int, bool) {
	if profile == busapi.ProfileFull {
		return 80 * 1024, true
	}
	m, ok := placement.MIG(profile)
	return m.MemoryMB, ok
}

var gpuTypes = []string{"A100-80GB", "H100-80GB"}

// Bounds of a CPU node's inventory (the agent's own, agent.MaxCPUCores and
// agent.MaxMemoryMB); they also keep the sums in int32 columns.
const (
	maxCPUCores = 1024
	maxMemoryMB = 64 * 1024 * 1024
)

// ErrBadStatus means a heartbeat was malformed; it is dropped and counted.
var ErrBadStatus = errors.New("bad node status")

// inventoryGPU is the part of a GPU that placement depends on; a change of it
// is a new layout.
type inventoryGPU struct {
	Index    int            `json:"index"`
	Type     string         `json:"type"`
	MemoryMB int            `json:"memory_mb"`
	MIG      bool           `json:"mig"`
	Slices   []busapi.Slice `json:"slices"`
}

type gpuUse struct {
	Index        int     `json:"index"`
	UtilPct      float64 `json:"util_pct"`
	MemoryUsedMB int     `json:"memory_used_mb"`
}

func checkStatus(st busapi.NodeStatus) error {
	if !trust.ValidNodeName(st.Node) {
		return fmt.Errorf("%w: node name %q: use up to 64 letters, digits, '-' and '_'", ErrBadStatus, st.Node)
	}
	if st.LeaseSeconds < 1 || st.LeaseSeconds > 3600 {
		return fmt.Errorf("%w: node %s: lease_seconds %d out of 1..3600", ErrBadStatus, st.Node, st.LeaseSeconds)
	}
	if len(st.GPUs) > 64 {
		return fmt.Errorf("%w: node %s: %d GPUs", ErrBadStatus, st.Node, len(st.GPUs))
	}
	switch {
	case len(st.GPUs) > 0 && (st.CPUCores != 0 || st.MemoryMB != 0):
		return fmt.Errorf("%w: node %s: GPUs and a CPU inventory; a node is a GPU node or a CPU node", ErrBadStatus, st.Node)
	case len(st.GPUs) == 0 && (st.CPUCores < 1 || st.CPUCores > maxCPUCores || st.MemoryMB < 1 || st.MemoryMB > maxMemoryMB):
		return fmt.Errorf("%w: node %s: no GPUs and a CPU inventory of %d cores and %d MiB; want 1 to %d cores and 1 to %d MiB",
			ErrBadStatus, st.Node, st.CPUCores, st.MemoryMB, maxCPUCores, maxMemoryMB)
	}
	for i, g := range st.GPUs {
		if g.Index != i {
			return fmt.Errorf("%w: node %s: GPU %d listed at position %d", ErrBadStatus, st.Node, g.Index, i)
		}
		if !slices.Contains(gpuTypes, g.Type) {
			return fmt.Errorf("%w: node %s: GPU %d has unknown type %q", ErrBadStatus, st.Node, i, g.Type)
		}
		if len(g.Slices) == 0 || len(g.Slices) > 7 {
			return fmt.Errorf("%w: node %s: GPU %d has %d slices", ErrBadStatus, st.Node, i, len(g.Slices))
		}
		for j, s := range g.Slices {
			if _, ok := sliceMemoryMB(s.Profile); !ok || s.Index != j || (s.Profile == busapi.ProfileFull) == g.MIG {
				return fmt.Errorf("%w: node %s: GPU %d slice %d (%s) does not fit its MIG mode", ErrBadStatus, st.Node, i, j, s.Profile)
			}
		}
	}
	for _, r := range st.Replicas {
		if r.State != busapi.StateStarting && r.State != busapi.StateReady && r.State != busapi.StateFailed {
			return fmt.Errorf("%w: node %s: replica %s in unknown state %q", ErrBadStatus, st.Node, r.ID, r.State)
		}
		if r.Failures < 0 || r.Failures > 1_000_000 {
			return fmt.Errorf("%w: node %s: replica %s has %d failures", ErrBadStatus, st.Node, r.ID, r.Failures)
		}
		if err := checkReplicaMetrics(r); err != nil {
			return fmt.Errorf("%w: node %s: replica %s: %v", ErrBadStatus, st.Node, r.ID, err)
		}
	}
	if err := checkCache(st.Cache); err != nil {
		return fmt.Errorf("%w: node %s: %v", ErrBadStatus, st.Node, err)
	}
	if len(st.Runtimes) > maxRuntimes {
		return fmt.Errorf("%w: node %s: %d runtimes, at most %d", ErrBadStatus, st.Node, len(st.Runtimes), maxRuntimes)
	}
	for _, r := range st.Runtimes {
		if !runtimeName.MatchString(r) {
			return fmt.Errorf("%w: node %s: runtime %q: use up to 64 letters, digits, '.', '-' and '_', or %q", ErrBadStatus, st.Node, r, busapi.AnyRuntime)
		}
	}
	return nil
}

// runtimeName is what a runtime catalogue entry a node reports may be
// called, or busapi.AnyRuntime; maxRuntimes bounds the list.
var runtimeName = regexp.MustCompile(`^([A-Za-z0-9._-]{1,64}|\*)$`)

const maxRuntimes = 64

// nodeRuntimes is a heartbeat's runtimes as stored: sorted, once each, nil
// (NULL: the node does not say) kept apart from empty (it runs none).
func nodeRuntimes(rs []string) []string {
	if rs == nil {
		return nil
	}
	out := slices.Clone(rs)
	slices.Sort(out)
	return slices.Compact(out)
}

// Observe records one heartbeat: it registers the node (again, when its GPU
// layout or its CPU inventory changed: the old allocations go and their replicas are placed
// anew), stamps the heartbeat, brings a lost node back, stores the runtimes
// the node runs when they changed, and records the state
// and address of each replica the agent runs. It reports whether anything
// placement or routing depends on changed.
func (f *Fleet) Observe(ctx context.Context, st busapi.NodeStatus) (changed bool, err error) {
	if err := checkStatus(st); err != nil {
		return false, err
	}
	inv := make([]inventoryGPU, len(st.GPUs))
	use := make([]gpuUse, len(st.GPUs))
	for i, g := range st.GPUs {
		inv[i] = inventoryGPU{Index: g.Index, Type: g.Type, MemoryMB: g.MemoryMB, MIG: g.MIG, Slices: g.Slices}
		use[i] = gpuUse{Index: g.Index, UtilPct: g.UtilPct, MemoryUsedMB: g.MemoryUsedMB}
	}
	invJSON, _ := json.Marshal(inv)
	useJSON, _ := json.Marshal(use)
	var cacheJSON []byte
	if st.Cache != nil {
		cacheJSON, _ = json.Marshal(st.Cache)
	}
	now := f.now()
	// offNode are the replica reports dropped for their address, counted
	// once the transaction is done.
	var offNode []string
	// misnamed are the replica reports dropped for a server name no
	// certificate could name (trust.ValidServerName), logged likewise.
	var misnamed []string
	// coldStarts are the replicas' cold starts measured by this heartbeat,
	// observed once the transaction is done.
	var coldStarts []db.VersionRecordColdStartsRow
	// refused is why the heartbeat claims more than its node's attested
	// inventory: the transaction commits the refusal's mark and event,
	// nothing of the heartbeat.
	var refused error
	err = db.InTx(ctx, f.pool, func(q *db.Queries) error {
		coldStarts, refused = nil, nil
		// Heartbeats share the lock a reconcile pass holds alone: a pass
		// locks replica rows before node rows and a heartbeat the other way
		// round (they deadlocked), and a new GPU layout must not land
		// between a pass's read of the slices and its allocations.
		if err := q.PlacementLockShared(ctx); err != nil {
			return err
		}
		// A node is believed about its inventory only up to what a
		// platform admin attested (docs/security.md).
		verdict, err := trust.Judge(ctx, q, st, f.requireAttestation, now)
		if err != nil {
			return err
		}
		if refused = verdict.Err; refused != nil {
			return nil
		}
		node, err := q.NodeGetForUpdate(ctx, st.Node)
		found := err == nil
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			return err
		}
		sameCPU := int(node.CPUCores) == st.CPUCores && int(node.MemoryMB) == st.MemoryMB
		if !found || !sameInventory(node.Inventory, inv) || !sameCPU {
			var p db.GPUSliceInsertManyParams
			for _, g := range inv {
				for _, s := range g.Slices {
					p.GPUs = append(p.GPUs, int32(g.Index))
					p.Slices = append(p.Slices, int32(s.Index))
					p.GPUTypes = append(p.GPUTypes, g.Type)
					p.Profiles = append(p.Profiles, s.Profile)
					mem, _ := sliceMemoryMB(s.Profile)
					p.MemoryMBs = append(p.MemoryMBs, int32(mem))
				}
			}
			switch {
			case found && sameCPU:
				// A new GPU layout (MIG reconfigured, or a cluster
				// pool's node added, drained or removed): allocations of
				// slices gone or changed are meaningless and their
				// replicas are placed again; a replica whose slices are
				// all still there, alike, keeps them and keeps running.
				if err := q.ReplicaDeleteOnChangedSlices(ctx, db.ReplicaDeleteOnChangedSlicesParams{NodeID: node.ID,
					GPUs: p.GPUs, Slices: p.Slices, GPUTypes: p.GPUTypes, Profiles: p.Profiles}); err != nil {
					return err
				}
				if err := q.GPUSliceDeleteChanged(ctx, db.GPUSliceDeleteChangedParams{NodeID: node.ID,
					GPUs: p.GPUs, Slices: p.Slices, GPUTypes: p.GPUTypes, Profiles: p.Profiles}); err != nil {
					return err
				}
			case found:
				// A CPU node with other cores or memory: its replicas
				// are placed again.
				if err := q.ReplicaDeleteByNode(ctx, node.ID); err != nil {
					return err
				}
				if err := q.GPUSliceDeleteByNode(ctx, node.ID); err != nil {
					return err
				}
			}
			node, err = q.NodeRegister(ctx, db.NodeRegisterParams{Name: st.Node, BootID: st.BootID, LeaseSeconds: int32(st.LeaseSeconds),
				LastHeartbeat: now, Inventory: invJSON, GPUUse: useJSON, AppliedGeneration: st.Generation,
				CPUCores: int32(st.CPUCores), MemoryMB: int32(st.MemoryMB), Cache: cacheJSON})
			if err != nil {
				return err
			}
			p.NodeID = node.ID
			if err := q.GPUSliceInsertMany(ctx, p); err != nil {
				return err
			}
			f.log.Info("node registered", slog.String("node", st.Node), slog.Int("gpus", len(inv)),
				slog.Int("cpu_cores", st.CPUCores), slog.Int("memory_mb", st.MemoryMB))
			changed = true
		} else {
			if node.State == "lost" {
				f.log.Info("lost node is back", slog.String("node", st.Node))
				changed = true
			}
			if err := q.NodeHeartbeat(ctx, db.NodeHeartbeatParams{ID: node.ID, BootID: st.BootID, LeaseSeconds: int32(st.LeaseSeconds),
				LastHeartbeat: now, GPUUse: useJSON, AppliedGeneration: st.Generation, Cache: cacheJSON}); err != nil {
				return err
			}
		}
		// The runtimes the node can run decide where placement may put a
		// version; a change (vllm installed) wakes the reconciler, a
		// repeat costs no query (the row read above has them).
		if rts := nodeRuntimes(st.Runtimes); (rts == nil) != (node.Runtimes == nil) || !slices.Equal(rts, node.Runtimes) {
			n, err := q.NodeSetRuntimes(ctx, db.NodeSetRuntimesParams{ID: node.ID, Runtimes: rts})
			if err != nil {
				return err
			}
			changed = changed || n > 0
		}
		if len(st.Replicas) == 0 {
			return nil
		}
		reg, err := q.NodeAddressGet(ctx, st.Node)
		registered := err == nil
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			return err
		}
		offNode, misnamed = offNode[:0], misnamed[:0]
		p := db.ReplicaObserveParams{NodeID: node.ID}
		metrics := make(map[string]replica.Metrics, len(st.Replicas))
		launches := make(map[string]busapi.Launch)
		for _, r := range st.Replicas {
			if registered && r.Addr != "" {
				if err := trust.OnNode(reg, r.Addr); err != nil {
					offNode = append(offNode, fmt.Sprintf("replica %s: %v", r.ID, err))
					continue
				}
			}
			if r.ServerName != "" && !trust.ValidServerName(r.ServerName) {
				misnamed = append(misnamed, fmt.Sprintf("replica %s: server name %q is not a DNS name", r.ID, r.ServerName))
				continue
			}
			p.Names = append(p.Names, r.ID)
			p.States = append(p.States, r.State)
			p.Addrs = append(p.Addrs, r.Addr)
			p.ServerNames = append(p.ServerNames, r.ServerName)
			p.Reasons = append(p.Reasons, truncate(r.Reason, 500))
			p.Failures = append(p.Failures, int32(r.Failures))
			metrics[r.ID] = replica.FromStatus(r, now)
			if r.Launch != nil {
				// Bounded again: the agent's word is not the bound.
				launches[r.ID] = r.Launch.Bounded()
			}
		}
		touched, err := q.ReplicaObserve(ctx, p)
		if err != nil {
			return err
		}
		if len(touched) > 0 {
			if err := q.VersionValidateByReadyReplicas(ctx, node.ID); err != nil {
				return err
			}
		}
		// Load changes with every heartbeat and decides nothing placement
		// or routing reads, so it is written apart and never counts as a
		// change that wakes the reconciler.
		metricsJSON, _ := json.Marshal(metrics)
		// Before the metrics are overwritten: a cold start is new when it
		// differs from the one stored (coldstart.go).
		coldStarts, err = q.VersionRecordColdStarts(ctx, db.VersionRecordColdStartsParams{Metrics: metricsJSON, NodeID: node.ID})
		if err != nil {
			return err
		}
		if err := q.ReplicaObserveMetrics(ctx, db.ReplicaObserveMetricsParams{NodeID: node.ID, Metrics: metricsJSON}); err != nil {
			return err
		}
		// What a replica runs is for people to read; nothing placement or
		// routing reads, so it is no change either.
		if len(launches) > 0 {
			launchJSON, _ := json.Marshal(launches)
			if err := q.ReplicaObserveLaunch(ctx, db.ReplicaObserveLaunchParams{NodeID: node.ID, Launches: launchJSON}); err != nil {
				return err
			}
		}
		// A measured cold start changes the Retry-After in the routing
		// entry of an endpoint scaled to zero.
		changed = changed || len(touched) > 0 || len(coldStarts) > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("observe node %s: %w", st.Node, err)
	}
	if refused != nil {
		// Counted at every heartbeat, raised as an event once (trust.Judge);
		// the intake logs the error.
		f.trust.HeartbeatsDropped.WithLabelValues(trust.DropOverAttestation).Inc()
		return false, refused
	}
	for _, c := range coldStarts {
		f.coldStart.WithLabelValues(c.Endpoint, c.Version).Observe(float64(c.TotalMs) / 1000)
	}
	for _, reason := range misnamed {
		f.log.Warn("replica report dropped", slog.String("node", st.Node), slog.String("reason", reason))
	}
	for _, reason := range offNode {
		f.trust.ReplicasOffNode.Inc()
		f.log.Warn("replica report dropped", slog.String("node", st.Node), slog.String("reason", reason))
	}
	return changed, nil
}

func sameInventory(stored []byte, inv []inventoryGPU) bool {
	var old []inventoryGPU
	if err := json.Unmarshal(stored, &old); err != nil {
		return false
	}
	a, _ := json.Marshal(old)
	b, _ := json.Marshal(inv)
	return string(a) == string(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Intake subscribes to every node's heartbeats and records them, spreading
// nodes over a few workers (one node's heartbeats stay in order). Several
// control-plane replicas share the load through a queue group.
type Intake struct {
	fleet   *Fleet
	nc      *nats.Conn
	log     *slog.Logger
	onDirty func()
	workers int

	sub *nats.Subscription
	// wakeSub receives the gateways' wake requests (wake.go).
	wakeSub *nats.Subscription
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	work    []chan busapi.NodeStatus
	heard   heard
}

// NewIntake returns an Intake; onDirty is called after a heartbeat changed
// something placement or routing depends on (it wakes the reconciler).
func NewIntake(f *Fleet, nc *nats.Conn, log *slog.Logger, onDirty func()) *Intake {
	return &Intake{fleet: f, nc: nc, log: log, onDirty: onDirty, workers: 8}
}

// Start subscribes and starts the workers; they stop when ctx ends or Stop is called.
func (in *Intake) Start(ctx context.Context) error {
	ctx, in.cancel = context.WithCancel(ctx)
	in.work = make([]chan busapi.NodeStatus, in.workers)
	for i := range in.work {
		in.work[i] = make(chan busapi.NodeStatus, 64)
		in.wg.Add(1)
		go in.run(ctx, in.work[i])
	}
	sub, err := in.nc.QueueSubscribe(busapi.NodeStatusWildcard, "mp-control-plane", func(m *nats.Msg) {
		in.heard.beat(in.fleet.now())
		// The node is the subject's (which NATS lets only that node's
		// credential publish on), never the payload's word.
		node, ok := trust.SubjectNode(m.Subject)
		if !ok {
			in.dropHeartbeat(trust.DropSubject, m.Subject, "not a node status subject")
			return
		}
		var st busapi.NodeStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			in.dropHeartbeat(trust.DropUndecodable, m.Subject, err.Error())
			return
		}
		if st.Node != node {
			in.dropHeartbeat(trust.DropNodeClaim, m.Subject, fmt.Sprintf("payload names node %q", st.Node))
			return
		}
		h := fnv.New32a()
		h.Write([]byte(st.Node))
		select {
		case in.work[h.Sum32()%uint32(len(in.work))] <- st:
		default:
			// Falling behind: a heartbeat is only the latest state, the
			// next one carries it again.
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe heartbeats: %w", err)
	}
	in.sub = sub
	return in.startWakes(ctx)
}

func (in *Intake) run(ctx context.Context, ch chan busapi.NodeStatus) {
	defer in.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case st := <-ch:
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			changed, err := in.fleet.Observe(octx, st)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					in.log.Warn("heartbeat not recorded", slog.String("node", st.Node), slog.String("error", err.Error()))
				}
				continue
			}
			if changed && in.onDirty != nil {
				in.onDirty()
			}
		}
	}
}

// ListeningSince is when this process last started hearing the fleet; the
// reconciler declares no node lost before it has listened for a full lease
// (Fleet.Reconcile's watchingSince).
func (in *Intake) ListeningSince() time.Time { return in.heard.since(in.fleet.now()) }

// fleetSilence is how long the whole fleet may be silent before this process
// counts as cut off: agents beat every few seconds, so a silence of every
// node at once means NATS is gone for the control plane (or for the agents),
// not that every node died in the same instant.
const fleetSilence = 10 * time.Second

// heard tracks whether heartbeats reach this process. While none have
// arrived for fleetSilence, since answers "now", so no node is declared lost
// (and its replicas torn down) because the control plane went deaf; once
// heartbeats flow again, since is when they resumed.
type heard struct {
	mu      sync.Mutex
	resumed time.Time
	last    time.Time
}

func (h *heard) beat(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last.IsZero() || now.Sub(h.last) > fleetSilence {
		h.resumed = now
	}
	h.last = now
}

func (h *heard) since(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last.IsZero() || now.Sub(h.last) > fleetSilence {
		return now
	}
	return h.resumed
}

// Stop unsubscribes and waits for the workers. The work channels stay open:
// a subscription callback may still be running after Unsubscribe returns.
func (in *Intake) Stop() {
	if in.sub != nil {
		in.sub.Unsubscribe()
	}
	if in.wakeSub != nil {
		in.wakeSub.Unsubscribe()
	}
	if in.cancel != nil {
		in.cancel()
	}
	in.wg.Wait()
}

// Fleet holds the fleet's state in PostgreSQL.
type Fleet struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	clock quartz.Clock
	// wakeGrace is how long a woken endpoint keeps its replica (wake.go).
	wakeGrace time.Duration
	// requireAttestation is Options.RequireAttestation.
	requireAttestation bool
	// defaultQuota is Options.DefaultQuota.
	defaultQuota map[string]float64
	// holdPlacement is Options.HoldPlacement.
	holdPlacement func(nodes int) bool
	// trust counts what the fleet refused to believe (package trust).
	trust trust.Metrics
	// coldStart is the replicas' measured cold starts (coldstart.go).
	coldStart *prometheus.HistogramVec
}

// Options configure a Fleet. Clock is required.
type Options struct {
	// Clock is what heartbeats, leases, wakes and the reconciler's ticks
	// are measured by; the assembly passes the control plane's one clock.
	Clock quartz.Clock
	// Log receives the fleet's warnings (nil: discarded).
	Log *slog.Logger
	// WakeGrace is how long a woken endpoint keeps its replica after the
	// last wake request (<= 0: DefaultWakeGrace).
	WakeGrace time.Duration
	// RequireAttestation refuses the heartbeats of nodes without an
	// attested inventory (trust.Attestations); false believes such nodes,
	// as before attestations existed. A node with one is always held to it.
	RequireAttestation bool
	// DefaultQuota caps every team without a quota of its own of a
	// resource (resource → amount, as quota.Quota.Amount counts it); nil:
	// such teams are uncapped.
	DefaultQuota map[string]float64
	// HoldPlacement, when set, is asked before each pass places replicas
	// with the number of nodes known; true leaves placing to a later pass.
	// `modelplane dev` holds its first placement until its whole fleet has
	// reported, so that the demo's replicas land where they would on a
	// running fleet rather than on the first node to report.
	HoldPlacement func(nodes int) bool
}

// New returns a Fleet over the database in pool.
func New(pool *pgxpool.Pool, o Options) *Fleet {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.WakeGrace <= 0 {
		o.WakeGrace = DefaultWakeGrace
	}
	return &Fleet{pool: pool, log: o.Log, clock: o.Clock, wakeGrace: o.WakeGrace, requireAttestation: o.RequireAttestation, defaultQuota: o.DefaultQuota, holdPlacement: o.HoldPlacement, trust: trust.NewMetrics(), coldStart: newColdStartMetric()}
}

func (f *Fleet) now() time.Time { return f.clock.Now() }

// Register exports the fleet's trust counters and its cold-start histogram
// on reg.
func (f *Fleet) Register(reg prometheus.Registerer) error {
	for _, c := range append(f.trust.Collectors(), f.coldStart) {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// dropHeartbeat counts and logs a heartbeat that is not recorded.
func (in *Intake) dropHeartbeat(reason, subject, detail string) {
	in.fleet.trust.HeartbeatsDropped.WithLabelValues(reason).Inc()
	in.log.Warn("heartbeat dropped", slog.String("reason", reason), slog.String("subject", subject), slog.String("detail", detail))
}
