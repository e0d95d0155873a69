package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/busapi"
	"modelplane/fleet"
	"modelplane/placement"
)

// PlacementResult is what `modelplane bench placement` prints.
type PlacementResult struct {
	Name        string  `json:"name"`
	PlaceAllS   float64 `json:"place_all_s"`
	ReplaceNode float64 `json:"replace_node_s"`
	// UsedRatio is the compute the placed replicas hold divided by the
	// compute of the GPUs they touch (in sevenths of a GPU): 1.0 is the
	// optimum, no touched GPU has an idle slice.
	UsedRatio  float64 `json:"gpu_slices_used_ratio"`
	GPUs       int     `json:"gpus"`
	GPUsUsed   int     `json:"gpus_used"`
	LowerBound int     `json:"gpus_lower_bound"`
	Endpoints  int     `json:"endpoints"`
	Replicas   int     `json:"replicas"`
	Unplaced   int     `json:"unplaced"`
	Moved      int     `json:"replicas_moved"`
}

// placementNodes is the fleet's size: 250 nodes of 8 GPUs.
const placementNodes = 250

// demand is what is placed: 500 endpoints, 3,000 replicas of mixed sizes.
var demand = []struct {
	endpoints, replicas int
	memoryMB            int
	profile             string
}{
	{250, 6, 4096, "mig-1g.10gb"},  // small classifiers
	{100, 6, 16384, "mig-2g.20gb"}, // medium
	{100, 6, 32768, "mig-3g.40gb"}, // large
	{50, 6, 71680, "gpu-a100-80gb"},
}

// layout is node's GPU type and MIG slices: a quarter of the fleet is
// split into MIG slices the way an operator would for the demand.
func layout(node int) (string, []string) {
	typ := "A100-80GB"
	if node%2 == 1 {
		typ = "H100-80GB"
	}
	switch {
	case node < 32:
		return typ, []string{"mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb"}
	case node < 57:
		return typ, []string{"mig-2g.20gb", "mig-2g.20gb", "mig-2g.20gb", "mig-1g.10gb"}
	case node < 95:
		return typ, []string{"mig-3g.40gb", "mig-3g.40gb"}
	default:
		return "A100-80GB", nil
	}
}

func runPlacement(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measurePlacement(ctx)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "placement: %d replicas of %d endpoints on %d GPUs in %.3f s; node replaced in %.3f s; used ratio %.3f (%d GPUs used, lower bound %d)\n",
		res.Replicas, res.Endpoints, res.GPUs, res.PlaceAllS, res.ReplaceNode, res.UsedRatio, res.GPUsUsed, res.LowerBound)
}

// measurePlacement places the demand on 2,000 GPUs through the real
// reconciler and PostgreSQL, then silences the busiest node and times the
// pass that moves its replicas.
func measurePlacement(ctx context.Context) (PlacementResult, error) {
	res := PlacementResult{Name: "placement"}
	s, err := newScratch("mp-bench-")
	if err != nil {
		return res, err
	}
	defer s.close()
	pool, err := s.postgres(ctx)
	if err != nil {
		return res, err
	}
	if res.Endpoints, res.Replicas, err = seedDemand(ctx, pool); err != nil {
		return res, err
	}
	fl := &placementFleet{clk: &movedClock{Clock: quartz.NewReal(), now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}}
	fl.fleet = fleet.New(pool, fleet.Options{Clock: fl.clk, Log: slog.New(slog.DiscardHandler)})
	if err := fl.heartbeat(ctx, ""); err != nil {
		return res, err
	}
	res.GPUs = placementNodes * 8
	pass, took, err := fl.reconcile(ctx)
	if err != nil {
		return res, err
	}
	res.PlaceAllS, res.Unplaced = took.Seconds(), pass.Unplaced
	if err := packing(ctx, pool, &res); err != nil {
		return res, err
	}
	var busiest string
	if err := pool.QueryRow(ctx, `SELECT n.name FROM replicas r JOIN nodes n ON n.id = r.node_id
		GROUP BY n.name ORDER BY count(*) DESC, n.name LIMIT 1`).Scan(&busiest); err != nil {
		return res, err
	}
	fl.advance(20 * time.Second)
	if err := fl.heartbeat(ctx, busiest); err != nil {
		return res, err
	}
	pass, took, err = fl.reconcile(ctx)
	if err != nil {
		return res, err
	}
	res.ReplaceNode = took.Seconds()
	if len(pass.LostNodes) != 1 || pass.Placed == 0 {
		return res, fmt.Errorf("node loss pass = %+v, want %s lost and its replicas placed", pass, busiest)
	}
	res.Moved = pass.Placed
	return res, nil
}

