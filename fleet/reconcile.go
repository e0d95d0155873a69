package fleet

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/placement"
	"modelplane/quota"
	"modelplane/registry"
	"modelplane/route"
)

// InstanceProfileCPU is the endpoint instance profile of CPU serving (the
// endpoint package's "cpu"): a version needing no GPU is placed on a CPU
// node whatever the profile says, and a GPU version on an endpoint of
// this profile gets what its own resources ask for.
const InstanceProfileCPU = "cpu"

// Endpoint statuses the reconciler writes.
const (
	StatusStarting     = "starting"       // replicas placed, none ready yet
	StatusReady        = "ready"          // every desired replica ready
	StatusDegraded     = "degraded"       // some ready, some missing or not ready
	StatusUnplaced     = "unplaced"       // nothing ready and placement failed
	StatusScaledToZero = "scaled-to-zero" // no replica wanted
)

// Moving replicas that keep failing on a node.
const (
	// MoveAfterFailures is how many failures in a row on one node (failed
	// starts, crashes, start timeouts, as the agent counts them) make the
	// reconciler place a replica on another node instead of letting the
	// agent retry it there for ever.
	MoveAfterFailures = 3
	// ExcludeFor is how long the node stays out of that version's
	// placement: long enough not to come straight back to a broken node,
	// short enough that a node fixed meanwhile is used again without a
	// person stepping in.
	ExcludeFor = time.Hour
)

// Pass is what one reconcile pass did.
type Pass struct {
	LostNodes      []string
	Moved          []string // replicas removed for failing on their node, to be placed elsewhere
	Removed        int      // replicas removed (scale down, lost node, version gone, moved)
	Placed         int
	Preempted      int // replicas of lower tiers removed for a higher tier's (counted in Removed too)
	Unplaced       int
	DesiredWritten int // nodes whose desired state went to the outbox
	RoutesWritten  int // endpoints whose routing entry went to the outbox
}

// Wrote reports whether the pass wrote anything to the outbox.
func (p Pass) Wrote() bool { return p.DesiredWritten+p.RoutesWritten > 0 }

