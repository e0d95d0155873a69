package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/app"
	"modelplane/auth"
	"modelplane/controlplane"
	"modelplane/tenant"
)

// APIResult is what `modelplane bench api` prints.
type APIResult struct {
	Name     string  `json:"name"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	RPS      float64 `json:"rps"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Teams    int     `json:"teams"`
	Endpts   int     `json:"endpoints"`
	Versions int     `json:"versions"`
	Clients  int     `json:"clients"`
	Seconds  float64 `json:"seconds"`
	// Routes are each kind of request's latency. BaselineRoute is among
	// them: GET /api/v1/me, which passes the same middleware (request
	// log, authentication by API key, idempotency) and reads nothing else,
	// so a route's distance from it is the route's own work.
	Routes        map[string]routeLatency `json:"routes"`
	BaselineRoute string                  `json:"baseline_route"`
	// MedianRouteP99Ms is the median of the routes' p99s, the baseline's
	// left out; SlowestRoute is the route with the highest p99, and
	// SlowestVsMedianP99 its p99 over the median (issue 31: at most 3).
	MedianRouteP99Ms   float64 `json:"median_route_p99_ms"`
	SlowestRoute       string  `json:"slowest_route"`
	SlowestVsMedianP99 float64 `json:"slowest_route_p99_vs_median"`
}

// routeLatency is one kind of request's figures in a run.
type routeLatency struct {
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	Requests int     `json:"requests"`
}

// apiBaseline is the kind of the trivial route.
const apiBaseline = "api me (baseline)"

// The seeded catalogue: 50 teams, 1,000 endpoints, each over a model of
// its own with 10 versions. apiSeed writes the same numbers.
const (
	apiTeams            = 50
	apiEndpoints        = 1000
	apiVersionsPerModel = 10
	// apiWarmup is not measured (connections, prepared statements,
	// caches): at the start every client would otherwise hit the first
	// route cold at once.
	apiWarmup = 2 * time.Second
)

const apiSeed = `
INSERT INTO teams (name) SELECT 'team-' || g FROM generate_series(1, 50) g;
INSERT INTO users (issuer, subject, email) SELECT 'bench', 'u' || g, 'u' || g || '@example.com' FROM generate_series(1, 50) g;
INSERT INTO team_members (team_id, user_id, role) SELECT g, g, 'admin' FROM generate_series(1, 50) g;
INSERT INTO models (team_id, name, task, feature_names) SELECT 1 + (g % 50), 'model-' || g, 'classification', '{a,b,c}' FROM generate_series(1, 1000) g;
INSERT INTO model_versions (model_id, team_id, name, format, runtime, artifact_uri, manifest, size_bytes, parent_version)
  SELECT m.id, m.team_id, 'v' || v, 'safetensors', 'onnxruntime', 'sha256-manifest:' || md5(m.id || '-' || v),
         '{"model.safetensors":"` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}', 1024, CASE WHEN v > 1 THEN 'v' || (v - 1) ELSE '' END
  FROM models m, generate_series(1, 10) v;
INSERT INTO endpoints (team_id, name, model_id, runtime, instance_profile, min_replicas, max_replicas, tier)
  SELECT m.team_id, 'endpoint-' || m.id, m.id, 'onnxruntime', 'mig-1g.10gb', 1, 4, 'standard' FROM models m;
INSERT INTO routing_rules (endpoint_id, version_id, weight)
  SELECT e.id, v.id, CASE WHEN v.name = 'v10' THEN 90 ELSE 10 END FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id AND v.name IN ('v9', 'v10');
