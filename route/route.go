package route

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"modelplane/busapi"
	"modelplane/db"
)

// Lock takes the routing lock of one endpoint, its row in endpoints, until
// q's transaction ends. A transaction that changes the endpoint's routing
// rules or experiment takes it before the change; Write and WriteAll take
// it before they read. It is a row lock (FOR NO KEY UPDATE) rather than the
// fleet's placement lock: writers of different endpoints never wait for
// each other, a rollout never waits for a whole reconcile pass to place
// replicas, and inserts that only reference the endpoint (replicas,
// routing rules) are not blocked. Updates of the endpoint's settings take
// the same row lock, so they are ordered with route writes as well.
func Lock(ctx context.Context, q *db.Queries, endpointID int64) error {
	if _, err := q.EndpointLockForRoute(ctx, endpointID); err != nil {
		return fmt.Errorf("lock route of endpoint %d: %w", endpointID, err)
	}
	return nil
}

// Write writes, inside the caller's transaction q, the routing entry of one
// endpoint when it changed, and reports whether it did. It reads that
// endpoint's routing input alone, after taking its lock, so it is cheap
// enough for a rollout to call in the transaction that moves the weights:
// the new split reaches the outbox when the change commits instead of at
// the reconciler's next pass. Replicas are not placed or removed here; the
// next pass does that. now is the caller's clock: it picks the month whose
// blocking budgets apply. An endpoint without routing rules loses its
// entry.
func Write(ctx context.Context, q *db.Queries, endpointID int64, now time.Time) (bool, error) {
	wrote, err := write(ctx, q, endpointID, now)
	if err != nil {
		return false, fmt.Errorf("write route of endpoint %d: %w", endpointID, err)
	}
	return wrote, nil
}

func write(ctx context.Context, q *db.Queries, endpointID int64, now time.Time) (bool, error) {
	name, err := q.EndpointLockForRoute(ctx, endpointID)
	if err != nil {
		return false, err
	}
	ruleRows, err := q.RoutingRuleListForRoute(ctx, endpointID)
	if err != nil {
		return false, err
	}
	rules := make([]db.RoutingRuleListForRoutesRow, len(ruleRows))
	for i, r := range ruleRows {
		rules[i] = db.RoutingRuleListForRoutesRow(r)
	}
	repRows, err := q.ReplicaListReadyForRoute(ctx, endpointID)
	if err != nil {
		return false, err
	}
	ready := make([]db.ReplicaListReadyForRoutesRow, len(repRows))
	for i, r := range repRows {
		ready[i] = db.ReplicaListReadyForRoutesRow(r)
	}
	armRows, err := q.ExperimentListForRoute(ctx, endpointID)
	if err != nil {
		return false, err
	}
	arms := make([]db.ExperimentListForRoutesRow, len(armRows))
	for i, a := range armRows {
		arms[i] = db.ExperimentListForRoutesRow(a)
	}
	grantRows, err := q.GrantListForRoute(ctx, endpointID)
	if err != nil {
		return false, err
	}
	grants := make([]db.GrantListForRoutesRow, len(grantRows))
	for i, g := range grantRows {
		grants[i] = db.GrantListForRoutesRow(g)
	}
	blocks, err := BudgetBlocksAt(ctx, q, now)
	if err != nil {
		return false, err
	}
	prev, err := q.RouteEntryGet(ctx, name)
	had := err == nil
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		return false, err
	}
	routes, _ := build(rules, ready, arms, grants, blocks)
	if rt, ok := routes[name]; ok {
		return put(ctx, q, rt, prev, had)
	}
	if !had {
		return false, nil
	}
	return true, remove(ctx, q, name)
}

