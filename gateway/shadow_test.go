package gateway_test

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// shadowOf is a shadow version: weight 0, pct percent of requests mirrored.
func shadowOf(name string, pct float64, addrs ...string) busapi.RouteVersion {
	v := ver(name, 0, addrs...)
	v.Shadow = pct
	return v
}

// readStats sums the windows the gateway published to MP_REQSTATS, per
// endpoint/version.
func readStats(t *testing.T, e *env, g *gw) map[string]*busapi.ReqStats {
	t.Helper()
	got := map[string]*busapi.ReqStats{}
	for _, m := range publishedStats(t, e.nc, int(g.Stats().Published)) {
		a := got[m.Endpoint+"/"+m.Version]
		if a == nil {
			a = &busapi.ReqStats{Endpoint: m.Endpoint, Version: m.Version}
			got[m.Endpoint+"/"+m.Version] = a
		}
		a.Count += m.Count
		a.Errors.Upstream += m.Errors.Upstream
		a.Errors.Timeout += m.Errors.Timeout
		a.Errors.Client += m.Errors.Client
		a.Streams += m.Streams
		a.Tokens += m.Tokens
	}
	return got
}

const primaryAnswer = `{"predictions":[0.1],"model_version":"v1"}`

// primaryServer answers every prediction at once.
func primaryServer(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(primaryAnswer))
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// TestShadowFailuresInvisibleToCallers mirrors every request to a shadow
// that fails (500s) or hangs: every caller still gets the primary's status,
// body and headers while the shadow holds its copy, the failing shadow's
// errors are counted in its own version's statistics, and the bounded
// worker pool, full of held copies, drops further copies and counts them
// instead of queueing.
func TestShadowFailuresInvisibleToCallers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"500s", "hanging"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var calls, marked atomic.Int64
			// The shadow holds every copy until release is closed, which
			// happens only after every caller has its answer: a caller
			// that waited on its shadow copy would never get one. A
			// hanging shadow never answers at all.
			release := make(chan struct{})
			shadow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if r.Header.Get(gateway.ShadowHeader) != "" {
					marked.Add(1)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				if mode == "hanging" {
					<-r.Context().Done()
					return
				}
				w.Header().Set("X-Shadow", "leaked")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error":"shadow broke"}`))
			}))
			t.Cleanup(shadow.Close)
			rt := route("fraud-scoring", "risk", "classification", 1,
				ver("v1", 100, primaryServer(t)), shadowOf("v2", 100, strings.TrimPrefix(shadow.URL, "http://")))
			// Longer than any test run: no held copy times out and frees
			// its worker.
			rt.TimeoutMS = 10 * 60 * 1000
			e.putRoute(t, rt)
			key := e.newKey(t, "risk", "engineer", nil)
			clk := newClock(t)
			const workers = 2
			g := startGateway(t, e.nc, gateway.Config{ID: "gw-shadow-" + mode, ShadowWorkers: workers, Clock: clk})
			wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

			const n = 40
			for i := range n {
				r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
				if r.status != http.StatusOK || string(r.body) != primaryAnswer {
					t.Fatalf("request %d: status %d body %s, want 200 %s", i, r.status, r.body, primaryAnswer)
				}
				if got := r.header.Get("X-Model-Version"); got != "v1" {
					t.Errorf("X-Model-Version = %q, want v1", got)
				}
				if got := r.header.Get("X-Shadow"); got != "" {
					t.Errorf("the shadow's header reached the caller: X-Shadow = %q", got)
				}
			}
			// Every caller was answered while the shadow held the copies
			// of the first two requests; the rest found no free worker.
			// (A copy counts as mirrored once its goroutine has a replica.)
			wait.Eventually(t, 10*time.Second, func() bool { return g.Shadows().Mirrored == workers }, "waiting for %d copies mirrored: %+v", workers, wait.Show(func() any { return g.Shadows() }))
			if s := g.Shadows(); s.Mirrored != workers || s.Dropped != n-workers || s.InFlight != workers {
				t.Fatalf("shadow counters %+v, want %d mirrored and in flight, %d dropped", s, workers, n-workers)
			}
			if mode == "hanging" {
				return
			}
			close(release)
			wait.Eventually(t, 10*time.Second, func() bool { return g.Shadows().InFlight == 0 }, "waiting for shadow copies done")
			if calls.Load() != workers || marked.Load() != workers {
				t.Errorf("shadow saw %d calls (%d marked), want %d, all marked %s", calls.Load(), marked.Load(), workers, gateway.ShadowHeader)
			}
			// One window holds the callers' requests and the mirrored ones.
			const want = n + workers
			wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == want }, "waiting for %d requests counted", want)
			advance(t, clk, gateway.DefaultStatsInterval)
			wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().PublishedRequests == want }, "waiting for statistics published")
			got := readStats(t, e, g)
			v1, v2 := got["fraud-scoring/v1"], got["fraud-scoring/v2"]
			if v1 == nil || v1.Count != n || v1.Errors.Upstream != 0 {
				t.Errorf("v1 statistics %+v, want %d requests without errors", v1, n)
			}
			if v2 == nil || v2.Count != workers || v2.Errors.Upstream != workers {
				t.Errorf("v2 statistics %+v, want its %d mirrored requests, all upstream errors", v2, workers)
			}
		})
	}
}

