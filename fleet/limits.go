package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelplane/db"
	"modelplane/placement"
	"modelplane/quota"
)

// When GPUs run out (DESIGN.md section 17): per-team quotas cap what a
// team's replicas hold, and a higher tier takes GPUs from lower tiers'
// replicas beyond their minimum. Both apply after wanted() has said how
// many replicas each version should have, so whatever decides the counts
// (min_replicas, a wake, the autoscaler) is capped the same way.

// held is what one existing replica holds, for quotas and preemption.
type held struct {
	id       int64
	endpoint int64
	team     int64
	group    versionKey
	uses     []quota.Use
}

// preemption is one endpoint losing replicas to a higher tier in a pass.
type preemption struct {
	by, byTier string
	replicas   int
}

// limits is one pass's view of quotas and preemption.
type limits struct {
	quota  quota.Table
	demand map[versionKey]db.RoutingRuleListForPlacementRow
	// Filled by plan.
	base      map[int64]map[string]int // held by the kept replicas
	holders   map[string]held          // kept replicas by name
	yield     placement.Yield
	victims   []int64
	preempted map[int64]preemption // victim endpoint → by whom
}

// loadLimits reads the quotas (defaults cap the teams without their own,
// Options.DefaultQuota) and lowers want where a team's kept replicas
// already hold more than its quota (a quota lowered below what runs): the
// replicas beyond their version's minimum go, lowest tier first. notes gets
// why, per endpoint.
func loadLimits(ctx context.Context, q *db.Queries, defaults map[string]float64, demand []db.RoutingRuleListForPlacementRow,
	reps []db.ReplicaListAllRow, want map[versionKey]int, notes map[int64]string) (*limits, error) {
	var teams []int64
	for _, d := range demand {
		if !slices.Contains(teams, d.TeamID) {
			teams = append(teams, d.TeamID)
		}
	}
	table, err := quota.Load(ctx, q, defaults, teams)
	if err != nil {
		return nil, err
	}
	l := &limits{quota: table, demand: map[versionKey]db.RoutingRuleListForPlacementRow{}, preempted: map[int64]preemption{}}
	for _, d := range demand {
		l.demand[versionKey{d.EndpointID, d.VersionID}] = d
	}
	if l.quota.Empty() {
		return l, nil
	}
	_, keep := surplus(want, reps)
	used := l.usedBy(keep)
	for _, team := range teams {
		qs := l.quota.Limits(team)
		for res, limit := range qs {
			if float64(used[team][res]) <= limit+1e-9 {
				continue
			}
			// Versions of the team holding res, lowest tier first, then the
			// newest endpoint.
			var ks []versionKey
			for k, rs := range keep {
				if d, ok := l.demand[k]; ok && d.TeamID == team && len(rs) > int(d.MinReplicas) {
					ks = append(ks, k)
				}
			}
			slices.SortFunc(ks, func(a, b versionKey) int {
				return cmp.Or(cmp.Compare(placement.TierRank(l.demand[b].Tier), placement.TierRank(l.demand[a].Tier)),
					cmp.Compare(b.endpoint, a.endpoint), cmp.Compare(b.version, a.version))
			})
			for _, k := range ks {
				d, rs := l.demand[k], keep[k]
				for len(rs) > int(d.MinReplicas) && float64(used[team][res]) > limit+1e-9 {
					last := rs[len(rs)-1]
					uses := quota.ReplicaUses(last.GPUType, last.Profile, last.CPUCores, last.MemoryMB, len(last.SlotGpus))
					if !slices.ContainsFunc(uses, func(u quota.Use) bool { return u.Resource == res }) {
						break
					}
					rs = rs[:len(rs)-1]
					for _, u := range uses {
						used[team][u.Resource] -= u.Units
					}
					want[k] = len(rs)
					notes[d.EndpointID] = l.quota.Note(team, res, used[team][res])
				}
				keep[k] = rs
			}
		}
	}
	return l, nil
}

// usedBy sums what the kept replicas hold per team and resource.
func (l *limits) usedBy(keep map[versionKey][]db.ReplicaListAllRow) map[int64]map[string]int {
	used := map[int64]map[string]int{}
	for k, rs := range keep {
		d, ok := l.demand[k]
		if !ok {
			continue
		}
		for _, r := range rs {
			if used[d.TeamID] == nil {
				used[d.TeamID] = map[string]int{}
			}
			for _, u := range quota.ReplicaUses(r.GPUType, r.Profile, r.CPUCores, r.MemoryMB, len(r.SlotGpus)) {
				used[d.TeamID][u.Resource] += u.Units
			}
		}
	}
	return used
}

