package cli_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestPredictThroughTheGateway calls the demo's real fraud model through
// a real gateway: objects and rows (the feature values in feature_names
// order) score the same, and the gateway's problems print with their
// field and exit code.
func TestPredictThroughTheGateway(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.gateway = s.startFraudGateway(t)
	risk := s.keys["risk-admin"]
	objects := `{"instances":[{"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2},
	{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":9500}]}`
	rows := filepath.Join(t.TempDir(), "rows.json")
	if err := os.WriteFile(rows, []byte(`{"instances":[[42.5,"grocery","US",14,800,3.2],[1250,"electronics","NG",3,4,9500]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		Predictions []map[string]any `json:"predictions"`
	}
	a := jsonOf[answer](t, s.run(t, risk, "predict", "fraud-scoring", "-d", objects, "-o", "json").ok(t, "predict objects"))
	b := jsonOf[answer](t, s.run(t, risk, "predict", "fraud-scoring", "-d", "@"+rows, "-o", "json").ok(t, "predict rows from a file"))
	if len(a.Predictions) != 2 || len(b.Predictions) != 2 {
		t.Fatalf("predictions %v and %v; want two each", a, b)
	}
	for i := range a.Predictions {
		if a.Predictions[i]["score"] != b.Predictions[i]["score"] || a.Predictions[i]["label"] != b.Predictions[i]["label"] {
			t.Errorf("payment %d: as an object %v, as a row %v; want the same", i, a.Predictions[i], b.Predictions[i])
		}
	}
	s.run(t, risk, "predict", "fraud-scoring", "-d", `{"instances":[[42.5,"grocery","US",14,800,"far"]]}`).
		want(t, "a row with a bad value", 1, "400", "instances/0/distance_km")
	s.run(t, risk, "predict", "nowhere", "-d", objects).want(t, "an unknown endpoint", 3, "404")
	s.run(t, risk, "predict", "fraud-scoring").want(t, "no body", 2, "-d")
	s.runEnv(t, map[string]string{"MP_API": s.url, "MP_API_KEY": risk}, "", "predict", "fraud-scoring", "-d", objects).
		want(t, "no gateway", 2, "MP_GATEWAY")
}

// TestContextsAndVersionWarning keeps two servers as contexts in a 0600
// file, switches between them, lets MP_API win over the current context
// and --context over MP_API, and warns once when the server's build is not
// the client's.
func TestContextsAndVersionWarning(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	risk, search := s.keys["risk-admin"], s.keys["search-admin"]
	none := map[string]string{}
	s.runEnv(t, none, "", "context", "set", "risk", "--api", s.url, "--key", risk).ok(t, "context set risk")
	s.runEnv(t, none, "", "context", "set", "search", "--api", s.url+"/api/v1/", "--key", search).ok(t, "context set search")
	fi, err := os.Stat(filepath.Join(s.cfgDir, "config.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config.json: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	who := func(env map[string]string, argv ...string) string {
		t.Helper()
		me := jsonOf[map[string]any](t, s.runEnv(t, env, "", append(argv, "me", "-o", "json")...).ok(t, "me"))
		teams, _ := me["teams"].([]any)
		if len(teams) != 1 {
			t.Fatalf("me = %v; want one team", me)
		}
		return teams[0].(map[string]any)["team"].(string)
	}
	if got := who(none); got != "search" {
		t.Errorf("after context set search: team %s; want search (set uses the context)", got)
	}
	s.runEnv(t, none, "", "context", "use", "risk").ok(t, "context use risk")
	if got := who(none); got != "risk" {
		t.Errorf("after context use risk: team %s", got)
	}
	if got := who(map[string]string{"MP_API": s.url, "MP_API_KEY": search}); got != "search" {
		t.Errorf("MP_API and MP_API_KEY over the current context: team %s; want search", got)
	}
	if got := who(map[string]string{"MP_API": s.url, "MP_API_KEY": search}, "--context", "risk"); got != "risk" {
		t.Errorf("--context over MP_API: team %s; want risk", got)
	}
	list := jsonOf[struct{ Items []map[string]any }](t, s.runEnv(t, none, "", "context", "list", "-o", "json").ok(t, "context list"))
	if len(list.Items) != 2 || list.Items[0]["current"] != "*" || list.Items[0]["name"] != "risk" {
		t.Errorf("context list = %v; want risk (current) and search", list.Items)
	}
	if b, _ := os.ReadFile(filepath.Join(s.cfgDir, "config.json")); strings.Contains(s.runEnv(t, none, "", "context", "list").stdout, risk) || !strings.Contains(string(b), risk) {
		t.Error("context list prints a key, or the file does not keep it")
	}
	s.runEnv(t, none, "", "context", "use", "prod").want(t, "an unknown context", 3, "prod")
	s.runEnv(t, none, "", "context", "delete", "search").ok(t, "context delete")

	r := s.runEnv(t, none, "v0.0.1-old", "models", "list")
	r.ok(t, "models list with an old client")
	if strings.Count(r.stderr, "warning") != 1 || !strings.Contains(r.stderr, "v0.0.1-old") {
		t.Errorf("stderr %q; want one warning naming both versions", r.stderr)
	}
	if r := s.runEnv(t, none, "", "models", "list"); strings.Contains(r.stderr, "warning") {
		t.Errorf("same build warned: %q", r.stderr)
	}
	v := s.runEnv(t, none, "v0.0.1-old", "version").ok(t, "version")
	if !strings.Contains(v, "client  v0.0.1-old") || !strings.Contains(v, "server  devel") {
		t.Errorf("version:\n%s\nwant the client's and the server's builds", v)
	}
}

// TestPushRetriesWithTheSameIdempotencyKey puts a proxy in front of the
// API that loses the answer to the first completion of the upload after
// the server has registered the version (a 502, as a load balancer
// gives): the client sends it again with the same key, the API replays
// the first registration, and there is one version, not two or a 409.
func TestPushRetriesWithTheSameIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	risk := s.keys["risk-admin"]
	s.run(t, risk, "models", "create", "scorer", "--task", "classification").ok(t, "models create")
	target, _ := url.Parse(s.url)
	var (
		mu   sync.Mutex
		keys []string
	)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodPost && strings.HasSuffix(resp.Request.URL.Path, "/complete") {
			mu.Lock()
			keys = append(keys, resp.Request.Header.Get("Idempotency-Key"))
			first := len(keys) == 1
			mu.Unlock()
			if first {
				_, _ = io.Copy(io.Discard, resp.Body)
				return io.ErrUnexpectedEOF // the answer is lost: 502
			}
		}
		return nil
	}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), safetensors("retry"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := s.runEnv(t, map[string]string{"MP_API": ps.URL, "MP_API_KEY": risk}, "", "versions", "push", "scorer", dir, "--name", "v1",
		"--runtime", "onnxruntime", "-o", "json")
	v := jsonOf[map[string]any](t, r.ok(t, "versions push through a lossy proxy"))
	if v["name"] != "v1" {
		t.Errorf("push answered %v; want v1", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("Idempotency-Keys sent %q; want the same key twice", keys)
	}
	if !strings.Contains(r.stderr, "retrying") {
		t.Errorf("stderr %q; want it to say it retried", r.stderr)
	}
	list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "versions", "list", "scorer", "-o", "json").ok(t, "versions list"))
	if len(list.Items) != 1 {
		t.Errorf("versions %v; want exactly one", list.Items)
	}
}

// TestCompletionScripts generates the bash, zsh and fish scripts and asks
// the completion engine they call for a noun's verbs and a flag's values.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	s := &stack{cfgDir: t.TempDir()}
	for shell, mark := range map[string]string{"bash": "complete -o default -F __start_modelplane modelplane", "zsh": "#compdef modelplane", "fish": "complete -c modelplane"} {
		out := s.runEnv(t, nil, "", "completion", shell).ok(t, "completion "+shell)
		if !strings.Contains(out, mark) || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s does not register modelplane (%q):\n%.300s", shell, mark, out)
		}
	}
	out := s.runEnv(t, nil, "", "__complete", "rollouts", "").ok(t, "__complete rollouts")
	for _, verb := range []string{"start", "list", "get", "approve", "reject", "rollback", "pause", "resume"} {
		if !strings.Contains(out, verb+"\t") {
			t.Errorf("rollouts completes without %s:\n%s", verb, out)
		}
	}
	if out := s.runEnv(t, nil, "", "__complete", "keys", "create", "ci", "--role", "").ok(t, "__complete --role"); !strings.Contains(out, "platform_admin") {
		t.Errorf("--role completes to:\n%s", out)
	}
}
