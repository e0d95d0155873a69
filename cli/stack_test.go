package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/app"
	"modelplane/auth"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/cli"
	"modelplane/controlplane"
	"modelplane/demo/fraud"
	"modelplane/gateway"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
	"modelplane/tenant"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

// stack is a real control plane (PostgreSQL, ClickHouse, the HTTP API as
// `server` and `dev` build it) with teams risk and search and a key per
// role, for the client to call.
type stack struct {
	url       string
	keys      map[string]string
	keyPrefix map[string]string
	artifacts string
	cfgDir    string
	gateway   string
	// handler is the API's handler, for a test that serves it again
	// (over TLS).
	handler http.Handler
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	s := &stack{keys: map[string]string{}, keyPrefix: map[string]string{}, artifacts: t.TempDir(), cfgDir: t.TempDir()}
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: chtest.New(t)}, controlplane.Config{Log: slog.New(slog.DiscardHandler),
		ArtifactDir: s.artifacts, MaxUploadBytes: 16 << 20, Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	s.handler = app.NewHTTP(cp, app.HTTPOptions{MaxUploadBytes: 16 << 20}).Handler()
	ts := httptest.NewServer(s.handler)
	t.Cleanup(ts.Close)
	s.url = ts.URL
	sys := auth.System("cli-test")
	for _, team := range []string{"risk", "search"} {
		if _, err := cp.Tenant.CreateTeam(ctx, sys, team, team); err != nil {
			t.Fatal(err)
		}
	}
	for name, req := range map[string]tenant.KeyRequest{
		"platform-admin": {Role: auth.RolePlatformAdmin},
		"finance":        {Role: auth.RoleFinance},
		"risk-admin":     {Team: "risk", Role: auth.RoleAdmin},
		"risk-viewer":    {Team: "risk", Role: auth.RoleViewer},
		"search-admin":   {Team: "search", Role: auth.RoleAdmin},
	} {
		req.Name = name
		raw, k, err := cp.Tenant.CreateKey(ctx, sys, req)
		if err != nil {
			t.Fatal(err)
		}
		s.keys[name], s.keyPrefix[name] = raw, k.Prefix
	}
	return s
}

// result is one run of the client.
type result struct {
	stdout, stderr string
	code           int
}

// run runs `modelplane argv...` with MP_API and MP_API_KEY set to key.
func (s *stack) run(t *testing.T, key string, argv ...string) result {
	t.Helper()
	return s.runEnv(t, map[string]string{"MP_API": s.url + "/api/v1", "MP_API_KEY": key, "MP_GATEWAY": s.gateway}, "", argv...)
}

// runEnv runs the client with exactly env as its environment.
func (s *stack) runEnv(t *testing.T, env map[string]string, version string, argv ...string) result {
	t.Helper()
	return s.runWith(t, cli.Env{Getenv: func(k string) string { return env[k] }, Version: version}, argv...)
}

// runAt runs the client as run does, with its clock at now.
func (s *stack) runAt(t *testing.T, key string, now time.Time, argv ...string) result {
	t.Helper()
	env := map[string]string{"MP_API": s.url + "/api/v1", "MP_API_KEY": key, "MP_GATEWAY": s.gateway}
	return s.runWith(t, cli.Env{Getenv: func(k string) string { return env[k] }, Now: func() time.Time { return now }}, argv...)
}

// runWith runs the client with env, its output captured and its
// configuration in the stack's directory.
func (s *stack) runWith(t *testing.T, env cli.Env, argv ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env.Stdout, env.Stderr, env.ConfigDir = &out, &errb, s.cfgDir
	code := cli.Run(t.Context(), argv, env)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok fails unless r exited 0, and returns its stdout.
func (r result) ok(t *testing.T, what string) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// want fails unless r exited code with stderr holding each of msgs.
func (r result) want(t *testing.T, what string, code int, msgs ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("%s: stderr %q does not say %q", what, r.stderr, m)
		}
	}
}

// jsonOf parses -o json output.
func jsonOf[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	return v
}

// startFraudGateway serves the demo's real XGBoost fraud model with the
// built-in runtime behind a real gateway that knows risk-admin's key, as
// the control plane's relay would publish them, and returns the gateway's
// URL.
func (s *stack) startFraudGateway(t *testing.T) string {
	t.Helper()
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	v23 := vs[0]
	dir := t.TempDir()
	cfg := v23.Serving
	cfg.Model, cfg.Version = "fraud-scoring", v23.Name
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v23.File), v23.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.Open(dir, map[string]runtime.Opener{"xgboost-json": xgboost.Load}, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	replica := httptest.NewServer(rt.Handler())
	t.Cleanup(replica.Close)
	return s.gatewayTo(t, busapi.Route{Endpoint: "fraud-scoring", Team: "risk", Task: "classification", Generation: 1,
		InputSchema: fraud.InputSchema(), FeatureNames: fraud.FeatureNames(),
		Versions: []busapi.RouteVersion{{Name: v23.Name, Weight: 100, Replicas: []busapi.RouteReplica{{ID: "r-1", Addr: strings.TrimPrefix(replica.URL, "http://")}}}}})
}

// gatewayTo starts a real gateway whose only route is route, and which
// knows risk's admin key; it returns the gateway's URL.
func (s *stack) gatewayTo(t *testing.T, route busapi.Route) string {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	routes, err := js.KeyValue(t.Context(), busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := js.KeyValue(t.Context(), busapi.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := json.Marshal(route)
	if _, err := routes.Put(t.Context(), route.Endpoint, rb); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(s.keys["risk-admin"]))
	kb, _ := json.Marshal(busapi.KeyEntry{Prefix: s.keyPrefix["risk-admin"], SHA256: hex.EncodeToString(sum[:]), Team: "risk", Role: string(auth.RoleAdmin)})
	if _, err := keys.Put(t.Context(), s.keyPrefix["risk-admin"], kb); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{StateDir: t.TempDir(), MaxOutstandingPerReplica: gateway.DefaultMaxOutstandingPerReplica}, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for the gateway's routes")
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(gw.Close)
	return gw.URL
}

// safetensors is a small valid safetensors file whose bytes depend on tag.
func safetensors(tag string) []byte {
	header := []byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"tag":"` + tag + `"}}`)
	var b bytes.Buffer
	n := uint64(len(header))
	for i := range 8 {
		b.WriteByte(byte(n >> (8 * i)))
	}
	b.Write(header)
	b.Write([]byte{0, 0, 128, 63})
	return b.Bytes()
}