// Reconcile runs one level-triggered pass over the whole fleet in one
// transaction: mark silent nodes lost (only once this process has watched
// heartbeats for longer than their lease, so a control plane that just
// started does not declare the whole fleet lost), remove replicas that are no
// longer wanted, place missing ones, then write every node's desired state and
// every endpoint's routing entry that changed to the outbox. Concurrent
// passes serialise on a transaction-level advisory lock; the allocations
// primary key is what guarantees no slice is ever given twice.
func (f *Fleet) Reconcile(ctx context.Context, watchingSince time.Time) (Pass, error) {
	var pass Pass
	err := db.InTx(ctx, f.pool, func(q *db.Queries) error {
		pass = Pass{}
		if err := q.PlacementLock(ctx); err != nil {
			return err
		}
		// Every query of a pass reads whole tables. Right after a big change
		// the planner's statistics still say "tiny" and it picks nested
		// loops: bench placement measured replace_node at 1.0 s with them
		// and 0.2 s without.
		if err := q.PlacementBulkPlans(ctx); err != nil {
			return err
		}
		lost, err := q.NodeMarkLost(ctx, db.NodeMarkLostParams{Now: f.now(), WatchingSince: watchingSince})
		if err != nil {
			return err
		}
		for _, n := range lost {
			pass.LostNodes = append(pass.LostNodes, n.Name)
		}
		// Each table is read once a pass and what was read is passed on:
		// the nodes to placement and to the desired states, the replicas
		// to every step (the ones this pass places are read back by id),
		// the blocking budgets to the caps and to the routing entries.
		// TestReconcileReadsEachListOnce counts the queries.
		nodes, err := q.NodeList(ctx)
		if err != nil {
			return err
		}
		gone, err := q.ReplicaDeleteOnLostNodes(ctx)
		if err != nil {
			return err
		}
		pass.Removed += len(gone)
		if err := q.PlacementExclusionDeleteExpired(ctx, f.now()); err != nil {
			return err
		}
		moved, err := q.ReplicaMoveFailing(ctx, db.ReplicaMoveFailingParams{MinFailures: MoveAfterFailures,
			Now: f.now(), Until: f.now().Add(ExcludeFor)})
		if err != nil {
			return err
		}
		for _, m := range moved {
			pass.Moved = append(pass.Moved, m.Name)
			f.log.Warn("replica keeps failing on its node; placing it elsewhere", slog.String("replica", m.Name),
				slog.String("node", m.Node), slog.Int("failures", int(m.Failures)), slog.String("reason", m.Reason))
		}
		pass.Removed += len(moved)
		demand, err := q.RoutingRuleListForPlacement(ctx)
		if err != nil {
			return err
		}
		reps, err := q.ReplicaListAll(ctx)
		if err != nil {
			return err
		}
		blocking, err := route.BudgetBlocksAt(ctx, q, f.now())
		if err != nil {
			return err
		}
		demoted := demoteUngranted(demand)
		want, notes := f.wanted(demand, reps, blocking)
		for id := range demoted {
			note := "tier critical is not granted to the team (a platform admin grants it); placed as standard"
			if n := notes[id]; n != "" {
				note = n + "; " + note
			}
			notes[id] = note
		}
		lim, err := loadLimits(ctx, q, f.defaultQuota, demand, reps, want, notes) // quotas and tiers cap what wanted() asks
		if err != nil {
			return err
		}
		removeIDs, keep := surplus(want, reps)
		if len(removeIDs) > 0 {
			if err := q.ReplicaDeleteByIDs(ctx, removeIDs); err != nil {
				return err
			}
			pass.Removed += len(removeIDs)
		}
		var errs map[int64]string
		var placed []int64
		if f.holdPlacement == nil || !f.holdPlacement(len(nodes)) {
			errs, placed, err = f.placeMissing(ctx, q, nodes, demand, want, keep, lim, &pass)
			if err != nil {
				return err
			}
		}
		if err := lim.finish(ctx, q, demand, errs, notes, f.now()); err != nil {
			return err
		}
		reps = keepRows(reps, append(removeIDs, lim.victims...))
		if len(placed) > 0 {
			rows, err := q.ReplicaListByIDs(ctx, placed)
			if err != nil {
				return err
			}
			for _, r := range rows {
				reps = append(reps, db.ReplicaListAllRow(r))
			}
		}
		if err := writeStatuses(ctx, q, demand, want, reps, errs, notes); err != nil {
			return err
		}
		if pass.DesiredWritten, err = writeDesired(ctx, q, nodes, reps, teamQuotas(lim.quota, demand, reps)); err != nil {
			return err
		}
		// WriteAll locks every endpoint's row and reads the routing
		// rules again: demand may predate a rollout that committed
		// since, and the entry must carry that rollout's weights. The
		// locks come last, so a rollout waits at most for the route
		// writes of a pass, never for its placement.
		pass.RoutesWritten, err = route.WriteAll(ctx, q, blocking)
		return err
	})
	if err != nil {
		return Pass{}, fmt.Errorf("reconcile fleet: %w", err)
	}
	if len(pass.LostNodes) > 0 {
		f.log.Warn("nodes lost; their replicas are placed elsewhere", slog.Any("nodes", pass.LostNodes))
	}
	return pass, nil
}

// demoteUngranted places the critical endpoints of teams without the
// critical grant (quota.Service.GrantTier) as standard, so that choosing a
// tier preempts no one; it returns the endpoints it demoted.
func demoteUngranted(demand []db.RoutingRuleListForPlacementRow) map[int64]bool {
	demoted := map[int64]bool{}
	for i := range demand {
		if d := &demand[i]; d.Tier == quota.TierCritical && !d.CriticalGranted {
			d.Tier = quota.TierStandard
			demoted[d.EndpointID] = true
		}
	}
	return demoted
}

type versionKey struct{ endpoint, version int64 }