// countingTransport answers at once like instant and counts the calls per
// replica address and those marked as shadow copies.
type countingTransport struct {
	shadowAddr     string
	shadow, marked atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == c.shadowAddr {
		c.shadow.Add(1)
		if r.Header.Get(gateway.ShadowHeader) != "" {
			c.marked.Add(1)
		}
	}
	return instant{}.RoundTrip(r)
}

func TestShadowShareWithinBinomialBounds(t *testing.T) {
	t.Parallel()
	const n = 10000
	for _, pct := range []float64{5, 30} {
		t.Run(fmt.Sprintf("%g%%", pct), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.putRoute(t, route("fraud-scoring", "risk", "classification", 1,
				ver("stable", 100, "10.0.0.1:1"), shadowOf("next", pct, "10.0.0.9:1")))
			key := e.newKey(t, "risk", "engineer", nil)
			tr := &countingTransport{shadowAddr: "10.0.0.9:1"}
			// Enough workers that no copy is dropped: the share is the draw's.
			g := startGateway(t, e.nc, gateway.Config{Transport: tr, ShadowWorkers: n})
			wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
			h := g.Handler()
			for i := range n {
				req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, predictPath("fraud-scoring"), strings.NewReader(predictBody))
				req.Header.Set("Authorization", "Bearer "+key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 || w.Header().Get("X-Model-Version") != "stable" {
					t.Fatalf("request %d: status %d version %q, want 200 from stable", i, w.Code, w.Header().Get("X-Model-Version"))
				}
			}
			wait.Eventually(t, 10*time.Second, func() bool { return g.Shadows().InFlight == 0 }, "waiting for shadow copies done")
			s := g.Shadows()
			if s.Dropped != 0 || uint64(tr.shadow.Load()) != s.Mirrored || tr.marked.Load() != tr.shadow.Load() {
				t.Fatalf("counters %+v, shadow calls %d (%d marked), want none dropped and every copy marked", s, tr.shadow.Load(), tr.marked.Load())
			}
			p := pct / 100
			mean, sd := n*p, math.Sqrt(n*p*(1-p))
			if d := math.Abs(float64(s.Mirrored) - mean); d > 5*sd {
				t.Errorf("shadow at %g%% got %d of %d, want %.0f ± %.0f", pct, s.Mirrored, n, mean, 5*sd)
			}
		})
	}
}

// TestShadowStreamConsumedNotRelayed mirrors a streamed completion: the
// caller gets the primary's stream only, and the shadow's stream is read to
// its end upstream and measured (streams, tokens) for its own version.
func TestShadowStreamConsumedNotRelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("support-chat", "search", "llm", 1,
		ver("v1", 100, startReplica(t, "v1", replica.TaskLLM)), shadowOf("v2", 100, startReplica(t, "v2", replica.TaskLLM))))
	key := e.newKey(t, "search", "viewer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{ID: "gw-shadow-stream", Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	const streams = 3
	for range streams {
		r := call(t, g.url, chatPath("support-chat"), key, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`)
		if r.status != http.StatusOK || r.header.Get("X-Model-Version") != "v1" || !strings.HasSuffix(strings.TrimSpace(string(r.body)), "[DONE]") {
			t.Fatalf("status %d version %q body %q, want v1's whole stream", r.status, r.header.Get("X-Model-Version"), r.body)
		}
		if strings.Contains(string(r.body), `"v2"`) {
			t.Errorf("the shadow's stream reached the caller: %s", r.body)
		}
	}
	wait.Eventually(t, 10*time.Second, func() bool { return g.Shadows().InFlight == 0 }, "waiting for shadow copies done")
	if s := g.Shadows(); s.Mirrored != streams {
		t.Fatalf("shadow counters %+v, want %d mirrored", s, streams)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == 2*streams }, "waiting for %d requests counted", 2*streams)
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().PublishedRequests == 2*streams }, "waiting for statistics published")
	got := readStats(t, e, g)
	for _, v := range []string{"v1", "v2"} {
		if s := got["support-chat/"+v]; s == nil || s.Count != streams || s.Streams != streams || s.Tokens != streams*8 {
			t.Errorf("%s statistics %+v, want %d streams of 8 tokens", v, s, streams)
		}
	}
}

// TestShadowCallSentAsTheServedCall: a shadow's copy goes to its replica
// as the served call goes to the served version's, on the same client
// (the same header lines but the shadow mark), so that the latencies the
// judge compares are taken the same way.
func TestShadowCallSentAsTheServedCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	headers := func(seen chan<- []string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			names := slices.Sorted(maps.Keys(r.Header))
			select {
			case seen <- names:
			default:
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, primaryAnswer)
		}))
		t.Cleanup(s.Close)
		return s
	}
	served, shadowed := make(chan []string, 1), make(chan []string, 1)
	sv, sh := headers(served), headers(shadowed)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1,
		ver("v1", 100, strings.TrimPrefix(sv.URL, "http://")), shadowOf("v2", 100, strings.TrimPrefix(sh.URL, "http://"))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("status %d, want 200", r.status)
	}
	want := <-served // v1 answered, so it has seen the call
	got := wait.Receive(t, 10*time.Second, shadowed, "the shadow never got its copy")
	want = slices.Sorted(slices.Values(append(want, gateway.ShadowHeader)))
	if !slices.Equal(got, want) {
		t.Errorf("shadow call's header lines %v, want the served call's and the mark %v", got, want)
	}
}
