package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/internal/wait"
	"modelplane/serveapi"
)

// predictReply is an answer as a client reads it, each prediction raw.
type predictReply = serveapi.PredictResponse[json.RawMessage]

func TestPredictDeterministic(t *testing.T) {
	t.Parallel()
	cfg := Config{Task: TaskClassification, Profile: json.RawMessage(classifierProfile), Seed: 7}
	_, a := startReady(t, cfg)
	_, b := startReady(t, cfg)
	other := cfg
	other.Seed = 8
	_, c := startReady(t, other)
	client := newClient(t)

	body := `{"instances":[{"amount":12.5,"merchant_category":"grocery","country":"DE"},{"amount":900,"merchant_category":"travel","country":"US"}]}`
	reordered := `{ "instances": [ {"country":"DE", "amount":12.5, "merchant_category":"grocery"},
		{"merchant_category":"travel","country":"US","amount":900} ] }`
	predict := func(base, body string) []string {
		code, h, raw := post(t, client, base+"/predict", body)
		if code != http.StatusOK {
			t.Fatalf("predict = %d %s", code, raw)
		}
		if got := h.Get("X-Model-Version"); got != "v23" {
			t.Errorf("X-Model-Version = %q; want v23", got)
		}
		r := decode[predictReply](t, raw)
		if r.ModelVersion != "v23" || len(r.Predictions) != 2 {
			t.Fatalf("reply = %s; want model_version v23 and 2 predictions", raw)
		}
		out := make([]string, len(r.Predictions))
		for i, p := range r.Predictions {
			out[i] = string(p)
		}
		return out
	}
	first := predict(a, body)
	tests := []struct {
		name, base, body string
		wantSame         bool
	}{
		{"same replica again", a, body, true},
		{"another replica, same seed", b, body, true},
		{"keys reordered, whitespace", a, reordered, true},
		{"another seed", c, body, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := predict(tt.base, tt.body)
			if same := slices.Equal(got, first); same != tt.wantSame {
				t.Errorf("predictions %v vs %v: same = %v; want %v", got, first, same, tt.wantSame)
			}
		})
	}
	// An instance is answered the same whatever it is batched with.
	single := predict(a, `{"instances":[{"amount":900,"merchant_category":"travel","country":"US"},1]}`)
	if single[0] != first[1] {
		t.Errorf("instance alone = %s; in the first batch = %s", single[0], first[1])
	}
}

// moments of a sample.
func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