// seedDemand writes 50 teams and the demand's models, versions, endpoints
// and routing rules, and returns how many endpoints and replicas it asks
// for.
func seedDemand(ctx context.Context, pool *pgxpool.Pool) (endpoints, replicas int, err error) {
	seed := `INSERT INTO teams (name) SELECT 'team-' || g FROM generate_series(1, 50) g;`
	for i, m := range demand {
		seed += fmt.Sprintf(`
INSERT INTO models (team_id, name, task) SELECT 1 + (g %% 50), 'model-%[1]d-' || g, 'classification' FROM generate_series(1, %[2]d) g;
INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, gpu_memory_mb)
  SELECT id, team_id, 'v1', 'onnx', 'onnxruntime', 's3://bench/' || name, '{}', %[3]d FROM models WHERE name LIKE 'model-%[1]d-%%';
INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier)
  SELECT team_id, 'ep-' || substr(name, 7), id, 'onnxruntime', '%[4]s', %[5]d, %[5]d, (ARRAY['critical','standard','batch'])[1 + id %% 3]
  FROM models WHERE name LIKE 'model-%[1]d-%%';`, i, m.endpoints, m.memoryMB, m.profile, m.replicas)
		replicas += m.endpoints * m.replicas
		endpoints += m.endpoints
	}
	seed += `
INSERT INTO routing_rules (endpoint_id, version_id, weight) SELECT e.id, v.id, 100 FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id;
ANALYZE;`
	if _, err := pool.Exec(ctx, seed); err != nil {
		return 0, 0, fmt.Errorf("seed: %w", err)
	}
	return endpoints, replicas, nil
}

// placementFleet is the reconciler under a clock the benchmark moves.
type placementFleet struct {
	fleet *fleet.Fleet
	clk   *movedClock
}

func (f *placementFleet) clock() time.Time { return f.clk.Now() }

func (f *placementFleet) advance(d time.Duration) { f.clk.advance(d) }

// movedClock is a quartz.Clock whose time the benchmark moves by hand. The
// benchmark calls the reconciler's passes itself, so only the time is
// read; quartz.Mock, which also fires timers, needs a test to report to.
type movedClock struct {
	quartz.Clock
	mu  sync.Mutex
	now time.Time
}

// Now is the moved time.
func (c *movedClock) Now(...string) time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Since is Now().Sub(t).
func (c *movedClock) Since(t time.Time, _ ...string) time.Duration { return c.Now().Sub(t) }

// Until is t.Sub(Now()).
func (c *movedClock) Until(t time.Time, _ ...string) time.Duration { return t.Sub(c.Now()) }

func (c *movedClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// heartbeat reports every node but skip.
func (f *placementFleet) heartbeat(ctx context.Context, skip string) error {
	for i := range placementNodes {
		st := nodeStatus(i)
		if st.Node == skip {
			continue
		}
		if _, err := f.fleet.Observe(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// reconcile times one reconciler pass.
func (f *placementFleet) reconcile(ctx context.Context) (fleet.Pass, time.Duration, error) {
	start := time.Now()
	pass, err := f.fleet.Reconcile(ctx, f.clock().Add(-time.Hour))
	return pass, time.Since(start), err
}

// nodeStatus is node i's heartbeat.
func nodeStatus(i int) busapi.NodeStatus {
	st := busapi.NodeStatus{Node: fmt.Sprintf("gpu-node-%03d", i), BootID: "bench", LeaseSeconds: 15}
	typ, mig := layout(i)
	for g := range 8 {
		gpu := busapi.GPU{Index: g, Type: typ, MemoryMB: 81920, MIG: mig != nil}
		if mig == nil {
			gpu.Slices = []busapi.Slice{{Profile: busapi.ProfileFull}}
		}
		for j, p := range mig {
			gpu.Slices = append(gpu.Slices, busapi.Slice{Index: j, Profile: p})
		}
		st.GPUs = append(st.GPUs, gpu)
	}
	return st
}

// packing measures the compute held by replicas against the compute of the
// GPUs they touch, and the fewest GPUs that could hold that compute at all.
func packing(ctx context.Context, pool *pgxpool.Pool, res *PlacementResult) error {
	rows, err := pool.Query(ctx, `SELECT s.node_id, s.gpu, s.profile FROM allocations a
		JOIN gpu_slices s ON s.node_id = a.node_id AND s.gpu = a.gpu AND s.slice = a.slice`)
	if err != nil {
		return err
	}
	defer rows.Close()
	type gpuKey struct {
		node int64
		gpu  int32
	}
	touched := map[gpuKey]bool{}
	held := 0
	for rows.Next() {
		var k gpuKey
		var profile string
		if err := rows.Scan(&k.node, &k.gpu, &profile); err != nil {
			return err
		}
		touched[k] = true
		held += placement.Compute(profile)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	res.GPUsUsed = len(touched)
	res.LowerBound = (held + 6) / 7
	if res.GPUsUsed > 0 {
		res.UsedRatio = float64(held) / float64(7*res.GPUsUsed)
	}
	return nil
}
