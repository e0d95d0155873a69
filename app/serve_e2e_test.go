package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/agent/cache"
	"modelplane/agent/process"
	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/egress"
	"modelplane/endpoint"
	"modelplane/gateway"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
	"modelplane/registry"
	"modelplane/tenant"
)

// trainScript trains a binary XGBoost classifier with the real library on
// data with a planted rule, saves it as JSON and prints xgboost's own
// scores for the rows it is given on stdin.
const trainScript = `
import json, sys
import numpy as np
import xgboost as xgb
rs = np.random.RandomState(7)
X = rs.uniform(0, 1, size=(2000, 3)).astype(np.float32)
y = ((X[:, 0] > 0.6) & (X[:, 2] < 0.5)).astype(int)
b = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3}, xgb.DMatrix(X, label=y), 20)
b.save_model(sys.argv[1])
rows = np.array(json.load(sys.stdin), dtype=np.float32)
print(json.dumps([float(p) for p in b.predict(xgb.DMatrix(rows))]))
`

// TestUploadedXGBoostModelServedOnACPUNode is the real serving path end to
// end: an XGBoost model trained by the real library is uploaded, its
// endpoint placed on a CPU node, whose agent fetches and verifies the file
// from the control plane and runs the built-in runtime (the modelplane
// binary) as a child process; the gateway's answers are the scores
// xgboost itself gives the same transactions.
func TestUploadedXGBoostModelServedOnACPUNode(t *testing.T) {
	t.Parallel()
	if r := serveUploadedModel(t, serving{agent: processNode}); r.ServerName != "" {
		t.Errorf("routed %+v: a node's replica names no server name of its own", r)
	}
}

// servingEnv is what an agent of the serving test needs: the modelplane
// binary, the control plane's API with the agents' token, NATS.
type servingEnv struct {
	bin, api, token, nats string
	log                   *slog.Logger
}

