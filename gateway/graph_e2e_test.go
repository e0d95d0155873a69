package gateway_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/busapi"
	"modelplane/demo/fraud"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/onnx"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
)

// fraudRuntime serves one of the demo's real fraud versions (v23 XGBoost,
// v24 ONNX) with the built-in runtime and returns its address.
func fraudRuntime(t *testing.T, i int) string {
	t.Helper()
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	v := vs[i]
	dir := t.TempDir()
	cfg := v.Serving
	cfg.Model, cfg.Version = "fraud", v.Name
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v.File), v.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.Open(dir, map[string]runtime.Opener{"xgboost-json": xgboost.Load, "onnx": onnx.Load}, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// graphRoute is a graph endpoint's routing entry with one version per
// definition, as package route writes it.
func graphRoute(endpoint, team string, gen int64, versions ...busapi.RouteVersion) busapi.Route {
	return busapi.Route{Endpoint: endpoint, Team: team, Task: busapi.RouteTaskGraph, Generation: gen, Versions: versions}
}

func graphVer(name string, weight int, def string) busapi.RouteVersion {
	return busapi.RouteVersion{Name: name, Weight: weight, Replicas: []busapi.RouteReplica{}, Graph: json.RawMessage(def)}
}

const payments = `{"instances":[
 {"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2},
 {"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":9500}]}`

// graphAnswerBody is a graph's answer as a client reads it.
type graphAnswerBody struct {
	Predictions []map[string]any `json:"predictions"`
	Graph       struct {
		Version string `json:"version"`
		Partial bool   `json:"partial"`
		Skipped []struct {
			Node, Reason string
		} `json:"skipped"`
		Steps []struct {
			Node, Endpoint, Version string
			Status                  int
			LatencyMS               float64 `json:"latency_ms"`
		} `json:"steps"`
	} `json:"graph"`
}

func decodeGraph(t *testing.T, res result) graphAnswerBody {
	t.Helper()
	if res.status != http.StatusOK {
		t.Fatalf("graph answered %d %s; want 200", res.status, res.body)
	}
	var a graphAnswerBody
	if err := json.Unmarshal(res.body, &a); err != nil {
		t.Fatalf("graph answer %s: %v", res.body, err)
	}
	return a
}

// graphEnv is a gateway with the demo's two real fraud versions behind
// endpoints xgb (v23) and onnx (v24) of team risk, and a key of risk.
type graphEnv struct {
	*env
	g   *gw
	key string
	// xgb is the address of v23's runtime.
	xgb string
}

func newGraphEnv(t *testing.T, cfg gateway.Config, extra ...busapi.Route) *graphEnv {
	t.Helper()
	e := newEnv(t)
	xgb, onx := fraudRuntime(t, 0), fraudRuntime(t, 1)
	for _, r := range []busapi.Route{
		route("xgb", "risk", "classification", 1, ver("v23", 100, xgb)),
		route("onnx", "risk", "classification", 1, ver("v24", 100, onx)),
	} {
		r.InputSchema = fraud.InputSchema()
		e.putRoute(t, r)
	}
	for _, r := range extra {
		e.putRoute(t, r)
	}
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, cfg)
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	return &graphEnv{env: e, g: g, key: key, xgb: xgb}
}

// put publishes a graph route and waits until the gateway serves it.
func (ge *graphEnv) put(t *testing.T, r busapi.Route) {
	t.Helper()
	ge.putRoute(t, r)
	wait.Eventually(t, 10*time.Second, func() bool {
		gen, ok := ge.g.RouteGeneration(r.Endpoint)
		return ok && gen == r.Generation
	}, "waiting for route %s", r.Endpoint)
}

func (ge *graphEnv) predict(t *testing.T, endpoint, body string, hdr ...string) result {
	t.Helper()
	return call(t, ge.g.url, predictPath(endpoint), ge.key, body, hdr...)
}

func scores(t *testing.T, res result) []float64 {
	t.Helper()
	a := decodeGraph(t, res)
	out := make([]float64, len(a.Predictions))
	for i, p := range a.Predictions {
		out[i], _ = p["score"].(float64)
	}
	return out
}

