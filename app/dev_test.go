package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/bus"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/cli"
	"modelplane/demo/fraud"
	"modelplane/ingest"
	"modelplane/internal/freeport"
	"modelplane/internal/promcheck"
	"modelplane/internal/wait"
)

// syncBuffer collects RunDev's output across goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devSlot is held by the test running a dev stack. Each dev stack starts
// its own PostgreSQL, ClickHouse, NATS and CPU nodes on the fixed
// SimPortBase ports, so they run one at a time; they are parallel tests
// so that they run beside the lighter in-process stacks, whose waits on
// real loops would otherwise add up to the package's time.
var devSlot sync.Mutex

// oneDevAtATime waits for the dev slot and holds it until t ends.
func oneDevAtATime(t *testing.T) {
	t.Helper()
	devSlot.Lock()
	t.Cleanup(devSlot.Unlock)
}

// startDev runs `modelplane dev` in dir and returns once it serves, with a
// stop function that cancels it and waits for it to return.
func startDev(t *testing.T, dir string, traffic float64) (*Dev, func()) {
	t.Helper()
	return startDevWith(t, dir, func(c *DevConfig) { c.DemoTraffic = traffic })
}

// startDevWith is startDev with the test's settings changed by edit.
func startDevWith(t *testing.T, dir string, edit func(*DevConfig)) (*Dev, func()) {
	t.Helper()
	httpPort, _ := freeport.Get()
	idpPort, _ := freeport.Get()
	gwPort, _ := freeport.Get()
	cfg := DevConfig{Dir: dir, HTTPAddr: "127.0.0.1:" + itoa(httpPort), IdPAddr: "127.0.0.1:" + itoa(idpPort), AdminAddr: "127.0.0.1:0", GatewayAdminAddr: "127.0.0.1:0", LogLevel: "warn", MaxUploadMB: 16,
		SimNodes: 4, SimGPUsPerNode: 8, SimPortBase: 32000, GatewayAddr: "127.0.0.1:" + itoa(gwPort),
		CPUNodes: 2, CPUNodeCores: 1, CPUNodeMemory: "1GB", RuntimeBinary: modelplaneBinary(t)}
	edit(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dev{Ready: make(chan struct{})}
	done := make(chan error, 1)
	var out syncBuffer
	go func() { done <- RunDev(ctx, cfg, &out, d) }()
	select {
	case <-d.Ready:
	case err := <-done:
		cancel()
		t.Fatalf("dev exited before it was ready: %v\n%s", err, out.String())
	case <-time.After(3 * time.Minute):
		cancel()
		t.Fatalf("dev not ready after 3 minutes:\n%s", out.String())
	}
	if !strings.Contains(out.String(), d.BaseURL) || !strings.Contains(out.String(), "dev.env") || !strings.Contains(out.String(), "2 CPU nodes (cpu-node-01…02)") {
		t.Errorf("banner does not say where to go and how to sign in:\n%s", out.String())
	}
	return d, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev returned %v", err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDevStartsServesAndStopsCleanly runs the embedded default twice on one
// directory: the dev.env keys work against the API, the CPU nodes report
// their inventory, the demo traffic's statistics and the backfilled week
// reach ClickHouse, Ctrl-C (context cancellation) leaves no child process,
// and the second run (without demo traffic) keeps the data and the keys,
// backfills nothing again and sends no traffic of its own.
func TestDevStartsServesAndStopsCleanly(t *testing.T) {
	t.Parallel()
	oneDevAtATime(t)
	dir, err := os.MkdirTemp("", "mp-dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	stateDir := filepath.Join(dir, ".modelplane")

	d, stop := startDev(t, stateDir, 20)
	env := readEnvFile(d.EnvFile)
	for _, k := range []string{"MP_API", "MP_ADMIN_KEY", "MP_RISK_KEY", "MP_SEARCH_KEY", "MP_FINANCE_KEY"} {
		if env[k] == "" {
			t.Fatalf("dev.env lacks %s: %v", k, env)
		}
	}
	for key, want := range map[string]string{"MP_RISK_KEY": "fraud-scoring", "MP_SEARCH_KEY": "support-chat", "MP_ADMIN_KEY": "fraud-scoring"} {
		body := get(t, env["MP_API"]+"/endpoints", env[key])
		if !strings.Contains(body, want) {
			t.Errorf("GET /endpoints with %s: %s; want it to list %s", key, body, want)
		}
	}
	// Each dev key is a demo user's, so what it does is shown as theirs.
	for key, owner := range map[string]string{"MP_ADMIN_KEY": "admin@example.com", "MP_RISK_KEY": "risk-admin@example.com",
		"MP_SEARCH_KEY": "search-admin@example.com", "MP_FINANCE_KEY": "admin@example.com"} {
		if body := get(t, env["MP_API"]+"/me", env[key]); !strings.Contains(body, `"owner":"`+owner+`"`) {
			t.Errorf("GET /me with %s: %s; want owner %s", key, body, owner)
		}
	}
	if body := get(t, env["MP_API"]+"/endpoints", env["MP_SEARCH_KEY"]); strings.Contains(body, "fraud-scoring") {
		t.Errorf("search key sees risk's endpoint: %s", body)
	}
	if body := get(t, d.BaseURL+"/readyz", ""); body != `{"clickhouse":"ok","nats":"ok","postgres":"ok"}`+"\n" {
		t.Errorf("/readyz = %s; want all three dependencies ok", body)
	}
	if body := get(t, d.AdminURL+"/metrics", ""); !strings.Contains(body, "mp_http_requests_total") {
		t.Errorf("admin /metrics lacks mp_http_requests_total")
	}
	waitServing(t, env, "fraud-scoring", env["MP_RISK_KEY"], 2, busapi.ProfileCPU)
	waitServing(t, env, "support-chat", env["MP_SEARCH_KEY"], 1, "mig-4g.40gb")
	waitMetered(t, env["MP_CLICKHOUSE_URL"])
	waitRoute(t, bus.ClientConfig{URL: env["MP_NATS_URL"], Creds: env["MP_NATS_CREDS"]}, "fraud-scoring", "v23", 2)
	// What Prometheus scrapes of the control plane and the gateway, with
	// the fleet serving, passes Prometheus's own linter, and has the
	// fleet's series the shipped alert rules read.
	// The fleet's series are read at most every 5 s (opsmetrics.cacheFor),
	// and the scrape above may have read them before the fleet served.
	var cpMetrics, lacks string
	wait.Eventually(t, 30*time.Second, func() bool {
		cpMetrics, lacks = get(t, d.AdminURL+"/metrics", ""), ""
		for _, want := range []string{`ml_serving_replicas{endpoint="fraud-scoring",state="ready",team="risk",version="v23"} 2`,
			`modelplane_node_up{node="cpu-node-01"} 1`, `ml_serving_rollouts_finished_total{endpoint="fraud-scoring",state="rolled_back"}`} {
			if !strings.Contains(cpMetrics, want) {
				lacks = want
			}
		}
		return lacks == ""
	}, "control plane /metrics lacks %v", wait.Show(func() any { return lacks }))
	promcheck.Metrics(t, cpMetrics)
	promcheck.Metrics(t, get(t, d.GatewayAdminURL+"/metrics", ""))
	scrapeTargetsOnTheDemo(t, d.AdminURL)
	// A CPU replica's log, read from its node through the API as its
	// team's engineer would, with no shell on the node.
	var reps struct {
		Items []struct {
			Name, Node, State string
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(get(t, env["MP_API"]+"/endpoints/fraud-scoring/replicas", env["MP_RISK_KEY"])), &reps); err != nil || len(reps.Items) == 0 {
		t.Fatalf("fraud-scoring replicas: %+v, %v", reps, err)
	}
	logURL := env["MP_API"] + "/endpoints/fraud-scoring/replicas/" + reps.Items[0].Name + "/logs?tail=20"
	if body := get(t, logURL, env["MP_RISK_KEY"]); !strings.Contains(body, "modelplane agent: starting "+reps.Items[0].Name) {
		t.Errorf("log of %s on %s: %q; want the agent's start line", reps.Items[0].Name, reps.Items[0].Node, body)
	}
	// A simulated replica runs no process: its node says so at once,
	// rather than staying silent like a node that is down.
	if err := json.Unmarshal([]byte(get(t, env["MP_API"]+"/endpoints/support-chat/replicas", env["MP_SEARCH_KEY"])), &reps); err != nil || len(reps.Items) == 0 {
		t.Fatalf("support-chat replicas: %+v, %v", reps, err)
	}
	simReq, _ := http.NewRequest(http.MethodGet, env["MP_API"]+"/endpoints/support-chat/replicas/"+reps.Items[0].Name+"/logs", nil)
	simReq.Header.Set("Authorization", "Bearer "+env["MP_SEARCH_KEY"])
	if resp, err := http.DefaultClient.Do(simReq); err != nil {
		t.Error(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "keeps no replica logs") {
			t.Errorf("a simulated replica's log = %d %s; want 404 saying its node keeps none", resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, logURL, nil)
	req.Header.Set("Authorization", "Bearer "+env["MP_SEARCH_KEY"])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("search reads risk's replica log: %v %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	env = readEnvFile(d.EnvFile)
	predictThroughGateway(t, env)
	cliOnTheDemo(t, env)
	waitRequestStats(t, env["MP_CLICKHOUSE_URL"])
	waitCPUNodes(t, env)
	waitDemoTraffic(t, env["MP_CLICKHOUSE_URL"])
	<-d.Backfilled
	week := backfilled(t, env["MP_CLICKHOUSE_URL"])
	if week.usageHours != 7*24 || week.statsHours != 7*24 || week.sampleHours < 7*24-8 || week.windows != 2*7*288 ||
		week.usageRows < 3*7*86400 || week.samples < 7*100 {
		t.Errorf("backfilled %+v; want a week of each, a row per replica slot and second, 5-minute windows and some samples", week)
	}
	// The demo endpoints date from the backfilled week, so the drift
	// report's default reference (the last 7 days) holds its samples.
	var drift struct {
		Reference struct{ From time.Time }
		Samples   int `json:"reference_samples"`
	}
	if body := get(t, env["MP_API"]+"/endpoints/fraud-scoring/drift", env["MP_RISK_KEY"]); json.Unmarshal([]byte(body), &drift) != nil ||
		drift.Reference.From.After(time.Now().Add(-6*24*time.Hour)) || drift.Samples < int(week.samples)/2 {
		t.Errorf("fraud-scoring's drift report: %s; want a reference from a week ago with the backfilled samples (%d)", body, week.samples)
	}
	// A search key that is not search-admin's, as an older dev's keys were
	// not, put in dev.env: the next run replaces and revokes it.
	resp, body := postJSON(t, env["MP_API"]+"/api-keys", env["MP_ADMIN_KEY"], `{"name":"not the demo user's","team":"search","role":"admin"}`)
	var planted struct {
		Key string `json:"key"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal([]byte(body), &planted) != nil || planted.Key == "" {
		t.Fatalf("create a search key as the platform admin: %d %s", resp.StatusCode, body)
	}
	stop()
	if out, _ := exec.Command("pgrep", "-f", dir).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("child processes left behind after stop: pids %s", out)
	}
	envText, err := os.ReadFile(d.EnvFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.EnvFile, bytes.ReplaceAll(envText, []byte(env["MP_SEARCH_KEY"]), []byte(planted.Key)), 0o600); err != nil {
		t.Fatal(err)
	}

	secondStart := time.Now()
	d, stop = startDev(t, stateDir, 0)
	defer stop()
	again := readEnvFile(d.EnvFile)
	if again["MP_RISK_KEY"] != env["MP_RISK_KEY"] {
		t.Errorf("second run changed MP_RISK_KEY; want the working key kept")
	}
	if again["MP_SEARCH_KEY"] == planted.Key {
		t.Errorf("second run kept a search key search-admin did not make")
	}
	if body := get(t, again["MP_API"]+"/me", again["MP_SEARCH_KEY"]); !strings.Contains(body, `"owner":"search-admin@example.com"`) {
		t.Errorf("GET /me with the second run's MP_SEARCH_KEY: %s; want owner search-admin@example.com", body)
	}
	me, _ := http.NewRequest(http.MethodGet, again["MP_API"]+"/me", nil)
	me.Header.Set("Authorization", "Bearer "+planted.Key)
	if resp, err := http.DefaultClient.Do(me); err != nil || resp.Body.Close() != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /me with the replaced key: %v, %v; want 401, the key revoked", resp, err)
	}
	if body := get(t, again["MP_API"]+"/models/fraud-detector/versions", again["MP_RISK_KEY"]); !strings.Contains(body, `"v24"`) {
		t.Errorf("second run lost data: %s", body)
	}
	// The agents' replicas died with the first run; the second run's agents
	// start them again from their state files.
	waitServing(t, again, "fraud-scoring", again["MP_RISK_KEY"], 2, busapi.ProfileCPU)
	<-d.Backfilled
	if got := backfilled(t, again["MP_CLICKHOUSE_URL"]); got != week {
		t.Errorf("the second run backfilled again: %+v, was %+v", got, week)
	}
	assertNoDemoTraffic(t, again, secondStart)
}

// scrapeTargetsOnTheDemo reads the admin listener's service discovery as
// Prometheus does (http_sd: a JSON list of targets and labels): the demo's
// two built-in CPU replicas of fraud-scoring v23 are listed with their
// endpoint, version, team, node and runtime, each target answers its
// __metrics_path__ with the runtime's metrics, and the simulated
// support-chat, which exports none, is not listed.
func scrapeTargetsOnTheDemo(t *testing.T, adminURL string) {
	t.Helper()
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(get(t, adminURL+"/sd/runtimes", "")), &groups); err != nil {
		t.Fatalf("service discovery answer: %v", err)
	}
	fraud := 0
	for _, g := range groups {
		l := g.Labels
		if l["endpoint"] == "support-chat" {
			t.Errorf("service discovery lists simulated support-chat: %+v", g)
		}
		if l["endpoint"] != "fraud-scoring" {
			continue
		}
		if l["version"] == "v23" {
			fraud++
		}
		if len(g.Targets) != 1 || l["team"] != "risk" || l["version"] == "" || l["replica"] == "" || l["runtime"] != "builtin" ||
			!strings.HasPrefix(l["node"], "cpu-node-") || l["__metrics_path__"] != "/metrics" {
			t.Errorf("fraud-scoring target = %+v; want one address with team risk, its version and replica, runtime builtin, a CPU node and /metrics", g)
			continue
		}
		if body := get(t, "http://"+g.Targets[0]+l["__metrics_path__"], ""); !strings.Contains(body, "nv_inference_request_success") {
			t.Errorf("target %s serves no Triton-named runtime metrics: %.300s", g.Targets[0], body)
		}
	}
	if fraud != 2 {
		t.Errorf("service discovery lists %d replicas of fraud-scoring v23, want 2: %+v", fraud, groups)
	}
}

// cliOnTheDemo runs the command-line client as a user does after `source
// .modelplane/dev.env`: MP_API and MP_API_KEY as dev wrote them list the
// demo's endpoint, and a payment sent as a row (the feature values in
// feature_names order) through MP_GATEWAY is scored as the same payment
// sent as an object.
func cliOnTheDemo(t *testing.T, env map[string]string) {
	t.Helper()
	run := func(argv ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := cli.Run(context.Background(), argv, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
			ConfigDir: t.TempDir()}); code != 0 {
			t.Fatalf("modelplane %v with dev.env: exit %d\n%s%s", argv, code, out.String(), errb.String())
		}
		return out.String()
	}
	if env["MP_API_KEY"] != env["MP_RISK_KEY"] {
		t.Errorf("dev.env MP_API_KEY is not the risk admin's key")
	}
	if out := run("endpoints", "list", "-o", "json"); !strings.Contains(out, `"fraud-scoring"`) {
		t.Errorf("modelplane endpoints list with dev.env:\n%s\nwant fraud-scoring", out)
	}
	object := run("predict", "fraud-scoring", "-o", "json", "-d",
		`{"instances":[{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":9500}]}`)
	row := run("predict", "fraud-scoring", "-o", "json", "-d", `{"instances":[[1250,"electronics","NG",3,4,9500]]}`)
	score := func(out string) any {
		var a struct {
			Predictions []map[string]any `json:"predictions"`
		}
		if err := json.Unmarshal([]byte(out), &a); err != nil || len(a.Predictions) != 1 {
			t.Fatalf("predict answered %s (%v)", out, err)
		}
		return a.Predictions[0]["score"]
	}
	if score(object) != score(row) {
		t.Errorf("the demo scores the payment %v as an object and %v as a row; want the same", score(object), score(row))
	}
}

// waitCPUNodes waits until both CPU nodes report ready with their cores and
// memory and no GPU.
func waitCPUNodes(t *testing.T, env map[string]string) {
	t.Helper()
	var last string
	wait.Eventually(t, 60*time.Second, func() bool {
		last = get(t, env["MP_API"]+"/nodes", env["MP_ADMIN_KEY"])
		var nodes struct {
			Items []struct {
				Name     string `json:"name"`
				State    string `json:"state"`
				GPUCount int    `json:"gpu_count"`
				CPUCores int    `json:"cpu_cores"`
				MemoryMB int    `json:"memory_mb"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(last), &nodes); err != nil {
			t.Fatalf("GET /nodes: %v: %s", err, last)
		}
		ready := 0
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Name, "cpu-node-") && n.State == "ready" && n.GPUCount == 0 && n.CPUCores == 1 && n.MemoryMB == 1024 {
				ready++
			}
		}
		return ready == 2
	}, "want cpu-node-01 and -02 ready with 1 core and 1024 MiB each: %v", wait.Show(func() any { return last }))
}

// waitDemoTraffic waits until request_stats holds support-chat completions
// the test did not send: the demo traffic's (the test sends one stream).
func waitDemoTraffic(t *testing.T, url string) {
	t.Helper()
	ch, err := ingest.OpenClickHouse(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var chats, predicts uint64
	wait.Eventually(t, 60*time.Second, func() bool {
		if err := ch.QueryRow(t.Context(), `SELECT sumIf(requests, endpoint = 'support-chat'), sumIf(requests, endpoint = 'fraud-scoring')
			FROM request_stats WHERE gateway != 'demo-backfill'`).Scan(&chats, &predicts); err != nil {
			t.Fatal(err)
		}
		return chats >= 5 && predicts >= 250
	}, "request_stats holds %v; want the demo traffic's requests beside the test's own",
		wait.Show(func() any { return fmt.Sprintf("%d chats and %d predictions", chats, predicts) }))
}

// backfillCounts are the backfilled rows in ClickHouse.
type backfillCounts struct {
	usageHours, statsHours, sampleHours uint64
	usageRows, windows, samples         uint64
}

func backfilled(t *testing.T, url string) backfillCounts {
	t.Helper()
	ch, err := ingest.OpenClickHouse(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var c backfillCounts
	for _, q := range []struct {
		sql        string
		days, rows *uint64
	}{
		{"SELECT uniqExact(toStartOfHour(ts)), count() FROM gpu_usage WHERE batch_id LIKE 'demo-backfill/%'", &c.usageHours, &c.usageRows},
		{"SELECT uniqExact(toStartOfHour(window_start)), count() FROM request_stats WHERE gateway = 'demo-backfill'", &c.statsHours, &c.windows},
		{"SELECT uniqExact(toStartOfHour(ts)), count() FROM prediction_samples WHERE request_id LIKE 'demo-backfill/%'", &c.sampleHours, &c.samples},
	} {
		if err := ch.QueryRow(t.Context(), q.sql).Scan(q.days, q.rows); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// assertNoDemoTraffic checks that a dev run without demo traffic sent
// nothing through its gateway: one request sent by hand is, once its
// statistics are in ClickHouse, the only request since the run began.
func assertNoDemoTraffic(t *testing.T, env map[string]string, since time.Time) {
	t.Helper()
	ch, err := ingest.OpenClickHouse(t.Context(), env["MP_CLICKHOUSE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var sent bool
	var requests uint64
	wait.Eventually(t, 60*time.Second, func() bool {
		if !sent {
			req, _ := http.NewRequest(http.MethodPost, env["MP_GATEWAY"]+"/v1/endpoints/support-chat/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`))
			req.Header.Set("Authorization", "Bearer "+env["MP_SEARCH_KEY"])
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				sent = resp.StatusCode == http.StatusOK
			}
			return false
		}
		if err := ch.QueryRow(t.Context(), `SELECT sum(requests) FROM request_stats WHERE gateway != 'demo-backfill'
			AND window_start >= toDateTime(?)`, since.Unix()).Scan(&requests); err != nil {
			t.Fatal(err)
		}
		return requests >= 1
	}, "the request sent by hand never reached request_stats")
	if requests != 1 {
		t.Errorf("%d requests through the gateway since the run without demo traffic began; want only the one sent by hand", requests)
	}
}

// waitServing waits until the endpoint has n ready replicas of the given
// allocation profile, each answering its readiness probe over HTTP.
func waitServing(t *testing.T, env map[string]string, name, key string, n int, profile string) {
	t.Helper()
	var last string
	wait.Eventually(t, 90*time.Second, func() bool {
		last = get(t, env["MP_API"]+"/endpoints/"+name, key)
		var e struct {
			Status   string
			Replicas []struct{ State, Addr, Profile, Node string }
		}
		if err := json.Unmarshal([]byte(last), &e); err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, r := range e.Replicas {
			if r.State == "ready" && r.Profile == profile {
				resp, err := http.Get("http://" + r.Addr + "/v2/health/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ready++
					}
				}
			}
		}
		return e.Status == "ready" && ready == n && len(e.Replicas) == n
	}, "%s not served by %d ready %s replicas: %v", name, n, profile, wait.Show(func() any { return last }))
}

func get(t *testing.T, url, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b.String())
	}
	return b.String()
}

// waitMetered waits until ClickHouse holds priced GPU-seconds of both demo
// endpoints, and checks that the hourly rollup is fed.
func waitMetered(t *testing.T, url string) {
	t.Helper()
	ch, err := ingest.OpenClickHouse(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	// The rollup is fed with each insert's blocks, after the raw rows of a
	// block are visible: a query between the two (the backfill's week is
	// being inserted) sees raw rows and no rollup yet, so both are waited
	// for. The ingest tests prove rollup == raw exactly; here the rollup
	// must simply be fed.
	var seconds, cost, endpoints, rolled uint64
	wait.Eventually(t, 60*time.Second, func() bool {
		if err := ch.QueryRow(t.Context(), `SELECT count(), sum(rate_uusd_per_hour) FROM gpu_usage
			WHERE endpoint IN ('fraud-scoring', 'support-chat') AND team IN ('risk', 'search')`).Scan(&seconds, &cost); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueryRow(t.Context(), `SELECT uniqExact(endpoint) FROM gpu_usage`).Scan(&endpoints); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueryRow(t.Context(), `SELECT sum(gpu_seconds) FROM gpu_usage_hourly`).Scan(&rolled); err != nil {
			t.Fatal(err)
		}
		return endpoints == 2 && seconds >= 6 && cost > 0 && rolled > 0
	}, "ClickHouse holds %v; want both demo endpoints metered and priced, and the hourly rollup fed",
		wait.Show(func() any {
			return fmt.Sprintf("%d GPU-seconds of %d endpoints costing %d, %d in the rollup", seconds, endpoints, cost, rolled)
		}))
}

// waitRoute waits until the endpoint's entry in KV mp_routes lists n ready
// replicas of the version, each answering its readiness probe: what a
// gateway would route to.
func waitRoute(t *testing.T, nc0 bus.ClientConfig, endpoint, version string, n int) {
	t.Helper()
	opts, err := nc0.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(nc0.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	var last busapi.Route
	wait.Eventually(t, 30*time.Second, func() bool {
		e, err := kv.Get(t.Context(), endpoint)
		if err != nil {
			return false
		}
		if err := json.Unmarshal(e.Value(), &last); err != nil {
			t.Fatal(err)
		}
		for _, v := range last.Versions {
			if v.Name != version || v.Weight != 100 || len(v.Replicas) != n {
				continue
			}
			serving := 0
			for _, r := range v.Replicas {
				if resp, err := http.Get("http://" + r.Addr + "/v2/health/ready"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						serving++
					}
				}
			}
			if serving == n {
				return true
			}
		}
		return false
	}, "mp_routes/%s = %v; want %d ready replicas of %s at weight 100", endpoint, wait.Show(func() any { return last }), n, version)
	// The gateway validates and samples from the same entry.
	if last.SamplingRate != 1 || !strings.Contains(string(last.InputSchema), "merchant_category") || len(last.FeatureNames) != len(fraud.FeatureNames()) {
		t.Fatalf("mp_routes/%s lacks the model's schema, features or the sampling rate: %+v", endpoint, last)
	}
}

// predictThroughGateway sends a prediction and a streamed chat completion
// through the dev gateway with the dev.env keys, as the README shows.
// postJSON posts body as JSON with key and returns the answer, read.
func postJSON(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

func predictThroughGateway(t *testing.T, env map[string]string) {
	t.Helper()
	if env["MP_GATEWAY"] == "" {
		t.Fatalf("dev.env lacks MP_GATEWAY: %v", env)
	}
	post := func(path, key, body string) (*http.Response, string) {
		return postJSON(t, env["MP_GATEWAY"]+path, key, body)
	}
	// The key's entry reaches the gateway through the outbox and NATS.
	// Two different payments, as the README's curl sends them: an ordinary
	// one and one the planted rule makes near-certain fraud.
	const payments = `{"instances":[` +
		`{"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2},` +
		`{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":9500}]}`
	var resp *http.Response
	var body string
	wait.Eventually(t, 30*time.Second, func() bool {
		resp, body = post("/v1/endpoints/fraud-scoring/predict", env["MP_RISK_KEY"], payments)
		return resp.StatusCode == http.StatusOK
	}, "predict through the gateway never answered 200: %v", wait.Show(func() any { return body }))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"predictions"`) || resp.Header.Get("X-Model-Version") != "v23" {
		t.Fatalf("predict through the gateway = %d %s (X-Model-Version %q)", resp.StatusCode, body, resp.Header.Get("X-Model-Version"))
	}
	// The scores are v23's own: runtime/xgboost on the version's file,
	// which the demo/fraud tests hold to the real xgboost.
	var got struct {
		Predictions []struct {
			Score float64 `json:"score"`
			Label string  `json:"label"`
		} `json:"predictions"`
	}
	var in struct {
		Instances []map[string]any `json:"instances"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || json.Unmarshal([]byte(payments), &in) != nil || len(got.Predictions) != 2 {
		t.Fatalf("predict answered %s: %v", body, err)
	}
	score, err := demoFraudScorer()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got.Predictions {
		want := score(in.Instances[i])
		if math.Abs(p.Score-want.Score) > 1e-5 || p.Label != want.Label {
			t.Errorf("payment %d scored %v %s through the gateway; v23 itself says %v %s", i, p.Score, p.Label, want.Score, want.Label)
		}
	}
	if got.Predictions[1].Score-got.Predictions[0].Score < 0.5 || got.Predictions[1].Label != "fraud" {
		t.Errorf("scores %+v: the fraudulent payment should score far above the ordinary one", got.Predictions)
	}
	// fraud-scoring samples 5 % of its predictions: 200 more make a sample
	// all but certain (1 - 0.95^200).
	for range 200 {
		if resp, body := post("/v1/endpoints/fraud-scoring/predict", env["MP_RISK_KEY"],
			`{"instances":[{"amount":12,"merchant_category":"travel","country":"FR","hour_of_day":9,"account_age_days":20,"distance_km":850}]}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("predict = %d %s", resp.StatusCode, body)
		}
	}
	if resp, body := post("/v1/endpoints/fraud-scoring/predict", env["MP_RISK_KEY"],
		`{"instances":[{"amount":-1,"merchant_category":"travel","country":"FR","hour_of_day":9,"account_age_days":20,"distance_km":850}]}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "amount") {
		t.Fatalf("a negative amount through the gateway = %d %s, want 400 naming the path", resp.StatusCode, body)
	}
	if resp, body := post("/v1/endpoints/fraud-scoring/predict", env["MP_SEARCH_KEY"], `{"instances":[{}]}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another team's endpoint through the gateway = %d %s, want 404", resp.StatusCode, body)
	}
	resp, body = post("/v1/endpoints/support-chat/chat/completions", env["MP_SEARCH_KEY"],
		`{"messages":[{"role":"user","content":"where is my parcel?"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":8}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"usage"`) || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Fatalf("streamed chat through the gateway = %d %s", resp.StatusCode, body)
	}
	// The demo shares search's support-chat with risk (docs/sharing.md):
	// risk's key calls it through the gateway and finds it shared.
	if resp, body := post("/v1/endpoints/support-chat/chat/completions", env["MP_RISK_KEY"],
		`{"messages":[{"role":"user","content":"is this payment fraud?"}],"max_tokens":4}`); resp.StatusCode != http.StatusOK {
		t.Errorf("risk calls the support-chat search shared with it = %d %s, want 200", resp.StatusCode, body)
	}
	if body := get(t, env["MP_API"]+"/shared", env["MP_RISK_KEY"]); !strings.Contains(body, `"support-chat"`) || !strings.Contains(body, `"owner":"search"`) {
		t.Errorf("risk's shared-with-me = %s, want search's support-chat", body)
	}
}

// waitRequestStats waits until the gateway's statistics of the requests
// predictThroughGateway sent are in ClickHouse request_stats, and a sampled
// prediction with its features is in prediction_samples.
func waitRequestStats(t *testing.T, url string) {
	t.Helper()
	ch, err := ingest.OpenClickHouse(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var predicts, streams, samples uint64
	wait.Eventually(t, 30*time.Second, func() bool {
		if err := ch.QueryRow(t.Context(), `SELECT sumIf(requests, endpoint = 'fraud-scoring' AND version = 'v23'),
			sumIf(streams, endpoint = 'support-chat' AND version = 'v42') FROM request_stats`).Scan(&predicts, &streams); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueryRow(t.Context(), `SELECT count() FROM prediction_samples WHERE endpoint = 'fraud-scoring' AND version = 'v23'
			AND has(feature_names, 'amount')`).Scan(&samples); err != nil {
			t.Fatal(err)
		}
		return predicts >= 1 && streams >= 1 && samples >= 1
	}, "request_stats and prediction_samples hold %v; want a fraud-scoring request, a support-chat stream and a fraud-scoring sample",
		wait.Show(func() any { return fmt.Sprintf("%d requests, %d streams, %d samples", predicts, streams, samples) }))
}