// processNode is a CPU node agent whose process driver runs the built-in
// runtime as child processes on files its cache fetched.
func processNode(t *testing.T, e servingEnv) *agent.Agent {
	t.Helper()
	bin, token, log := e.bin, e.token, e.log
	ctx := context.Background()
	state := t.TempDir()
	drv, err := process.New(process.Config{Self: bin, StateDir: filepath.Join(state, "process"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		drv.Close(ctx)
	})
	cc, err := cache.New(cache.Config{Dir: filepath.Join(state, "cache"), URL: e.api, Token: token, Log: log,
		Egress: &egress.Policy{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(e.nats, natstest.Agent(t, "cpu-1")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	a, err := agent.New(agent.Config{Node: "cpu-1", CPUCores: 2, MemoryMB: 4096, StateDir: state, Lease: 15 * time.Second,
		Heartbeat: time.Second, Driver: drv, Cache: cc}, anc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)

	return a
}

// serving is how serveUploadedModel serves: agent starts the agent that
// runs the replica; replicaTLS, when set, is the gateway's (it calls
// replicas over https, verifying them with it); refused says the gateway
// must refuse the replica's certificate rather than be answered.
type serving struct {
	agent      func(*testing.T, servingEnv) *agent.Agent
	replicaTLS *tls.Config
	refused    bool
}

// serveUploadedModel uploads a real XGBoost model and calls it through the
// gateway on a replica the agent that s starts. It returns the replica's
// entry in the routing table the gateway served from.
func serveUploadedModel(t *testing.T, s serving) busapi.RouteReplica {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		// The runtime runs as nobody when the test runs as root, and must
		// reach the binary.
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := modelplaneBinary(t)
	rows := [][]float64{{0.9, 0.1, 0.2}, {0.1, 0.5, 0.9}}
	modelFile := filepath.Join(dir, "fraud.json")
	in, _ := json.Marshal(rows)
	train := exec.Command("/usr/bin/python3", "-c", trainScript, modelFile)
	train.Stdin = bytes.NewReader(in)
	out, err := train.Output()
	if err != nil {
		t.Fatalf("train with xgboost (run scripts/install-deps.sh test): %v", err)
	}
	var want []float64
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("xgboost's scores %q: %v", out, err)
	}
	if math.Abs(want[0]-want[1]) < 0.5 {
		t.Fatalf("xgboost scores %v: the two transactions should differ clearly", want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := NewLogger("error")
	pool := pgtest.New(t)
	ch := chtest.New(t)
	ns, nc := natstest.Connect(t)
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: ch, NC: nc}, controlplane.Config{Log: log, ArtifactDir: t.TempDir(), MaxUploadBytes: 16 << 20,
		RuntimeBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	const token = "agent-token-for-the-serving-test"
	api := httptest.NewServer(NewHTTP(cp, HTTPOptions{AgentToken: token}).Handler())
	t.Cleanup(api.Close)

	if _, err := cp.Tenant.CreateTeam(ctx, system, "risk", "risk"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: "risk", Name: "fraud", Task: "classification",
		FeatureNames: []string{"amount", "age", "distance"}}); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(modelFile)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(file)
	manifest, _ := json.Marshal(map[string]string{"model.json": hex.EncodeToString(sum[:])})
	sample := json.RawMessage(fmt.Sprintf(`{"amount":%g,"age":%g,"distance":%g}`, rows[0][0], rows[0][1], rows[0][2]))
	v, err := cp.Registry.RegisterVersion(ctx, system, "fraud", registry.VersionSpec{Name: "v1", Runtime: "xgboost",
		Resources: registry.Resources{CPUCores: 1, MemoryMB: 512},
		Serving:   registry.Serving{Output: registry.ServingOutput{Classes: []string{"legit", "fraud"}}, SampleInputs: []json.RawMessage{sample}}}, manifest, func(u *artifact.Upload) error {
		return u.Add(context.Background(), "model.json", bytes.NewReader(file))
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.Format != "xgboost-json" {
		t.Fatalf("format %q, want xgboost-json", v.Format)
	}
	// The control plane validates the upload in the background with the
	// same binary, before the version may take traffic.
	wait.Eventually(t, 2*time.Minute, func() bool {
		v, err = cp.Registry.Version(ctx, system, "fraud", "v1")
		return err == nil && v.Status != registry.StatusRegistered
	}, "the version was never validated: %v", wait.Show(func() any { return v.Validation }))
	if v.Status != registry.StatusValidated {
		t.Fatalf("status %q (%+v), want validated", v.Status, v.Validation)
	}
	if _, err := cp.Endpoints.Create(ctx, system, endpoint.Spec{Name: "fraud-scoring", Model: "fraud", Version: "v1",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	key, _, err := cp.Tenant.CreateKey(ctx, system, tenant.KeyRequest{Name: "caller", Team: "risk", Role: auth.RoleEngineer})
	if err != nil {
		t.Fatal(err)
	}

	a := s.agent(t, servingEnv{bin: bin, api: api.URL, token: token, nats: ns.ClientURL(), log: log})

	gnc, err := nats.Connect(ns.ClientURL(), natstest.Gateway(t, "gw-1")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gnc.Close)
	g, err := gateway.New(gateway.Config{StateDir: t.TempDir(), MaxOutstandingPerReplica: gateway.DefaultMaxOutstandingPerReplica,
		ReplicaTLS: s.replicaTLS}, gnc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	gw := serveGateway(t, g.Handler())

	body := fmt.Sprintf(`{"instances":[{"amount":%g,"age":%g,"distance":%g},{"amount":%g,"age":%g,"distance":%g}]}`,
		rows[0][0], rows[0][1], rows[0][2], rows[1][0], rows[1][1], rows[1][2])
	var got struct {
		Predictions []struct {
			Score float64 `json:"score"`
			Label string  `json:"label"`
		} `json:"predictions"`
	}
	// routed is the replica's entry in the routing table, as the relay
	// published it for gateways.
	routed := func() busapi.RouteReplica {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, busapi.BucketRoutes)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, "fraud-scoring")
		if err != nil {
			t.Fatal(err)
		}
		var rt busapi.Route
		if err := json.Unmarshal(e.Value(), &rt); err != nil {
			t.Fatal(err)
		}
		if len(rt.Versions) != 1 || len(rt.Versions[0].Replicas) != 1 {
			t.Fatalf("route %+v, want one version with one replica", rt)
		}
		return rt.Versions[0].Replicas[0]
	}
	var last string
	var status int
	wait.Eventually(t, 3*time.Minute, func() bool {
		req, _ := http.NewRequest(http.MethodPost, gw+"/v1/endpoints/fraud-scoring/predict", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		last, status = fmt.Sprintf("%d %s", resp.StatusCode, buf.String()), resp.StatusCode
		if s.refused {
			// 503 while no replica is routed; the first call to the
			// routed replica fails its handshake (after which the
			// gateway may eject it, 503 again).
			return status == http.StatusBadGateway
		}
		return status == http.StatusOK && json.Unmarshal(buf.Bytes(), &got) == nil
	}, "the gateway never answered the uploaded model as wanted (refused %v): %v", s.refused, wait.Show(func() any { return last }))
	if s.refused {
		return routed()
	}
	if len(got.Predictions) != len(want) {
		t.Fatalf("%d predictions, want %d: %s", len(got.Predictions), len(want), last)
	}
	for i, p := range got.Predictions {
		if math.Abs(p.Score-want[i]) > 1e-5 {
			t.Errorf("transaction %d: score %v, xgboost says %v", i, p.Score, want[i])
		}
		if wantLabel := map[bool]string{true: "fraud", false: "legit"}[want[i] >= 0.5]; p.Label != wantLabel {
			t.Errorf("transaction %d: label %q, want %q by the version's classes", i, p.Label, wantLabel)
		}
	}
	st := a.Status()
	if st.Cache != nil && st.Cache.Misses != 1 {
		t.Errorf("cache status %+v, want one version downloaded", st.Cache)
	}
	// The runtime's own part of the cold start, load and warm-up, reaches
	// the heartbeat from its metrics (the cache tests cover the download).
	wait.Eventually(t, time.Minute, func() bool {
		st = a.Status()
		return len(st.Replicas) == 1 && st.Replicas[0].LoadMS > 0 && st.Replicas[0].WarmupMS > 0
	}, "replica cold start not reported: %v", wait.Show(func() any { return st.Replicas }))
	return routed()
}