// plan is planAvoiding under the pass's limits: results a team's quota
// cannot take are refused with the quota's note, and the others planned
// again without them so their slices go to someone else; requests still
// unplaced then try preemption (placement.Preempt) of lower tiers'
// replicas beyond their minimum. Victims are removed by evict.
func (l *limits) plan(nodes []placement.Node, reqs []placement.Request, avoid [][]string,
	reqDemand []db.RoutingRuleListForPlacementRow, keep map[versionKey][]db.ReplicaListAllRow) []placement.Result {
	l.base = l.usedBy(keep)
	out := planAvoiding(nodes, reqs, avoid)
	if !l.quota.Empty() {
		refused := l.admit(out, reqDemand)
		if len(refused) > 0 {
			var idx []int
			var rs []placement.Request
			var av [][]string
			for i := range reqs {
				if !refused[i] {
					idx = append(idx, i)
					rs = append(rs, reqs[i])
					av = append(av, avoid[i])
				}
			}
			again := planAvoiding(nodes, rs, av)
			for j, i := range idx {
				out[i] = again[j]
			}
			l.admit(out, reqDemand)
		}
	}
	l.preempt(nodes, reqs, avoid, reqDemand, keep, out)
	return out
}

// admit walks the placed results in order and refuses those beyond their
// team's quota, returning which it refused (quota-refused results already
// carry their note and are skipped).
func (l *limits) admit(out []placement.Result, reqDemand []db.RoutingRuleListForPlacementRow) map[int]bool {
	used := map[int64]map[string]int{}
	for t, m := range l.base {
		used[t] = maps(m)
	}
	refused := map[int]bool{}
	for i, res := range out {
		if res.Err != "" {
			continue
		}
		team := reqDemand[i].TeamID
		if used[team] == nil {
			used[team] = map[string]int{}
		}
		uses := quota.ResultUses(res)
		if note := l.over(team, uses, used[team]); note != "" {
			out[i] = placement.Result{Replica: res.Replica, Err: note}
			refused[i] = true
			continue
		}
		for _, u := range uses {
			used[team][u.Resource] += u.Units
		}
	}
	return refused
}

