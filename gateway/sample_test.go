package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/promcheck"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// fakeModel is a predict replica that answers at once with one prediction
// per instance and extra content that must never reach a sample.
func fakeModel(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Instances []json.RawMessage `json:"instances"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		preds := make([]any, len(req.Instances))
		for i := range preds {
			if i%2 == 0 {
				preds[i] = map[string]any{"label": "legit", "score": 0.125, "explanation": "top-secret-answer"}
			} else {
				preds[i] = 0.75
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"predictions": preds, "model_version": "v1", "debug": "top-secret-answer"})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

const sampledBody = `{"instances":[{"amount":12.5,"country":"DE","name":"Alice Secret","flag":true},[900,"US"]]}`

// predictionsStream returns MP_PREDICTIONS and its state now.
func predictionsStream(t *testing.T, nc *nats.Conn) (jetstream.Stream, jetstream.StreamState) {
	t.Helper()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), busapi.StreamPredictions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s, info.State
}

// streamSample is a sample found in MP_PREDICTIONS and the raw message
// that carried it.
type streamSample struct {
	busapi.PredictionSample
	raw []byte
}

// streamSamples returns every sample in MP_PREDICTIONS, failing the test
// on a message off busapi.PredictionBatchSubject or not a batch.
func streamSamples(t *testing.T, nc *nats.Conn) []streamSample {
	t.Helper()
	s, state := predictionsStream(t, nc)
	var out []streamSample
	for seq := state.FirstSeq; seq <= state.LastSeq && state.Msgs > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		b, err := busapi.DecodeSamples(m.Data)
		if m.Subject != busapi.PredictionBatchSubject || err != nil || len(b.Samples) == 0 {
			t.Fatalf("message %d on %s is no batch of samples: %s", seq, m.Subject, m.Data)
		}
		for _, smp := range b.Samples {
			out = append(out, streamSample{PredictionSample: smp, raw: m.Data})
		}
	}
	return out
}

// sampleOf waits for the sample of request id in MP_PREDICTIONS.
func sampleOf(t *testing.T, nc *nats.Conn, id string) streamSample {
	t.Helper()
	var got streamSample
	wait.Eventually(t, 10*time.Second, func() bool {
		for _, smp := range streamSamples(t, nc) {
			if smp.ID == id {
				got = smp
				return true
			}
		}
		return false
	}, "waiting for the sample of request %s", id)
	return got
}

// settle waits until the gateway's sampler has published or dropped every
// sample offered to it, and the stream holds every one it published.
func settle(t *testing.T, e *env, g *gw) gateway.SampleCounters {
	t.Helper()
	var c gateway.SampleCounters
	var inStream uint64
	wait.Eventually(t, 10*time.Second, func() bool {
		c = g.Samples()
		_, state := predictionsStream(t, e.nc)
		inStream = state.Msgs
		return c.Published+c.Dropped == c.Offered && inStream == c.Messages
	}, "sampler not settled: %v", wait.Show(func() any { return fmt.Sprintf("%+v, %d in the stream", c, inStream) }))
	return c
}

func sampledRoute(endpoint string, rate float64, addr string) busapi.Route {
	rt := route(endpoint, "risk", "classification", 1, ver("v1", 100, addr))
	rt.FeatureNames, rt.SamplingRate = []string{"amount", "country", "flag", "missing"}, rate
	return rt
}

// TestSamplingRate sends 2,000 requests at a 10 percent rate and expects
// the samples within five standard deviations of 200; at rate 0 nothing is
// sampled.
func TestSamplingRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fakeModel(t)
	e.putRoute(t, sampledRoute("fraud", 0.1, addr))
	e.putRoute(t, sampledRoute("quiet", 0, addr))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	// Requests go to the handler itself: when one returns, its sample has
	// been offered, so settle sees every one.
	h := g.Handler()
	serve := func(endpoint string) int {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, predictPath(endpoint), strings.NewReader(sampledBody))
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		return serve("quiet") == http.StatusOK && serve("fraud") == http.StatusOK
	}, "waiting for routes")
	before := settle(t, e, g).Published

	send := func(endpoint string, n int) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					if code := serve(endpoint); code != http.StatusOK {
						t.Errorf("%s: status %d", endpoint, code)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	send("quiet", 500)
	c := settle(t, e, g)
	if c.Published != before || c.Dropped != 0 {
		t.Fatalf("rate 0: %+v, want nothing beyond %d published", c, before)
	}
	const n, p = 2000, 0.1
	send("fraud", n)
	c = settle(t, e, g)
	got := float64(c.Published - before)
	mean, sd := n*p, 13.4 // sqrt(2000 × 0.1 × 0.9)
	if c.Dropped != 0 || got < mean-5*sd || got > mean+5*sd {
		t.Fatalf("sampled %v of %d at %v (dropped %d); want %v ± %v", got, n, p, c.Dropped, mean, 5*sd)
	}
}

// TestSampleContent checks that a sample carries the request id, the
// configured features of each instance (objects by name, arrays by
// position) and each output, and nothing else of either body; and that an
// LLM sample carries the completion length.
func TestSampleContent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, sampledRoute("fraud", 1, fakeModel(t)))
	chat := route("chat", "risk", "llm", 1, ver("v9", 100, startReplica(t, "v9", replica.TaskLLM)))
	chat.SamplingRate = 1
	e.putRoute(t, chat)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("fraud"), key, sampledBody)
	if r.status != http.StatusOK {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	got := sampleOf(t, e.nc, r.header.Get("X-Request-Id"))
	for _, secret := range []string{"Alice", "top-secret", `"name"`, `"debug"`, "explanation", "model_version"} {
		if bytes.Contains(got.raw, []byte(secret)) {
			t.Fatalf("sample carries %q: %s", secret, got.raw)
		}
	}
	if got.ID != r.header.Get("X-Request-Id") || got.Endpoint != "fraud" || got.Team != "risk" || got.Version != "v1" ||
		got.Time == 0 || got.LatencyMS <= 0 {
		t.Fatalf("sample header fields: %+v", got)
	}
	want := []busapi.SampleInstance{
		{Num: []float64{12.5, 0, 1, 0}, Str: []string{"", "DE", "", ""}, Score: 0.125, Label: "legit"},
		{Num: []float64{900, 0, 0, 0}, Str: []string{"", "US", "", ""}, Score: 0.75},
	}
	if fmt.Sprint(got.FeatureNames) != "[amount country flag missing]" || fmt.Sprintf("%+v", got.Instances) != fmt.Sprintf("%+v", want) {
		t.Fatalf("features %v instances %+v; want %+v", got.FeatureNames, got.Instances, want)
	}

	for _, stream := range []bool{true, false} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+chatPath("chat"),
			strings.NewReader(fmt.Sprintf(`{"messages":[{"role":"user","content":"my card number is 4111"}],"max_tokens":6,"stream":%v}`, stream)))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
		cs := sampleOf(t, e.nc, resp.Header.Get("X-Request-Id"))
		if bytes.Contains(cs.raw, []byte("4111")) {
			t.Fatalf("chat sample carries the prompt: %s", cs.raw)
		}
		if cs.Tokens <= 0 || cs.Tokens > 6 || len(cs.Instances) != 0 {
			t.Fatalf("stream %v: chat sample %+v; want 1..6 tokens and no instances", stream, cs)
		}
	}
}

// TestMetricsAfterTraffic scrapes the admin /metrics after predictions and a
// stream, and checks that the public listener, which anyone reaches without
// credentials, does not serve them (they name every team's endpoints).
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, sampledRoute("fraud", 0, fakeModel(t)))
	e.putRoute(t, route("chat", "risk", "llm", 1, ver("v9", 100, startReplica(t, "v9", replica.TaskLLM))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for range 3 {
		if r := call(t, g.url, predictPath("fraud"), key, sampledBody); r.status != http.StatusOK {
			t.Fatalf("predict: %d", r.status)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+chatPath("chat"),
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	presp, err := http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	pbody, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != http.StatusNotFound || strings.Contains(string(pbody), "ml_serving_") {
		t.Errorf("public GET /metrics = %d, want 404 without metrics; body %.200s", presp.StatusCode, pbody)
	}
	mresp, err := http.Get(g.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`ml_serving_request_duration_seconds_count{endpoint="fraud",status_class="2xx",version="v1"} 3`,
		`ml_serving_platform_overhead_seconds_count{endpoint="fraud",version="v1"} 3`,
		`ml_serving_in_flight_requests{endpoint="fraud",version="v1"} 0`,
		`ml_serving_ttft_seconds_count{endpoint="chat",version="v9"} 1`,
		`ml_serving_inter_token_latency_seconds_count{endpoint="chat",version="v9"} 1`,
		`ml_serving_concurrent_streams{endpoint="chat",version="v9"} 0`,
		`ml_serving_tokens_total{endpoint="chat",version="v9"} 5`,
		`ml_serving_request_stats_dropped_total 0`,
		`ml_serving_prediction_samples_dropped_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	promcheck.Metrics(t, string(body))
}

// TestShadowSampledBesideItsRequest samples a request and its shadow call:
// both samples reach MP_PREDICTIONS under the request's id, one per
// version. When each sample was a message with the request id as its
// Nats-Msg-Id, JetStream kept whichever came first and dropped the other
// as a duplicate.
func TestShadowSampledBesideItsRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fakeModel(t)
	rt := sampledRoute("fraud", 1, addr)
	rt.Versions = append(rt.Versions, shadowOf("v2", 100, addr))
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("fraud"), key, sampledBody)
	if r.status != http.StatusOK {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	id := r.header.Get("X-Request-Id")
	var versions []string
	wait.Eventually(t, 10*time.Second, func() bool {
		versions = versions[:0]
		for _, smp := range streamSamples(t, e.nc) {
			if smp.ID == id {
				versions = append(versions, smp.Version)
			}
		}
		slices.Sort(versions)
		return slices.Equal(versions, []string{"v1", "v2"})
	}, "samples of request %s are of versions %v; want v1 and v2", id, wait.Show(func() any { return versions }))
}