// WriteAll writes, inside the caller's transaction q, the routing entry of
// every endpoint whose versions, weights, shadow, ready replicas,
// experiment, settings or budget block changed, deletes the entries of
// endpoints that are gone, and returns how many it wrote. The fleet
// reconciler calls it once per pass. It takes every endpoint's lock first
// and reads the routing input afterwards, even when the caller read it
// already: a rollout that committed since then has its new weights in the
// entry, and one that has not yet committed waits for this transaction.
// blocks are the blocking budgets the caller read in q (BudgetBlocksAt):
// the reconciler caps replicas by the same read, so the pass reads them
// once and its caps and the entries' Blocked cannot disagree.
func WriteAll(ctx context.Context, q *db.Queries, blocks BudgetBlocks) (int, error) {
	n, err := writeAll(ctx, q, blocks)
	if err != nil {
		return 0, fmt.Errorf("write routes: %w", err)
	}
	return n, nil
}

func writeAll(ctx context.Context, q *db.Queries, blocks BudgetBlocks) (int, error) {
	if err := q.EndpointLockForRoutes(ctx); err != nil {
		return 0, err
	}
	rules, err := q.RoutingRuleListForRoutes(ctx)
	if err != nil {
		return 0, err
	}
	ready, err := q.ReplicaListReadyForRoutes(ctx)
	if err != nil {
		return 0, err
	}
	arms, err := q.ExperimentListForRoutes(ctx)
	if err != nil {
		return 0, err
	}
	grants, err := q.GrantListForRoutes(ctx)
	if err != nil {
		return 0, err
	}
	entries, err := q.RouteEntryList(ctx)
	if err != nil {
		return 0, err
	}
	old := make(map[string]db.RouteEntry, len(entries))
	for _, e := range entries {
		old[e.Endpoint] = e
	}
	routes, names := build(rules, ready, arms, grants, blocks)
	written := 0
	for _, name := range names {
		prev, had := old[name]
		wrote, err := put(ctx, q, routes[name], prev, had)
		if err != nil {
			return 0, err
		}
		if wrote {
			written++
		}
	}
	for _, e := range entries {
		if _, ok := routes[e.Endpoint]; ok {
			continue
		}
		if err := remove(ctx, q, e.Endpoint); err != nil {
			return 0, err
		}
		written++
	}
	return written, nil
}

type versionKey struct{ endpoint, version int64 }

// build turns routing input into the routing entry of every endpoint it
// names, and the names in the order of the rules. A scale-to-zero endpoint
// covered by a blocking budget carries the reason in Blocked, so gateways
// answer it instead of 202 for a wake that will start nothing; every
// scale-to-zero endpoint carries its cold-start budget and its versions'
// measured cold starts (coldstart.go).
// v2Only are the registry runtimes that speak only the KServe V2 / Open
// Inference protocol: the gateway translates /predict calls for their
// versions. Triton serves the model of the version's model repository named
// after the registry's model (the directory the version's files hold).
var v2Only = map[string]bool{"triton": true}