// TestGraphNodesEndToEnd runs each node type through the real gateway over
// the demo's real XGBoost and ONNX fraud models, and compares each graph's
// answer with the steps called directly.
func TestGraphNodesEndToEnd(t *testing.T) {
	t.Parallel()
	var branch atomic.Int64 // the splitter's injected choice
	ge := newGraphEnv(t, gateway.Config{GraphIntn: func(n int) int { return int(branch.Load()) % n }})
	direct := func(endpoint, body string) []float64 { return scores(t, ge.predict(t, endpoint, body)) }
	xgb, onx := direct("xgb", payments), direct("onnx", payments)
	if xgb[0] == onx[0] {
		t.Fatalf("v23 and v24 scored the same %v; the test needs them apart", xgb[0])
	}

	t.Run("sequence feeds a mapped part of each answer on", func(t *testing.T) {
		// a scores the payment; b sees a's score as its distance; c sees
		// b's score as its account age.
		def := `{"entry":"seq","nodes":[
		 {"id":"seq","type":"sequence","steps":["a","b","c"]},
		 {"id":"a","type":"call","endpoint":"xgb","input":{"instances":["$request/instances/1"]}},
		 {"id":"b","type":"call","endpoint":"onnx","input":{"instances":[{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":"$a/predictions/0/score"}]}},
		 {"id":"c","type":"call","endpoint":"xgb","input":{"instances":[{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":"$input/predictions/0/score","distance_km":9500}]}}]}`
		ge.put(t, graphRoute("seq", "risk", 1, graphVer("g1", 100, def)))
		res := ge.predict(t, "seq", payments, gateway.GraphStepsHeader, "true")
		a := decodeGraph(t, res)
		if res.header.Get("X-Model-Version") != "g1" || len(a.Graph.Steps) != 3 {
			t.Fatalf("answer %s version %q; want g1 with 3 steps", res.body, res.header.Get("X-Model-Version"))
		}
		for i, want := range []struct{ node, endpoint, version string }{{"a", "xgb", "v23"}, {"b", "onnx", "v24"}, {"c", "xgb", "v23"}} {
			s := a.Graph.Steps[i]
			if s.Node != want.node || s.Endpoint != want.endpoint || s.Version != want.version || s.Status != 200 {
				t.Errorf("step %d = %+v; want %v answering 200", i, s, want)
			}
		}
		// The same chain by hand.
		sa := xgb[1]
		bBody, _ := json.Marshal(map[string]any{"instances": []any{map[string]any{"amount": 1250, "merchant_category": "electronics", "country": "NG", "hour_of_day": 3, "account_age_days": 4, "distance_km": sa}}})
		sb := direct("onnx", string(bBody))[0]
		cBody, _ := json.Marshal(map[string]any{"instances": []any{map[string]any{"amount": 1250, "merchant_category": "electronics", "country": "NG", "hour_of_day": 3, "account_age_days": sb, "distance_km": 9500}}})
		want := direct("xgb", string(cBody))[0]
		if got := a.Predictions[0]["score"]; got != want {
			t.Errorf("graph scored %v; the steps by hand %v", got, want)
		}
	})

	t.Run("ensemble combines its members", func(t *testing.T) {
		def := `{"entry":"ens","nodes":[
		 {"id":"ens","type":"ensemble","steps":["x","o"],"combine":"weighted_mean","weights":[3,1]},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
		ge.put(t, graphRoute("ens", "risk", 1, graphVer("g1", 100, def)))
		res := ge.predict(t, "ens", payments)
		var a struct{ Predictions []float64 }
		if err := json.Unmarshal(res.body, &a); err != nil || len(a.Predictions) != 2 {
			t.Fatalf("ensemble answered %d %s", res.status, res.body)
		}
		for i := range 2 {
			if want := (3*xgb[i] + onx[i]) / 4; math.Abs(a.Predictions[i]-want) > 1e-12 {
				t.Errorf("instance %d: %v; want the weighted mean %v", i, a.Predictions[i], want)
			}
		}
		vote := `{"entry":"ens","nodes":[
		 {"id":"ens","type":"ensemble","steps":["x","o","x2"],"combine":"vote","field":"label"},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"},{"id":"x2","type":"call","endpoint":"xgb"}]}`
		ge.put(t, graphRoute("ens", "risk", 2, graphVer("g2", 100, vote)))
		labels := ge.predict(t, "ens", payments)
		xl := decodeLabels(t, ge.predict(t, "xgb", payments))
		if got := decodeStrings(t, labels); strings.Join(got, ",") != strings.Join(xl, ",") {
			t.Errorf("vote of xgb, onnx, xgb = %v; want xgb's labels %v", got, xl)
		}
	})

	t.Run("switch takes the first case that holds", func(t *testing.T) {
		def := `{"entry":"sw","nodes":[
		 {"id":"sw","type":"switch","cases":[{"field":"request/instances/0/amount","op":"gt","value":1000,"then":"o"}],"default":"x"},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
		ge.put(t, graphRoute("sw", "risk", 1, graphVer("g1", 100, def)))
		small := `{"instances":[{"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2}]}`
		big := `{"instances":[{"amount":1250,"merchant_category":"electronics","country":"NG","hour_of_day":3,"account_age_days":4,"distance_km":9500}]}`
		if got := scores(t, ge.predict(t, "sw", small)); got[0] != xgb[0] {
			t.Errorf("a small payment scored %v; want xgb's %v", got, xgb[0])
		}
		if got := scores(t, ge.predict(t, "sw", big)); got[0] != onx[1] {
			t.Errorf("a big payment scored %v; want onnx's %v", got, onx[1])
		}
	})

	t.Run("splitter picks by the injected source", func(t *testing.T) {
		def := `{"entry":"sp","nodes":[
		 {"id":"sp","type":"splitter","branches":[{"weight":90,"node":"x"},{"weight":10,"node":"o"}]},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
		ge.put(t, graphRoute("sp", "risk", 1, graphVer("g1", 100, def)))
		branch.Store(89)
		if got := scores(t, ge.predict(t, "sp", payments)); got[0] != xgb[0] {
			t.Errorf("draw 89 of 100 scored %v; want the 90 branch, xgb's %v", got, xgb[0])
		}
		branch.Store(90)
		if got := scores(t, ge.predict(t, "sp", payments)); got[0] != onx[0] {
			t.Errorf("draw 90 of 100 scored %v; want the 10 branch, onnx's %v", got, onx[0])
		}
	})

	t.Run("router follows the model's answer", func(t *testing.T) {
		// xgb names the branch by its label of the first payment.
		def := `{"entry":"r","nodes":[
		 {"id":"r","type":"router","endpoint":"xgb","field":"predictions/0/label","routes":{"legit":"o","fraud":"x"}},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
		ge.put(t, graphRoute("rt", "risk", 1, graphVer("g1", 100, def)))
		one := `{"instances":[{"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2}]}`
		label := decodeLabels(t, ge.predict(t, "xgb", one))[0]
		want := map[string]float64{"legit": onx[0], "fraud": xgb[0]}[label]
		res := ge.predict(t, "rt", one, gateway.GraphStepsHeader, "true")
		a := decodeGraph(t, res)
		if got := a.Predictions[0]["score"]; got != want || len(a.Graph.Steps) != 2 {
			t.Errorf("router (xgb said %q) answered %s; want score %v after 2 steps", label, res.body, want)
		}
	})
}

func decodeLabels(t *testing.T, res result) []string {
	t.Helper()
	a := decodeGraph(t, res)
	out := make([]string, len(a.Predictions))
	for i, p := range a.Predictions {
		out[i], _ = p["label"].(string)
	}
	return out
}

func decodeStrings(t *testing.T, res result) []string {
	t.Helper()
	var a struct{ Predictions []string }
	if err := json.Unmarshal(res.body, &a); err != nil {
		t.Fatalf("answer %d %s: %v", res.status, res.body, err)
	}
	return a.Predictions
}

// TestGraphStepFailures: a hard step's 5xx is the graph's 502 naming the
// node; a soft step that times out (on the gateway's clock, while its
// replica holds the request until the test releases it) is left out and
// marked; an idempotent step is retried on 503.
func TestGraphStepFailures(t *testing.T) {
	t.Parallel()
	clk := newClock(t)
	got := make(chan struct{}, 4)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"predictions":[{"label":"slow","score":0.5}]}`))
	}))
	t.Cleanup(func() { close(release); slow.Close() })
	ge := newGraphEnv(t, gateway.Config{Clock: clk},
		route("dead", "risk", "classification", 1, ver("v1", 100, deadAddr(t))),
		route("slow", "risk", "classification", 1, ver("v1", 100, strings.TrimPrefix(slow.URL, "http://"))))

	t.Run("hard step 5xx is a 502 naming the node", func(t *testing.T) {
		def := `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["ok","broken"]},
		 {"id":"ok","type":"call","endpoint":"xgb"},{"id":"broken","type":"call","endpoint":"dead","idempotent":true,"retries":2}]}`
		ge.put(t, graphRoute("hard", "risk", 1, graphVer("g1", 100, def)))
		res := ge.predict(t, "hard", payments, gateway.GraphStepsHeader, "true")
		var p struct {
			Status     int    `json:"status"`
			Node       string `json:"node"`
			Endpoint   string `json:"step_endpoint"`
			StepStatus int    `json:"step_status"`
			Detail     string `json:"detail"`
		}
		if err := json.Unmarshal(res.body, &p); err != nil {
			t.Fatal(err)
		}
		if res.status != http.StatusBadGateway || p.Node != "broken" || p.Endpoint != "dead" || p.StepStatus != http.StatusServiceUnavailable ||
			!strings.HasPrefix(res.header.Get("Content-Type"), "application/problem+json") || !strings.Contains(p.Detail, `"broken"`) {
			t.Fatalf("graph answered %d %s; want 502 problem+json naming node broken (dead, 503)", res.status, res.body)
		}
	})

	t.Run("soft step timeout leaves a partial answer", func(t *testing.T) {
		def := `{"entry":"e","nodes":[{"id":"e","type":"ensemble","steps":["x","late"],"combine":"collect"},
		 {"id":"x","type":"call","endpoint":"xgb"},{"id":"late","type":"call","endpoint":"slow","soft":true,"timeout_ms":200}]}`
		ge.put(t, graphRoute("soft", "risk", 1, graphVer("g1", 100, def)))
		done := make(chan result, 1)
		go func() { done <- call(t, ge.g.url, predictPath("soft"), ge.key, payments) }()
		<-got // the slow step holds the request: its timeout decides now
		advance(t, clk, 200*time.Millisecond)
		res := <-done
		var a struct {
			Predictions [][]map[string]any
			Graph       struct {
				Partial bool
				Skipped []struct{ Node, Reason string }
			}
		}
		if err := json.Unmarshal(res.body, &a); err != nil || len(a.Predictions) != 2 || len(a.Predictions[0]) != 1 {
			t.Fatalf("answer %d %s (%v); want each payment's one collected prediction", res.status, res.body, err)
		}
		if !a.Graph.Partial || len(a.Graph.Skipped) != 1 || a.Graph.Skipped[0].Node != "late" || a.Graph.Skipped[0].Reason != "timeout" ||
			res.header.Get("X-Graph-Partial") != "true" {
			t.Fatalf("answer %s; want partial, late skipped for timeout", res.body)
		}
	})

	t.Run("hard step timeout is the graph's 502", func(t *testing.T) {
		def := `{"entry":"late","nodes":[{"id":"late","type":"call","endpoint":"slow","timeout_ms":200}]}`
		ge.put(t, graphRoute("hardlate", "risk", 1, graphVer("g1", 100, def)))
		done := make(chan result, 1)
		go func() { done <- call(t, ge.g.url, predictPath("hardlate"), ge.key, payments) }()
		<-got
		advance(t, clk, 200*time.Millisecond)
		res := <-done
		if res.status != http.StatusBadGateway || !strings.Contains(string(res.body), `"node":"late"`) || !strings.Contains(string(res.body), "timed out") {
			t.Fatalf("graph answered %d %s; want 502 naming late, timed out", res.status, res.body)
		}
	})

	t.Run("a graph calls a graph; a loop saved around validation ends", func(t *testing.T) {
		inner := `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"xgb"}]}`
		ge.put(t, graphRoute("inner", "risk", 1, graphVer("g1", 100, inner)))
		outer := `{"entry":"i","nodes":[{"id":"i","type":"call","endpoint":"inner"}]}`
		ge.put(t, graphRoute("outer", "risk", 1, graphVer("g1", 100, outer)))
		if res := ge.predict(t, "outer", payments); res.status != http.StatusOK || !strings.Contains(string(res.body), `"label"`) {
			t.Errorf("outer over inner over xgb: %d %s; want xgb's answer", res.status, res.body)
		}
		loop := `{"entry":"self","nodes":[{"id":"self","type":"call","endpoint":"loop"}]}`
		ge.put(t, graphRoute("loop", "risk", 1, graphVer("g1", 100, loop)))
		res := ge.predict(t, "loop", payments)
		if res.status != http.StatusBadGateway || !strings.Contains(string(res.body), "answered 508: graphs call graphs more than 8 deep") {
			t.Errorf("a graph calling itself: %d %s; want 502 down to the innermost 508", res.status, res.body)
		}
	})

	t.Run("a step takes its endpoint's rate limit, not a key's", func(t *testing.T) {
		lim := route("limited", "risk", "classification", 1, ver("v23", 100, ge.xgb))
		lim.RateLimitRPS, lim.RateLimitBurst = 0.001, 1
		ge.put(t, lim)
		def := `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"limited"}]}`
		ge.put(t, graphRoute("limitedgraph", "risk", 1, graphVer("g1", 100, def)))
		if res := ge.predict(t, "limitedgraph", payments); res.status != http.StatusOK {
			t.Fatalf("first call: %d %s; want 200", res.status, res.body)
		}
		res := ge.predict(t, "limitedgraph", payments)
		if res.status != http.StatusBadGateway || !strings.Contains(string(res.body), `"step_status":429`) || !strings.Contains(string(res.body), `"node":"x"`) {
			t.Errorf("second call within the step's limit of one: %d %s; want 502 naming x with the step's 429", res.status, res.body)
		}
	})

	t.Run("another team's graph is not found and its steps are its team's", func(t *testing.T) {
		other := ge.newKey(t, "search", "engineer", nil)
		wait.Eventually(t, 10*time.Second, func() bool {
			return call(t, ge.g.url, predictPath("nothing"), other, payments).status != http.StatusUnauthorized
		}, "waiting for search's key")
		if res := call(t, ge.g.url, predictPath("hard"), other, payments); res.status != http.StatusNotFound {
			t.Errorf("search calling risk's graph: %d; want 404", res.status)
		}
		// A graph of search calling risk's xgb: its step is search's call,
		// which may not reach risk's endpoint.
		def := `{"entry":"x","nodes":[{"id":"x","type":"call","endpoint":"xgb"}]}`
		ge.put(t, graphRoute("search-graph", "search", 1, graphVer("g1", 100, def)))
		res := call(t, ge.g.url, predictPath("search-graph"), other, payments)
		if res.status != http.StatusBadGateway || !strings.Contains(string(res.body), `"step_status":404`) {
			t.Errorf("search's graph over risk's endpoint: %d %s; want 502 with the step's 404", res.status, res.body)
		}
	})
}

// TestGraphTrace: a graph request's trace has one ml_serving.graph_step
// span per call, a child of the graph's ml_serving.request, naming the
// node, its endpoint and the version that answered; under each, the
// step's own request span, whose call reaches the replica in the same
// trace.
func TestGraphTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep := &tracedReplica{}
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, rep.start(t))))
	def := `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["first","second"]},
	 {"id":"first","type":"call","endpoint":"fraud-scoring"},{"id":"second","type":"call","endpoint":"fraud-scoring"}]}`
	e.putRoute(t, graphRoute("traced-graph", "risk", 1, graphVer("g1", 100, def)))
	key := e.newKey(t, "risk", "engineer", nil)
	exp := tracetest.NewInMemoryExporter()
	tp := memoryTracing(t, exp)
	g := startGateway(t, e.nc, gateway.Config{Tracer: tp})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("traced-graph"); return ok }, "waiting for the graph's route")

	r := call(t, g.url, predictPath("traced-graph"), key, predictBody)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	spans := flushed(t, tp, exp)
	var root tracetest.SpanStub
	steps := map[string]tracetest.SpanStub{}
	requests := map[string]tracetest.SpanStub{} // by parent span id
	for _, s := range spans {
		switch s.Name {
		case "ml_serving.request":
			if s.Parent.IsValid() {
				requests[s.Parent.SpanID().String()] = s
			} else {
				root = s
			}
		case "ml_serving.graph_step":
			for _, a := range s.Attributes {
				if a.Key == "graph.node" {
					steps[a.Value.AsString()] = s
				}
			}
		}
	}
	if !root.SpanContext.IsValid() || len(steps) != 2 {
		t.Fatalf("root %v, %d graph steps among %d spans; want a root and 2 steps", root.SpanContext.IsValid(), len(steps), len(spans))
	}
	for _, node := range []string{"first", "second"} {
		s := steps[node]
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("step %s is not a child of the graph's request span", node)
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["endpoint"] != "fraud-scoring" || attrs["version"] != "v23" || attrs["http.response.status_code"] != "200" {
			t.Errorf("step %s attributes %v; want endpoint, version v23 and 200", node, attrs)
		}
		if _, ok := requests[s.SpanContext.SpanID().String()]; !ok {
			t.Errorf("step %s has no request span of its own under it", node)
		}
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.parent) != 2 || !strings.Contains(rep.parent[0], root.SpanContext.TraceID().String()) {
		t.Errorf("the replica saw traceparents %v; want 2 calls in the graph's trace", rep.parent)
	}
}
