package route_test

import (
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/route"
)

// Write, in the transaction that moved an endpoint's weights (a rollout's),
// publishes that endpoint's new split with its ready replicas at the next
// generation, and nothing of any other endpoint; a second Write with
// nothing new writes nothing, and the next pass finds only the other
// endpoint's change left.
func TestWriteWritesOneEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before, _ := f.route(t, "fraud-ep")
	otherWrites := f.writes(t, "other-ep")
	// Flips fraud-ep to v2 and moves other-ep's only version to 0, a
	// change Write of fraud-ep must leave to the reconciler.
	if _, err := f.pool.Exec(t.Context(), `UPDATE routing_rules SET weight = 100 - weight`); err != nil {
		t.Fatal(err)
	}
	var wrote bool
	err := db.InTx(t.Context(), f.pool, func(q *db.Queries) error {
		var err error
		wrote, err = route.Write(t.Context(), q, f.fraudID, f.now)
		return err
	})
	if err != nil || !wrote {
		t.Fatalf("Write = %v, %v; want the changed entry written", wrote, err)
	}
	rt, _ := f.route(t, "fraud-ep")
	if got, want := weights(rt), map[string]int{"v1": 0, "v2": 100}; !maps.Equal(got, want) {
		t.Errorf("weights after Write = %v, want %v", got, want)
	}
	for _, v := range rt.Versions {
		if len(v.Replicas) != 1 || v.Replicas[0].Addr == "" {
			t.Errorf("version %s lists replicas %+v, want its one ready replica with its address", v.Name, v.Replicas)
		}
	}
	if rt.Generation != before.Generation+1 || rt.Team != "risk" || rt.Task != "classification" {
		t.Errorf("entry = generation %d team %q task %q, want generation %d of team risk, classification", rt.Generation, rt.Team, rt.Task, before.Generation+1)
	}
	// The entry names the endpoint's id, which its statistics and samples
	// carry: a re-created endpoint of the same name is another id.
	if rt.EndpointID != f.fraudID {
		t.Errorf("entry's endpoint id = %d, want %d", rt.EndpointID, f.fraudID)
	}
	if n := f.writes(t, "other-ep"); n != otherWrites {
		t.Errorf("other-ep has %d routing writes after Write of fraud-ep, want %d", n, otherWrites)
	}
	err = db.InTx(t.Context(), f.pool, func(q *db.Queries) error {
		var err error
		wrote, err = route.Write(t.Context(), q, f.fraudID, f.now)
		return err
	})
	if err != nil || wrote {
		t.Errorf("second Write = %v, %v; want nothing written", wrote, err)
	}
	if p := f.reconcile(t); p.RoutesWritten != 1 || p.Removed != 0 {
		t.Errorf("pass after Write = %+v, want only other-ep's entry written and nothing removed", p)
	}
	if rt, _ := f.route(t, "other-ep"); rt.Versions[0].Weight != 0 {
		t.Errorf("other-ep after the pass = %+v, want v1 at weight 0", rt.Versions)
	}
}

// An endpoint left without routing rules loses its entry (a JSON null the
// relay turns into a key deletion), once; an endpoint that does not exist
// is not found.
func TestWriteRemovesEntryWithoutRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.pool.Exec(t.Context(), `DELETE FROM routing_rules WHERE endpoint_id = $1`, f.fraudID); err != nil {
		t.Fatal(err)
	}
	write := func() (bool, error) {
		var wrote bool
		err := db.InTx(t.Context(), f.pool, func(q *db.Queries) error {
			var err error
			wrote, err = route.Write(t.Context(), q, f.fraudID, f.now)
			return err
		})
		return wrote, err
	}
	if wrote, err := write(); err != nil || !wrote {
		t.Fatalf("Write = %v, %v; want the entry removed", wrote, err)
	}
	if _, ok := f.route(t, "fraud-ep"); ok {
		t.Error("entry still published after its rules went")
	}
	if wrote, err := write(); err != nil || wrote {
		t.Errorf("second Write = %v, %v; want nothing written", wrote, err)
	}
	err := db.InTx(t.Context(), f.pool, func(q *db.Queries) error {
		_, err := route.Write(t.Context(), q, f.fraudID+1000, f.now)
		return err
	})
	if !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Write of an unknown endpoint = %v, want ErrNotFound", err)
	}
}

// Rollout-like transactions (lock, move the weights, Write) racing
// reconcile passes never fork an endpoint's generations, and the entry
// published last is the split that committed last: a pass reads the rules
// only after taking the endpoint's lock, so it never publishes a split a
// rollout has replaced.
func TestRolloutsAndPassesSerialisePerEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	var ids struct{ v1, v2 int64 }
	if err := f.pool.QueryRow(ctx, `SELECT min(version_id), max(version_id) FROM routing_rules WHERE endpoint_id = $1`, f.fraudID).Scan(&ids.v1, &ids.v2); err != nil {
		t.Fatal(err)
	}
	const moves = 60
	errs := make(chan error, 2*moves)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for i := range moves {
			cand := int32(i % 101)
			err := db.InTx(ctx, f.pool, func(q *db.Queries) error {
				if err := route.Lock(ctx, q, f.fraudID); err != nil {
					return err
				}
				if err := q.RoutingRuleUpsert(ctx, db.RoutingRuleUpsertParams{EndpointID: f.fraudID, VersionID: ids.v2, Weight: cand}); err != nil {
					return err
				}
				if err := q.RoutingRuleUpsert(ctx, db.RoutingRuleUpsertParams{EndpointID: f.fraudID, VersionID: ids.v1, Weight: 100 - cand}); err != nil {
					return err
				}
				_, err := route.Write(ctx, q, f.fraudID, f.now)
				return err
			})
			if err != nil {
				errs <- err
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := f.fleet.Reconcile(ctx, f.now); err != nil {
				errs <- err
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rows, err := f.pool.Query(ctx, `SELECT payload FROM outbox WHERE subject = $1 ORDER BY id`, busapi.KVSubject(busapi.BucketRoutes, "fraud-ep"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last busapi.Route
	for rows.Next() {
		var payload []byte
		if err := rows.Scan(&payload); err != nil {
			t.Fatal(err)
		}
		var rt busapi.Route
		if err := json.Unmarshal(payload, &rt); err != nil {
			t.Fatal(err)
		}
		if rt.Generation != last.Generation+1 {
			t.Fatalf("generation %d follows %d in the outbox, want one more each write", rt.Generation, last.Generation)
		}
		last = rt
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"v1": 100 - (moves-1)%101, "v2": (moves - 1) % 101}
	if got := weights(last); !maps.Equal(got, want) {
		t.Errorf("last published split = %v, want the last committed %v", got, want)
	}
}
