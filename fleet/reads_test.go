package fleet_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/fleet"
)

// queryCounter counts the queries a pool runs by their sqlc name and kind
// (the "-- name: ReplicaListAll :many" line sqlc puts first).
type queryCounter struct {
	mu   sync.Mutex
	runs map[string]int // name → runs
	kind map[string]string
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	line, _, _ := strings.Cut(d.SQL, "\n")
	if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
		name, kind, _ := strings.Cut(rest, " ")
		c.mu.Lock()
		c.runs[name]++
		c.kind[name] = kind
		c.mu.Unlock()
	}
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the counts so far and starts again.
func (c *queryCounter) take() (runs map[string]int, kind map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs, kind = c.runs, c.kind
	c.runs, c.kind = map[string]int{}, map[string]string{}
	return runs, kind
}

// tracedFleet is f's fleet over a second pool on the same database whose
// queries are counted.
func (f *fixture) tracedFleet(t *testing.T) (*fleet.Fleet, *queryCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(f.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	c := &queryCounter{runs: map[string]int{}, kind: map[string]string{}}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return fleet.New(pool, fleet.Options{Clock: f.clock}), c
}

// TestReconcileReadsEachListOnce: one pass runs every list query (sqlc
// :many) at most once, whether it places replicas or not: the nodes, the
// replicas and the blocking budgets are read once and passed to every step
// that needs them (placement, statuses, desired states, routing entries),
// and the replicas a pass places are read back by their ids only.
func TestReconcileReadsEachListOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g()))
	f.heartbeat(t, "node-b", gpus(0, 2, "H100-80GB", nil))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 2)
	f.endpoint(t, "chat-ep", "chat", "c1", "gpu-h100-80gb", "standard", 1)
	traced, c := f.tracedFleet(t)

	for _, tc := range []struct {
		name   string
		placed int
		// must are list queries the pass has to run exactly once.
		must []string
	}{
		{"placing", 3, []string{"ReplicaListAll", "NodeList", "BudgetBlockingList", "ReplicaListByIDs"}},
		{"nothing to place", 0, []string{"ReplicaListAll", "NodeList", "BudgetBlockingList"}},
	} {
		p, err := traced.Reconcile(t.Context(), f.start)
		if err != nil {
			t.Fatal(err)
		}
		if p.Placed != tc.placed {
			t.Fatalf("%s: pass placed %d, want %d (%+v)", tc.name, p.Placed, tc.placed, p)
		}
		runs, kind := c.take()
		for name, n := range runs {
			if kind[name] == ":many" && n > 1 {
				t.Errorf("%s: list query %s ran %d times in one pass, want once", tc.name, name, n)
			}
		}
		for _, name := range tc.must {
			if runs[name] != 1 {
				t.Errorf("%s: %s ran %d times, want once", tc.name, name, runs[name])
			}
		}
		if tc.placed == 0 && runs["ReplicaListByIDs"] != 0 {
			t.Errorf("%s: read back replicas though none was placed", tc.name)
		}
	}
	// What the pass passed on is what a fresh read says: the desired
	// states carry the placed replicas.
	if d := f.desired(t, "node-a"); len(d.Replicas) != 2 {
		t.Errorf("node-a desired %d replicas, want fraud-ep's 2", len(d.Replicas))
	}
	if d := f.desired(t, "node-b"); len(d.Replicas) != 1 || d.Replicas[0].Token == "" {
		t.Errorf("node-b desired %+v, want chat-ep's replica with its token", d.Replicas)
	}
}

// TestHoldPlacementWaitsForTheFleet: while HoldPlacement says hold, a pass
// places nothing; once it lets go (here: both nodes reported), the next
// pass places every replica, on the slices the whole fleet offers.
func TestHoldPlacementWaitsForTheFleet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	held := fleet.New(f.pool, fleet.Options{Clock: f.clock, HoldPlacement: func(nodes int) bool { return nodes < 2 }})
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 2)
	f.heartbeat(t, "node-b", gpus(0, 2, "H100-80GB", nil))
	if p, err := held.Reconcile(t.Context(), f.start); err != nil || p.Placed != 0 {
		t.Fatalf("held pass placed %d (%v), want 0", p.Placed, err)
	}
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g()))
	if p, err := held.Reconcile(t.Context(), f.start); err != nil || p.Placed != 2 {
		t.Fatalf("pass with the whole fleet placed %d (%v), want 2", p.Placed, err)
	}
	if d := f.desired(t, "node-a"); len(d.Replicas) != 2 {
		t.Errorf("node-a desired %d replicas, want fraud-ep's 2 on its MIG slices", len(d.Replicas))
	}
}