func instances(from, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"id":%d}`, from+i)
	}
	return `{"instances":[` + strings.Join(parts, ",") + `]}`
}

func TestPredictDistributionsMatchProfile(t *testing.T) {
	t.Parallel()
	const requests, perRequest = 20, 500
	t.Run("classification", func(t *testing.T) {
		t.Parallel()
		_, base := startReady(t, Config{Task: TaskClassification, Profile: json.RawMessage(classifierProfile), Seed: 1})
		c := newClient(t)
		var scores []float64
		byLabel := map[string][]float64{}
		for i := range requests {
			code, _, raw := post(t, c, base+"/predict", instances(i*perRequest, perRequest))
			if code != http.StatusOK {
				t.Fatalf("predict = %d", code)
			}
			for _, p := range decode[predictReply](t, raw).Predictions {
				out := decode[serveapi.Prediction](t, p)
				score := set(t, out.Score, p)
				if score < 0 || score > 1 {
					t.Fatalf("score %v outside [0, 1]", score)
				}
				scores = append(scores, score)
				byLabel[out.Label] = append(byLabel[out.Label], score)
			}
		}
		n := float64(len(scores))
		mean, sd := meanSD(scores)
		fraud := float64(len(byLabel["fraud"])) / n
		legitMean, _ := meanSD(byLabel["legit"])
		fraudMean, _ := meanSD(byLabel["fraud"])
		checks := []struct {
			name      string
			got, want float64
			tol       float64
		}{
			{"score mean", mean, 0.3, 0.01},
			{"score sd", sd, 0.2, 0.01},
			{"fraud share", fraud, 0.3, 0.015},
			{"legit share", float64(len(byLabel["legit"])) / n, 0.7, 0.015},
		}
		for _, ch := range checks {
			if math.Abs(ch.got-ch.want) > ch.tol {
				t.Errorf("%s = %.4f; want %.2f ± %.3f", ch.name, ch.got, ch.want, ch.tol)
			}
		}
		if len(byLabel) != 2 {
			t.Errorf("labels = %v; want legit and fraud only", len(byLabel))
		}
		if fraudMean <= legitMean || slices.Min(byLabel["fraud"]) < slices.Max(byLabel["legit"]) {
			t.Errorf("fraud scores (mean %.3f) do not all sit above legit scores (mean %.3f)", fraudMean, legitMean)
		}
	})
	t.Run("regression", func(t *testing.T) {
		t.Parallel()
		_, base := startReady(t, Config{Task: TaskRegression, Profile: json.RawMessage(regressorProfile), Seed: 1})
		c := newClient(t)
		var values []float64
		for i := range requests {
			code, _, raw := post(t, c, base+"/predict", instances(i*perRequest, perRequest))
			if code != http.StatusOK {
				t.Fatalf("predict = %d", code)
			}
			for _, p := range decode[predictReply](t, raw).Predictions {
				values = append(values, set(t, decode[serveapi.Prediction](t, p).Value, p))
			}
		}
		mean, sd := meanSD(values)
		if math.Abs(mean-5) > 0.06 || math.Abs(sd-2) > 0.06 {
			t.Errorf("values: mean %.3f sd %.3f; want 5 ± 0.06 and 2 ± 0.06", mean, sd)
		}
	})
	t.Run("classification without classes", func(t *testing.T) {
		t.Parallel()
		_, base := startReady(t, Config{Task: TaskClassification, Profile: json.RawMessage(`{"score":{"mean":0.5,"sd":0.2}}`)})
		code, _, raw := post(t, newClient(t), base+"/predict", instances(0, 200))
		if code != http.StatusOK {
			t.Fatalf("predict = %d", code)
		}
		for _, p := range decode[predictReply](t, raw).Predictions {
			out := decode[serveapi.Prediction](t, p)
			score := set(t, out.Score, p)
			if want := map[bool]string{true: "positive", false: "negative"}[score >= 0.5]; out.Label != want {
				t.Fatalf("score %.3f labelled %q; want %q", score, out.Label, want)
			}
		}
	})
}

// hammer sends n single-instance predicts from workers goroutines and
// returns each one's status and client-side duration.
func hammer(t *testing.T, base string, n, workers int) ([]int, []time.Duration) {
	t.Helper()
	c := newClient(t)
	codes := make([]int, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				resp, err := c.Post(base+"/predict", "application/json", strings.NewReader(instances(i, 1)))
				if err != nil {
					t.Errorf("predict %d: %v", i, err)
					continue
				}
				var p problem
				if resp.StatusCode == http.StatusInternalServerError {
					if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.Status != 500 {
						t.Errorf("500 body: %+v, %v; want a problem", p, err)
					}
				}
				resp.Body.Close()
				codes[i], took[i] = resp.StatusCode, time.Since(start)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return codes, took
}

func TestPredictErrorShare(t *testing.T) {
	t.Parallel()
	const n = 1000
	s, base := startReady(t, Config{Task: TaskClassification, Seed: 3,
		Profile: json.RawMessage(`{"latency_ms":{"p50":0.2,"p99":1},"error_rate":0.2,"score":{"mean":0.3,"sd":0.2}}`)})
	codes, _ := hammer(t, base, n, 16)
	failed := 0
	for _, c := range codes {
		if c == http.StatusInternalServerError {
			failed++
		} else if c != http.StatusOK {
			t.Fatalf("status %d; want 200 or 500", c)
		}
	}
	if share := float64(failed) / n; math.Abs(share-0.2) > 0.04 {
		t.Errorf("error share = %.3f; want 0.20 ± 0.04", share)
	}
	// The same requests fail again: failures are drawn, not random.
	again, _ := hammer(t, base, n, 16)
	if !slices.Equal(again, codes) {
		t.Error("a second pass of the same requests failed a different set")
	}
	st := s.Stats()
	if st.Requests != 2*n || st.Errors != uint64(2*failed) {
		t.Errorf("stats requests %d errors %d; want %d and %d", st.Requests, st.Errors, 2*n, 2*failed)
	}
}

// TestPredictLatencyMatchesProfile runs in model time: one request at a
// time, the clock moving only to the end of the latency each one waits, so
// the replica's measured percentiles are exactly those of the drawn
// latencies.
func TestPredictLatencyMatchesProfile(t *testing.T) {
	t.Parallel()
	const n = 400
	clock := newClock(t, time.Unix(5_000_000, 0))
	autoAdvance(t, clock)
	s, base := startReady(t, Config{Task: TaskClassification, Seed: 5, Clock: clock,
		Profile: json.RawMessage(`{"latency_ms":{"p50":10,"p99":30},"score":{"mean":0.3,"sd":0.2}}`)})
	hammer(t, base, n, 1)

	// The latencies drawn for these very requests follow the profile...
	drawn := make([]time.Duration, n)
	for i := range drawn {
		inst := fmt.Appendf(nil, `{"id":%d}`, i)
		_, drawn[i] = s.model.outcome(newRand(5, hashBytes(5, inst)))
	}
	sorted := slices.Sorted(slices.Values(drawn))
	p50, p99 := sorted[n/2-1], sorted[n*99/100-1]
	if p50 < 9*time.Millisecond || p50 > 11*time.Millisecond || p99 < 22*time.Millisecond || p99 > 45*time.Millisecond {
		t.Errorf("drawn p50 %v p99 %v; want about 10ms and 30ms", p50, p99)
	}
	// ...and each was waited, exactly, on the replica's clock.
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if st := s.Stats(); st.LatencyP50Ms != ms(p50) || st.LatencyP99Ms != ms(p99) {
		t.Errorf("replica p50 %v ms p99 %v ms; want the drawn %v and %v", st.LatencyP50Ms, st.LatencyP99Ms, p50, p99)
	}
}

func TestPredictBadRequests(t *testing.T) {
	t.Parallel()
	_, base := startReady(t, Config{Task: TaskClassification, Profile: json.RawMessage(classifierProfile),
		MaxBodyBytes: 4096, MaxInstances: 10})
	c := newClient(t)
	tests := []struct {
		name, body string
		want       int
		wantDetail string
	}{
		{"malformed", `{"instances":[`, http.StatusBadRequest, "unexpected end"},
		{"not json", `hello`, http.StatusBadRequest, "malformed JSON"},
		{"not an object", `[1,2]`, http.StatusBadRequest, "wrong"},
		{"instances missing", `{"inputs":[1]}`, http.StatusBadRequest, "instances is required"},
		{"instances null", `{"instances":null}`, http.StatusBadRequest, "instances is required"},
		{"instances empty", `{"instances":[]}`, http.StatusBadRequest, "must not be empty"},
		{"instances not an array", `{"instances":{"a":1}}`, http.StatusBadRequest, "instances has the wrong type"},
		{"too many instances", instances(0, 11), http.StatusBadRequest, "at most 10"},
		{"two objects", `{"instances":[1]} {"instances":[2]}`, http.StatusBadRequest, "one JSON object"},
		{"too large", `{"instances":["` + strings.Repeat("x", 5000) + `"]}`, http.StatusRequestEntityTooLarge, "exceeds 4096 bytes"},
		{"empty body", ``, http.StatusBadRequest, "unexpected end"},
		{"extra keys are fine", `{"instances":[1],"parameters":{"k":1}}`, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, h, raw := post(t, c, base+"/predict", tt.body)
			if code != tt.want {
				t.Fatalf("status = %d (%s); want %d", code, raw, tt.want)
			}
			if tt.want == http.StatusOK {
				return
			}
			if ct := h.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q; want application/problem+json", ct)
			}
			if p := decode[problem](t, raw); p.Status != tt.want || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("problem = %+v; want status %d and detail with %q", p, tt.want, tt.wantDetail)
			}
		})
	}
}

// TestPredictClientGoneDuringLatency: a client that leaves while its
// request waits out its latency frees the handler at once. The replica's
// clock never moves, so the latency never ends: the handler can only
// return because the client left.
func TestPredictClientGoneDuringLatency(t *testing.T) {
	t.Parallel()
	s, base := startReady(t, Config{Task: TaskClassification, Clock: newClock(t, time.Unix(4_000_000, 0)),
		Profile: json.RawMessage(`{"latency_ms":{"p50":5000,"p99":5000},"score":{"mean":0.3,"sd":0.2}}`)})
	c := newClient(t)
	ctx, leave := context.WithCancel(t.Context())
	defer leave()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/predict", strings.NewReader(`{"instances":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	wait.Eventually(t, 10*time.Second, func() bool { return s.Stats().InFlight == 1 }, "the request never reached its latency")
	leave()
	if err := <-answered; err == nil {
		t.Fatal("predict answered before its 5s latency")
	}
	wait.Eventually(t, 10*time.Second, func() bool { return s.Stats().InFlight == 0 }, "the handler still holds the request after the client left")
}