// surplus picks the replicas to remove: those of versions no longer routed,
// and those beyond the wanted count (not-ready ones first, then the newest).
// It returns the kept replicas per endpoint version.
func surplus(want map[versionKey]int, reps []db.ReplicaListAllRow) ([]int64, map[versionKey][]db.ReplicaListAllRow) {
	have := map[versionKey][]db.ReplicaListAllRow{}
	for _, r := range reps {
		k := versionKey{r.EndpointID, r.VersionID}
		have[k] = append(have[k], r)
	}
	var remove []int64
	keep := map[versionKey][]db.ReplicaListAllRow{}
	for k, rs := range have {
		n, ok := want[k]
		if !ok {
			n = 0
		}
		if len(rs) <= n {
			keep[k] = rs
			continue
		}
		slices.SortFunc(rs, func(a, b db.ReplicaListAllRow) int {
			ar, br := a.State == busapi.StateReady, b.State == busapi.StateReady
			if ar != br {
				if ar {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.ID, b.ID)
		})
		keep[k] = rs[:n]
		for _, r := range rs[n:] {
			remove = append(remove, r.ID)
		}
	}
	return remove, keep
}

func keepRows(reps []db.ReplicaListAllRow, removed []int64) []db.ReplicaListAllRow {
	if len(removed) == 0 {
		return reps
	}
	out := reps[:0:0]
	for _, r := range reps {
		if !slices.Contains(removed, r.ID) {
			out = append(out, r)
		}
	}
	return out
}

// tierOrder places critical endpoints first when the fleet is short.
var tierOrder = map[string]int{"critical": 0, "standard": 1, "batch": 2}

// placeMissing asks placement for every missing replica and stores the
// placed ones with their allocations. It returns, per endpoint, why replicas
// could not be placed, and the ids of the replicas it placed.
func (f *Fleet) placeMissing(ctx context.Context, q *db.Queries, all []db.Node, demand []db.RoutingRuleListForPlacementRow, want map[versionKey]int,
	keep map[versionKey][]db.ReplicaListAllRow, lim *limits, pass *Pass) (map[int64]string, []int64, error) {
	type need struct {
		d db.RoutingRuleListForPlacementRow
		n int
	}
	var needs []need
	total := 0
	for _, d := range demand {
		k := versionKey{d.EndpointID, d.VersionID}
		if n := want[k] - len(keep[k]); n > 0 {
			needs = append(needs, need{d, n})
			total += n
		}
	}
	errs := map[int64]string{}
	if total == 0 {
		return errs, nil, nil
	}
	// Biggest first (first-fit decreasing packs better), critical tier first.
	slices.SortStableFunc(needs, func(a, b need) int {
		if c := cmp.Compare(tierOrder[a.d.Tier], tierOrder[b.d.Tier]); c != 0 {
			return c
		}
		if c := cmp.Compare(b.d.GPUCount, a.d.GPUCount); c != 0 {
			return c
		}
		return cmp.Compare(size(b.d), size(a.d))
	})
	rows, err := q.GPUSliceListReady(ctx)
	if err != nil {
		return nil, nil, err
	}
	nodes, nodeIDs, err := fleetNodes(ctx, q, all, rows)
	if err != nil {
		return nil, nil, err
	}
	excl, err := q.PlacementExclusionListActive(ctx, f.now())
	if err != nil {
		return nil, nil, err
	}
	avoid := map[versionKey][]db.PlacementExclusionListActiveRow{}
	for _, x := range excl {
		k := versionKey{x.EndpointID, x.VersionID}
		avoid[k] = append(avoid[k], x)
	}
	// Requests carry their index as a provisional name: ids (and with them
	// names) are taken from the sequence only for replicas that were placed.
	var reqs []placement.Request
	var reqDemand []db.RoutingRuleListForPlacementRow
	var reqAvoid [][]string
	for _, nd := range needs {
		minProfile, gpuType, msg := fromInstanceProfile(nd.d)
		for range nd.n {
			if msg != "" {
				errs[nd.d.EndpointID] = nd.d.Version + ": " + msg
				pass.Unplaced++
				continue
			}
			reqs = append(reqs, request(strconv.Itoa(len(reqs)), nd.d, minProfile, gpuType))
			reqDemand = append(reqDemand, nd.d)
			var names []string
			for _, x := range avoid[versionKey{nd.d.EndpointID, nd.d.VersionID}] {
				names = append(names, x.Node)
			}
			reqAvoid = append(reqAvoid, names)
		}
	}
	plan := lim.plan(nodes, reqs, reqAvoid, reqDemand, keep)
	placed := 0
	for i, res := range plan {
		if res.Err == "" {
			placed++
			continue
		}
		d := reqDemand[i]
		if _, seen := errs[d.EndpointID]; !seen {
			msg := d.Version + ": " + res.Err
			if note := avoidNote(avoid[versionKey{d.EndpointID, d.VersionID}]); note != "" {
				msg += "; " + note
			}
			errs[d.EndpointID] = msg
		}
		pass.Unplaced++
	}
	if placed == 0 {
		return errs, nil, nil
	}
	if err := lim.evict(ctx, q, pass); err != nil {
		return nil, nil, err
	}
	ids, err := q.ReplicaNextIDs(ctx, int32(placed))
	if err != nil {
		return nil, nil, err
	}
	var ins db.ReplicaInsertManyParams
	var alloc db.AllocationInsertManyParams
	for i, res := range plan {
		if res.Err != "" {
			continue
		}
		d := reqDemand[i]
		id, nodeID := ids[pass.Placed], nodeIDs[res.Node]
		ins.IDs = append(ins.IDs, id)
		ins.Names = append(ins.Names, fmt.Sprintf("%s-%s-r%d", d.Endpoint, d.Version, id))
		ins.OwnerTeams = append(ins.OwnerTeams, d.TeamID)
		ins.EndpointIDs = append(ins.EndpointIDs, d.EndpointID)
		ins.VersionIDs = append(ins.VersionIDs, d.VersionID)
		ins.NodeIDs = append(ins.NodeIDs, nodeID)
		ins.GPUTypes = append(ins.GPUTypes, res.GPUType)
		ins.Profiles = append(ins.Profiles, res.Profile)
		ins.CPUCores = append(ins.CPUCores, int32(res.CPUCores))
		ins.MemoryMBs = append(ins.MemoryMBs, int32(res.HostMemoryMB))
		ins.Notes = append(ins.Notes, avoidNote(avoid[versionKey{d.EndpointID, d.VersionID}]))
		for _, s := range res.Slots {
			alloc.NodeIDs = append(alloc.NodeIDs, nodeID)
			alloc.GPUs = append(alloc.GPUs, int32(s.GPU))
			alloc.Slices = append(alloc.Slices, int32(s.Slice))
			alloc.ReplicaIDs = append(alloc.ReplicaIDs, id)
		}
		pass.Placed++
	}
	if err := q.ReplicaInsertMany(ctx, ins); err != nil {
		return nil, nil, err
	}
	if err := q.AllocationInsertMany(ctx, alloc); err != nil {
		return nil, nil, err
	}
	return errs, ins.IDs, nil
}

// request is what placement is asked for one replica of d's version: a
// CPU replica of the version's cores and memory when it needs no GPU (the
// endpoint's instance profile, which sizes GPU allocations, does not
// apply), else as many GPUs as it needs, at least one. A GGUF version's
// memory is the larger of the declared and what validation computed from
// its file.
//
// The request names the runtime catalogue entry the version runs on that
// kind of node (catalog.Name: onnxruntime is the built-in runtime on a CPU
// node, Triton on a GPU), so placement only considers nodes that report it.
// A runtime without an entry (sim, served only by simulated nodes, which
// run everything) names none and any node may take it.
func request(id string, d db.RoutingRuleListForPlacementRow, minProfile, gpuType string) placement.Request {
	r := placement.Request{Replica: id, Endpoint: d.Endpoint, Tier: d.Tier}
	if name, err := catalog.Name(d.Runtime, d.GPUCount > 0); err == nil {
		r.Runtime = name
	}
	if d.GPUCount == 0 {
		cores, mem := registry.Resources{CPUCores: d.CPUCores, MemoryMB: d.MemoryMB}.CPUNeeding(d.MemoryNeedMB)
		r.CPUCores, r.HostMemoryMB = int(cores), int(mem)
		return r
	}
	r.MemoryMB, r.GPUCount, r.GPUType, r.MinProfile = int(d.GPUMemoryMB), int(d.GPUCount), gpuType, minProfile
	return r
}

// planAvoiding is placement.Plan where some requests must avoid nodes (a
// version that kept failing there). Requests free to go anywhere are
// planned together first, as always; then each one that avoids nodes, on
// the other nodes, with the slices taken before it marked taken. A moved
// replica thus never displaces one that was not moved, whatever its tier.
func planAvoiding(nodes []placement.Node, reqs []placement.Request, avoid [][]string) []placement.Result {
	var free, bound []int
	for i := range reqs {
		if len(avoid[i]) == 0 {
			free = append(free, i)
		} else {
			bound = append(bound, i)
		}
	}
	if len(bound) == 0 {
		return placement.Plan(nodes, reqs)
	}
	work := make([]placement.Node, len(nodes))
	for i, n := range nodes {
		work[i] = n
		work[i].Slices, work[i].CPUHolds = slices.Clone(n.Slices), slices.Clone(n.CPUHolds)
	}
	out := make([]placement.Result, len(reqs))
	place := func(idx []int, on []placement.Node) {
		rs := make([]placement.Request, len(idx))
		for j, i := range idx {
			rs[j] = reqs[i]
		}
		for j, res := range placement.Plan(on, rs) {
			out[idx[j]] = res
			if res.Err == "" {
				take(work, res, reqs[idx[j]])
			}
		}
	}
	place(free, work)
	for _, i := range bound {
		var on []placement.Node
		for _, n := range work {
			if !slices.Contains(avoid[i], n.Name) {
				on = append(on, n)
			}
		}
		place([]int{i}, on)
	}
	return out
}

// take marks the slices, or the CPU node's cores and memory, of a placed
// request as its own.
func take(nodes []placement.Node, res placement.Result, r placement.Request) {
	for i := range nodes {
		n := &nodes[i]
		if n.Name != res.Node {
			continue
		}
		if res.CPUCores > 0 || res.HostMemoryMB > 0 {
			n.CPUHolds = append(n.CPUHolds, placement.CPUHold{Owner: r.Replica, OwnerEndpoint: r.Endpoint,
				Cores: res.CPUCores, MemoryMB: res.HostMemoryMB})
		}
		for _, slot := range res.Slots {
			for k := range n.Slices {
				if s := &n.Slices[k]; s.GPU == slot.GPU && s.Index == slot.Slice {
					s.Owner, s.OwnerEndpoint, s.OwnerTier = r.Replica, r.Endpoint, r.Tier
				}
			}
		}
	}
}

// avoidNote says which nodes a version avoids and why, for the replica
// placed elsewhere and for an endpoint that could not be placed.
func avoidNote(xs []db.PlacementExclusionListActiveRow) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("not on %s: replica %s failed %d times in a row there (%s)", x.Node, x.Replica, x.Failures, truncate(x.Reason, 200)))
	}
	return strings.Join(parts, "; ")
}