func build(rules []db.RoutingRuleListForRoutesRow, ready []db.ReplicaListReadyForRoutesRow, arms []db.ExperimentListForRoutesRow,
	grantRows []db.GrantListForRoutesRow, blocks BudgetBlocks) (map[string]*busapi.Route, []string) {
	// Grants come sorted by endpoint and team, so each entry's list is in
	// a stable order and its hash changes only with the grants.
	grants := map[int64][]busapi.RouteGrant{}
	for _, g := range grantRows {
		grants[g.EndpointID] = append(grants[g.EndpointID], busapi.RouteGrant{Team: g.Team, RateLimitRPS: g.RateLimitRPS,
			RateLimitBurst: int(g.RateLimitBurst), DailyQuota: g.DailyQuota, Sampling: g.Sampling})
	}
	replicas := map[versionKey][]busapi.RouteReplica{}
	for _, r := range ready {
		k := versionKey{r.EndpointID, r.VersionID}
		replicas[k] = append(replicas[k], busapi.RouteReplica{ID: r.Name, Addr: r.Addr, Token: r.Token, ServerName: r.ServerName})
	}
	experiments := map[int64]*busapi.RouteExperiment{}
	for _, a := range arms {
		x := experiments[a.EndpointID]
		if x == nil {
			x = &busapi.RouteExperiment{Name: a.Name}
			experiments[a.EndpointID] = x
		}
		x.Arms = append(x.Arms, busapi.RouteArm{Version: a.Version, Share: int(a.Share)})
	}
	routes := map[string]*busapi.Route{}
	var names []string
	gpu := map[string]bool{}
	budget := map[string]int{}
	coldMS := map[string]map[string]int64{}
	for _, d := range rules {
		rt := routes[d.Endpoint]
		if rt == nil {
			rt = &busapi.Route{Endpoint: d.Endpoint, EndpointID: d.EndpointID, Team: d.Team, Task: d.Task, InputSchema: json.RawMessage(d.InputSchema),
				FeatureNames: d.FeatureNames, SamplingRate: d.SamplingRate, RateLimitRPS: d.RateLimitRPS,
				RateLimitBurst: int(d.RateLimitBurst), TimeoutMS: int(d.TimeoutMS), ScaledToZero: d.MinReplicas == 0,
				Experiment: experiments[d.EndpointID], Grants: grants[d.EndpointID]}
			if rt.ScaledToZero {
				rt.Blocked = blocks.For(d.TeamID, d.EndpointID)
			}
			routes[d.Endpoint] = rt
			names = append(names, d.Endpoint)
		}
		rr := replicas[versionKey{d.EndpointID, d.VersionID}]
		if rr == nil {
			rr = []busapi.RouteReplica{}
		}
		slices.SortFunc(rr, func(a, b busapi.RouteReplica) int { return cmp.Compare(a.ID, b.ID) })
		rv := busapi.RouteVersion{Name: d.Version, Weight: int(d.Weight), Shadow: d.ShadowPercent, Replicas: rr}
		if len(d.Graph) > 0 {
			rv.Graph = json.RawMessage(d.Graph)
		}
		if v2Only[d.Runtime] {
			rv.Protocol, rv.V2Model = busapi.ProtocolV2, d.Model
		}
		rt.Versions = append(rt.Versions, rv)
		gpu[d.Endpoint] = gpu[d.Endpoint] || d.GPUCount > 0
		budget[d.Endpoint] = policyBudget(d.AutoscalePolicy)
		if coldMS[d.Endpoint] == nil {
			coldMS[d.Endpoint] = map[string]int64{}
		}
		coldMS[d.Endpoint][d.Version] = medianMS(d.ColdStartsMs)
	}
	for name, rt := range routes {
		slices.SortFunc(rt.Versions, func(a, b busapi.RouteVersion) int { return cmp.Compare(a.Name, b.Name) })
		setColdStart(rt, budget[name], gpu[name], coldMS[name])
	}
	return routes, names
}

// put writes rt to the outbox with the next generation unless its hash is
// the one last written (prev, when had).
func put(ctx context.Context, q *db.Queries, rt *busapi.Route, prev db.RouteEntry, had bool) (bool, error) {
	h := hashOf(rt)
	if had && prev.Hash == h {
		return false, nil
	}
	rt.Generation = prev.Generation + 1
	payload, err := json.Marshal(rt)
	if err != nil {
		return false, err
	}
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketRoutes, rt.Endpoint), Payload: payload}); err != nil {
		return false, err
	}
	if err := q.RouteEntryUpsert(ctx, db.RouteEntryUpsertParams{Endpoint: rt.Endpoint, Generation: rt.Generation, Hash: h}); err != nil {
		return false, err
	}
	return true, nil
}

// remove deletes an endpoint's key from mp_routes: a JSON null tells the
// relay to delete it.
func remove(ctx context.Context, q *db.Queries, name string) error {
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketRoutes, name), Payload: []byte("null")}); err != nil {
		return err
	}
	return q.RouteEntryDelete(ctx, name)
}

// hashOf is the hash of an entry before its generation is set; it must stay
// the one route_entries holds, or every entry is written again once.
func hashOf(rt *busapi.Route) string {
	b, _ := json.Marshal(rt)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