ANALYZE;`

func runAPI(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measureAPI(ctx, cfg)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "api: p50 %.2f ms, p99 %.2f ms, %.0f req/s over %d requests (%d errors); slowest route %s p99 %.2f ms, %.2fx the median route's %.2f ms (baseline %.2f ms)\n",
		res.P50Ms, res.P99Ms, res.RPS, res.Requests, res.Errors, res.SlowestRoute, res.Routes[res.SlowestRoute].P99Ms, res.SlowestVsMedianP99,
		res.MedianRouteP99Ms, res.Routes[apiBaseline].P99Ms)
}

// measureAPI seeds 50 teams, 1,000 endpoints and 10,000 versions in a
// private PostgreSQL, then drives the main list and detail pages and API
// reads with concurrent clients over real HTTP.
func measureAPI(ctx context.Context, cfg Config) (APIResult, error) {
	s, err := newScratch("mp-bench-")
	if err != nil {
		return APIResult{}, err
	}
	defer s.close()
	pool, err := s.postgres(ctx)
	if err != nil {
		return APIResult{}, err
	}
	if _, err := pool.Exec(ctx, apiSeed); err != nil {
		return APIResult{}, fmt.Errorf("seed: %w", err)
	}
	base, creds, err := startAPI(ctx, s, pool)
	if err != nil {
		return APIResult{}, err
	}
	if err := s.profile(cfg.Profile); err != nil {
		return APIResult{}, err
	}
	start := time.Now().Add(apiWarmup)
	load := apiLoad{ctx: ctx, base: base, creds: creds, start: start, deadline: start.Add(cfg.Duration), byKind: map[string][]time.Duration{}}
	load.run(cfg.Clients)
	elapsed := time.Since(start)
	res := APIResult{Name: "api", P50Ms: percentile(load.lat, 0.50), P99Ms: percentile(load.lat, 0.99), Routes: map[string]routeLatency{},
		BaselineRoute: apiBaseline, RPS: float64(len(load.lat)) / elapsed.Seconds(), Requests: len(load.lat), Errors: load.errs,
		Teams: apiTeams, Endpts: apiEndpoints, Versions: apiEndpoints * apiVersionsPerModel, Clients: cfg.Clients, Seconds: elapsed.Seconds()}
	var p99s []float64
	for k, v := range load.byKind {
		r := routeLatency{P50Ms: percentile(v, 0.50), P99Ms: percentile(v, 0.99), Requests: len(v)}
		res.Routes[k] = r
		if k == apiBaseline {
			continue
		}
		p99s = append(p99s, r.P99Ms)
		if res.SlowestRoute == "" || r.P99Ms > res.Routes[res.SlowestRoute].P99Ms {
			res.SlowestRoute = k
		}
	}
	if len(p99s) == 0 {
		return res, errors.New("api: no request measured")
	}
	res.MedianRouteP99Ms = median(p99s)
	res.SlowestVsMedianP99 = res.Routes[res.SlowestRoute].P99Ms / res.MedianRouteP99Ms
	return res, nil
}

// median is the median of v (the mean of the middle two for an even
// count), 0 for none; v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// apiCreds are each team's API key and its admin's session cookie, by
// team index.
type apiCreds struct{ keys, cookies []string }

// startAPI serves the portal and API over pool and makes every team's
// credentials; it returns the base URL.
func startAPI(ctx context.Context, s *scratch, pool *pgxpool.Pool) (string, apiCreds, error) {
	cp, err := controlplane.New(controlplane.Stores{Pool: pool}, controlplane.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ArtifactDir: filepath.Join(s.dir, "artifacts"), MaxUploadBytes: 1 << 30,
		Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour}})
	if err != nil {
		return "", apiCreds{}, err
	}
	h := app.NewHTTP(cp, app.HTTPOptions{MaxUploadBytes: 1 << 30})
	creds := apiCreds{keys: make([]string, apiTeams), cookies: make([]string, apiTeams)}
	for i := range apiTeams {
		p := auth.System("bench")
		raw, _, err := h.Tenant.CreateKey(ctx, p, tenant.KeyRequest{Name: "bench", Team: fmt.Sprintf("team-%d", i+1), Role: auth.RoleViewer})
		if err != nil {
			return "", creds, err
		}
		creds.keys[i] = raw
		tok, _, err := h.Sessions.Create(ctx, int64(i+1))
		if err != nil {
			return "", creds, err
		}
		creds.cookies[i] = tok
	}
	addr, err := s.serve(h.Handler())
	if err != nil {
		return "", creds, err
	}
	return "http://" + addr, creds, nil
}

// apiLoad is the clients' run and what they measured after start.
type apiLoad struct {
	ctx             context.Context
	base            string
	creds           apiCreds
	start, deadline time.Time

	// targets are the requests a client cycles through for an endpoint
	// of its team (nil: apiTargets), over perTeam endpoints of the team
	// (0: all of its 20).
	targets func(model int) []apiTarget
	perTeam int
	// stagger starts each client at its own place in targets, so slow
	// routes are measured from the start rather than in lockstep;
	// timeout is a request's (0: 10 s).
	stagger bool
	timeout time.Duration

	mu     sync.Mutex
	lat    []time.Duration
	byKind map[string][]time.Duration
	errs   int
	// statuses counts each kind's answers that were not 200, by
	// status ("error" for no answer).
	statuses map[string]map[string]int
}

// apiTarget is one kind of request: portal pages carry the session
// cookie, API calls the key.
type apiTarget struct {
	kind, path string
	portal     bool
}

// apiTargets are the requests a client cycles through for model: its own
// team's endpoints and models.
func apiTargets(model int) []apiTarget {
	return []apiTarget{
		{apiBaseline, "/api/v1/me", false},
		{"api endpoints list", "/api/v1/endpoints?limit=50", false},
		{"api endpoint", fmt.Sprintf("/api/v1/endpoints/endpoint-%d", model), false},
		{"api versions list", fmt.Sprintf("/api/v1/models/model-%d/versions", model), false},
		{"api models list", "/api/v1/models?limit=50", false},
		{"portal endpoints", "/endpoints", true},
		{"portal endpoint", fmt.Sprintf("/endpoints/endpoint-%d", model), true},
		{"portal model", fmt.Sprintf("/models/model-%d", model), true},
	}
}

// run drives the API with n clients until the deadline. Client c is team
// c%50's admin; model i belongs to team 1+(i%50).
func (l *apiLoad) run(n int) {
	tr := &http.Transport{MaxIdleConnsPerHost: n * 2}
	var wg sync.WaitGroup
	timeout := l.timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	for c := range n {
		wg.Go(func() { l.client(&http.Client{Transport: tr, Timeout: timeout}, c%apiTeams) })
	}
	wg.Wait()
}

// client is one client's loop; it adds its measures when done.
func (l *apiLoad) client(client *http.Client, team int) {
	var mine []time.Duration
	kinds := map[string][]time.Duration{}
	bad := 0
	statuses := map[string]map[string]int{}
	targetsOf, perTeam := l.targets, l.perTeam
	if targetsOf == nil {
		targetsOf = apiTargets
	}
	if perTeam <= 0 {
		perTeam = apiEndpoints / apiTeams
	}
	first := 0
	if l.stagger {
		first = team
	}
	for n := first; time.Now().Before(l.deadline); n++ {
		model := team + apiTeams*(n%perTeam)
		if model == 0 {
			model = apiTeams
		}
		targets := targetsOf(model)
		t := targets[n%len(targets)]
		req, _ := http.NewRequestWithContext(l.ctx, http.MethodGet, l.base+t.path, nil)
		if t.portal {
			req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: l.creds.cookies[team]})
		} else {
			req.Header.Set("Authorization", "Bearer "+l.creds.keys[team])
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if t0.Before(l.start) {
			continue
		}
		d := time.Since(t0)
		mine = append(mine, d)
		kinds[t.kind] = append(kinds[t.kind], d)
		if err != nil || resp.StatusCode != http.StatusOK {
			bad++
			status := "error"
			if err == nil {
				status = strconv.Itoa(resp.StatusCode)
			}
			if statuses[t.kind] == nil {
				statuses[t.kind] = map[string]int{}
			}
			statuses[t.kind][status]++
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lat = append(l.lat, mine...)
	for k, v := range kinds {
		l.byKind[k] = append(l.byKind[k], v...)
	}
	l.errs += bad
	for k, m := range statuses {
		if l.statuses == nil {
			l.statuses = map[string]map[string]int{}
		}
		if l.statuses[k] == nil {
			l.statuses[k] = map[string]int{}
		}
		for status, n := range m {
			l.statuses[k][status] += n
		}
	}
}