func size(d db.RoutingRuleListForPlacementRow) int32 {
	if d.GPUMemoryMB == 0 {
		return 1 << 30
	}
	return d.GPUMemoryMB
}

// fromInstanceProfile turns the endpoint's instance profile into the
// smallest allocation placement may give and a GPU type; a whole-GPU profile
// of one type names that type. msg says why nothing can satisfy it.
func fromInstanceProfile(d db.RoutingRuleListForPlacementRow) (minProfile, gpuType, msg string) {
	gpuType = d.GPUType
	p := d.InstanceProfile
	if p == InstanceProfileCPU {
		// A GPU version on an endpoint whose profile is cpu (set when
		// its first version needed no GPU): the version's own resources
		// size it.
		return "", gpuType, ""
	}
	if t, ok := strings.CutPrefix(p, "gpu-"); ok {
		t = strings.ToUpper(t)
		if gpuType != "" && gpuType != t {
			return "", "", fmt.Sprintf("the endpoint asks for %s GPUs but the version needs %s", t, gpuType)
		}
		return busapi.ProfileFull, t, ""
	}
	return p, gpuType, ""
}

// fleetNodes is the fleet as placement sees it: all is every node, as the
// pass read them; rows the slices of ready GPU nodes.
func fleetNodes(ctx context.Context, q *db.Queries, all []db.Node, rows []db.GPUSliceListReadyRow) ([]placement.Node, map[string]int64, error) {
	ids := make(map[string]int64, len(all))
	runtimes := make(map[string][]string, len(all))
	for _, n := range all {
		ids[n.Name] = n.ID
		runtimes[n.Name] = n.Runtimes
	}
	var nodes []placement.Node
	cpu, err := q.NodeListCPUReady(ctx)
	if err != nil {
		return nil, nil, err
	}
	holds, err := q.ReplicaListCPUHolds(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range cpu {
		nd := placement.Node{Name: n.Name, CPUCores: int(n.CPUCores), MemoryMB: int(n.MemoryMB), Runtimes: runtimes[n.Name]}
		for _, h := range holds {
			if h.Node == n.Name {
				nd.CPUHolds = append(nd.CPUHolds, placement.CPUHold{Owner: h.Name, OwnerEndpoint: h.Endpoint, Cores: int(h.CPUCores), MemoryMB: int(h.MemoryMB)})
			}
		}
		nodes = append(nodes, nd)
	}
	for _, r := range rows {
		if len(nodes) == 0 || nodes[len(nodes)-1].Name != r.Node {
			nodes = append(nodes, placement.Node{Name: r.Node, Runtimes: runtimes[r.Node]})
		}
		n := &nodes[len(nodes)-1]
		n.Slices = append(n.Slices, placement.Slice{GPU: int(r.GPU), Index: int(r.Slice), GPUType: r.GPUType, Profile: r.Profile,
			MemoryMB: int(r.MemoryMB), Owner: r.Owner, OwnerEndpoint: r.OwnerEndpoint, OwnerTier: r.OwnerTier})
	}
	return nodes, ids, nil
}

// writeStatuses stores every endpoint's status and placement error; notes
// (a budget holding replicas back) are shown with the placement error but
// do not change the status.
func writeStatuses(ctx context.Context, q *db.Queries, demand []db.RoutingRuleListForPlacementRow, wantVersion map[versionKey]int,
	reps []db.ReplicaListAllRow, errs, notes map[int64]string) error {
	want := map[int64]int{}
	var order []int64
	for _, d := range demand {
		if _, ok := want[d.EndpointID]; !ok {
			order = append(order, d.EndpointID)
		}
		want[d.EndpointID] += wantVersion[versionKey{d.EndpointID, d.VersionID}]
	}
	ready := map[int64]int{}
	for _, r := range reps {
		if r.State == busapi.StateReady {
			ready[r.EndpointID]++
		}
	}
	var set db.EndpointSetPlacementParams
	for _, id := range order {
		var status string
		switch {
		case want[id] == 0:
			status = StatusScaledToZero
		case ready[id] >= want[id] && errs[id] == "":
			status = StatusReady
		case ready[id] == 0 && errs[id] != "":
			status = StatusUnplaced
		case ready[id] == 0:
			status = StatusStarting
		default:
			status = StatusDegraded
		}
		set.IDs = append(set.IDs, id)
		set.Statuses = append(set.Statuses, status)
		msg := errs[id]
		if n := notes[id]; n != "" {
			if msg != "" {
				msg += "; "
			}
			msg += n
		}
		set.PlacementErrors = append(set.PlacementErrors, msg)
	}
	return q.EndpointSetPlacement(ctx, set)
}

func hashOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// writeDesired writes the desired state of every node whose replica set
// changed, lost nodes included (an empty set: when such a node comes back,
// its agent stops what it still runs).
func writeDesired(ctx context.Context, q *db.Queries, nodes []db.Node, reps []db.ReplicaListAllRow, quotas map[string]map[string]float64) (int, error) {
	byNode := map[int64][]busapi.ReplicaSpec{}
	for _, r := range reps {
		byNode[r.NodeID] = append(byNode[r.NodeID], replicaSpec(r))
	}
	written := 0
	for _, n := range nodes {
		specs := byNode[n.ID]
		if specs == nil {
			specs = []busapi.ReplicaSpec{}
		}
		slices.SortFunc(specs, func(a, b busapi.ReplicaSpec) int { return cmp.Compare(a.ID, b.ID) })
		// The quotas of the node's teams go with its set (a cluster
		// agent writes them as each team namespace's ResourceQuota); a
		// node whose teams have none hashes as before they existed.
		var nq map[string]map[string]float64
		for _, sp := range specs {
			if lim, ok := quotas[sp.Team]; ok {
				if nq == nil {
					nq = map[string]map[string]float64{}
				}
				nq[sp.Team] = lim
			}
		}
		h := hashOf(specs)
		if nq != nil {
			h = hashOf(struct {
				Specs  []busapi.ReplicaSpec
				Quotas map[string]map[string]float64
			}{specs, nq})
		}
		if h == n.DesiredHash {
			continue
		}
		gen := n.Generation + 1
		payload, err := json.Marshal(busapi.Desired{Node: n.Name, Generation: gen, Replicas: specs, Quotas: nq})
		if err != nil {
			return 0, err
		}
		if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketDesired, n.Name), Payload: payload}); err != nil {
			return 0, err
		}
		if err := q.NodeSetDesired(ctx, db.NodeSetDesiredParams{ID: n.ID, Generation: gen, DesiredHash: h}); err != nil {
			return 0, err
		}
		written++
	}
	return written, nil
}

// teamQuotas are the quotas of the teams that have replicas, by team name,
// as amounts (GPUs of a type, cores, MiB), for the desired states.
func teamQuotas(t quota.Table, demand []db.RoutingRuleListForPlacementRow, reps []db.ReplicaListAllRow) map[string]map[string]float64 {
	if t.Empty() {
		return nil
	}
	teamOf := map[int64]int64{}
	for _, d := range demand {
		teamOf[d.EndpointID] = d.TeamID
	}
	out := map[string]map[string]float64{}
	for _, r := range reps {
		id, ok := teamOf[r.EndpointID]
		if !ok || out[r.Team] != nil {
			continue
		}
		lims := t.Limits(id)
		if len(lims) == 0 {
			continue
		}
		m := make(map[string]float64, len(lims))
		for res, units := range lims {
			m[res] = units / quota.Units(res, 1)
		}
		out[r.Team] = m
	}
	return out
}