// over is the quota note of the first resource uses would take team past,
// holding used; "" when all fit.
func (l *limits) over(team int64, uses []quota.Use, used map[string]int) string {
	for _, u := range uses {
		if l.quota.Over(team, u.Resource, used[u.Resource]+u.Units) {
			return l.quota.Note(team, u.Resource, used[u.Resource])
		}
	}
	return ""
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// preempt places the unplaced requests of tiers above batch on GPUs freed
// from lower tiers' replicas beyond their minimum, within quotas.
func (l *limits) preempt(nodes []placement.Node, reqs []placement.Request, avoid [][]string,
	reqDemand []db.RoutingRuleListForPlacementRow, keep map[versionKey][]db.ReplicaListAllRow, out []placement.Result) {
	var todo []int
	for i, res := range out {
		if res.Err != "" && !strings.HasPrefix(res.Err, "quota: ") && placement.TierRank(reqs[i].Tier) < placement.TierRank("batch") {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	l.holders = map[string]held{}
	l.yield = placement.Yield{Group: map[string]string{}, Spare: map[string]int{}}
	for k, rs := range keep {
		d, ok := l.demand[k]
		if !ok || len(rs) <= int(d.MinReplicas) {
			continue
		}
		g := strconv.FormatInt(k.endpoint, 10) + "/" + strconv.FormatInt(k.version, 10)
		l.yield.Spare[g] = len(rs) - int(d.MinReplicas)
		for _, r := range rs {
			l.holders[r.Name] = held{id: r.ID, endpoint: k.endpoint, team: d.TeamID, group: k,
				uses: quota.ReplicaUses(r.GPUType, r.Profile, r.CPUCores, r.MemoryMB, len(r.SlotGpus))}
			l.yield.Group[r.Name] = g
		}
	}
	if len(l.yield.Group) == 0 {
		return
	}
	work := make([]placement.Node, len(nodes))
	for i, n := range nodes {
		work[i] = placement.Node{Name: n.Name, Slices: slices.Clone(n.Slices), CPUCores: n.CPUCores, MemoryMB: n.MemoryMB, CPUHolds: n.CPUHolds,
			Runtimes: n.Runtimes}
	}
	for i, res := range out {
		if res.Err == "" {
			take(work, res, reqs[i])
		}
	}
	used := l.usedAfter(out, reqDemand)
	for _, i := range todo {
		on := work
		if len(avoid[i]) > 0 {
			on = nil
			for _, n := range work {
				if !slices.Contains(avoid[i], n.Name) {
					on = append(on, n)
				}
			}
		}
		// GPUs an earlier preemption freed and its replica left partly
		// free come first: they cost no one anything.
		res := placement.Plan(on, []placement.Request{reqs[i]})[0]
		var victims []string
		if res.Err != "" {
			var ok bool
			if victims, res, ok = placement.Preempt(on, reqs[i], l.yield); !ok {
				continue
			}
		}
		team := reqDemand[i].TeamID
		if used[team] == nil {
			used[team] = map[string]int{}
		}
		uses := quota.ResultUses(res)
		if note := l.over(team, uses, used[team]); note != "" {
			out[i].Err = note
			continue
		}
		for _, u := range uses {
			used[team][u.Resource] += u.Units
		}
		for _, v := range victims {
			h := l.holders[v]
			l.victims = append(l.victims, h.id)
			l.yield.Spare[l.yield.Group[v]]--
			delete(l.yield.Group, v)
			for _, u := range h.uses {
				used[h.team][u.Resource] -= u.Units
			}
			p := l.preempted[h.endpoint]
			p.by, p.byTier = reqs[i].Endpoint, reqs[i].Tier
			p.replicas++
			l.preempted[h.endpoint] = p
			release(work, v)
		}
		out[i] = res
		take(work, res, reqs[i])
	}
}

// usedAfter is what each team holds once the placed results are added.
func (l *limits) usedAfter(out []placement.Result, reqDemand []db.RoutingRuleListForPlacementRow) map[int64]map[string]int {
	used := map[int64]map[string]int{}
	for t, m := range l.base {
		used[t] = maps(m)
	}
	for i, res := range out {
		if res.Err != "" {
			continue
		}
		team := reqDemand[i].TeamID
		if used[team] == nil {
			used[team] = map[string]int{}
		}
		for _, u := range quota.ResultUses(res) {
			used[team][u.Resource] += u.Units
		}
	}
	return used
}

// release frees every slice owner holds.
func release(nodes []placement.Node, owner string) {
	for _, n := range nodes {
		for k := range n.Slices {
			if s := &n.Slices[k]; s.Owner == owner {
				s.Owner, s.OwnerEndpoint, s.OwnerTier = "", "", ""
			}
		}
	}
}

// evict removes the replicas preemption took GPUs from, before the pass
// stores the replicas placed on them.
func (l *limits) evict(ctx context.Context, q *db.Queries, pass *Pass) error {
	if len(l.victims) == 0 {
		return nil
	}
	if err := q.ReplicaDeleteByIDs(ctx, l.victims); err != nil {
		return err
	}
	pass.Removed += len(l.victims)
	pass.Preempted += len(l.victims)
	return nil
}

// finish records this pass's preemptions, forgets those of endpoints that
// have every replica they want again, and notes, per endpoint still short,
// the higher tier that took its replicas.
func (l *limits) finish(ctx context.Context, q *db.Queries, demand []db.RoutingRuleListForPlacementRow, errs, notes map[int64]string, at time.Time) error {
	for id, p := range l.preempted {
		if err := q.PreemptionUpsert(ctx, db.PreemptionUpsertParams{EndpointID: id, ByEndpoint: p.by, ByTier: p.byTier,
			Replicas: int32(p.replicas), At: at}); err != nil {
			return err
		}
	}
	recs, err := q.PreemptionListAll(ctx)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	inDemand := map[int64]bool{}
	for _, d := range demand {
		inDemand[d.EndpointID] = true
	}
	var done []int64
	for _, r := range recs {
		_, now := l.preempted[r.EndpointID]
		if !inDemand[r.EndpointID] || (!now && errs[r.EndpointID] == "") {
			done = append(done, r.EndpointID)
			continue
		}
		what := "replicas"
		if r.Replicas == 1 {
			what = "replica"
		}
		note := fmt.Sprintf("preempted by %s endpoint %s (%d %s beyond min_replicas, %s)", r.ByTier, r.ByEndpoint,
			r.Replicas, what, r.At.UTC().Format("2006-01-02T15:04:05Z"))
		if n := notes[r.EndpointID]; n != "" {
			note = n + "; " + note
		}
		notes[r.EndpointID] = note
	}
	if len(done) == 0 {
		return nil
	}
	return q.PreemptionDelete(ctx, done)
}
