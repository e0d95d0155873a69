package replica

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := Config{ReplicaID: "r1", Version: "v1", Task: TaskClassification, Profile: json.RawMessage(classifierProfile)}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"valid classifier", func(*Config) {}, ""},
		{"valid regressor", func(c *Config) { c.Task, c.Profile = TaskRegression, json.RawMessage(regressorProfile) }, ""},
		{"valid llm", func(c *Config) { c.Task, c.Profile, c.Engine = TaskLLM, json.RawMessage(llmProfile), newTestEngine() }, ""},
		{"classifier with an llm profile", func(c *Config) { c.Profile = json.RawMessage(llmProfile) }, "LLM profile"},
		{"regressor with an llm profile", func(c *Config) { c.Task, c.Profile = TaskRegression, json.RawMessage(llmProfile) }, "LLM profile"},
		{"llm with a classifier profile and an engine", func(c *Config) { c.Task, c.Engine = TaskLLM, newTestEngine() }, "not an LLM profile"},
		{"unknown key", func(c *Config) { c.Profile = json.RawMessage(`{"scores":{"mean":0.5,"sd":0.1}}`) }, `"scores"`},
		{"key in the wrong case", func(c *Config) { c.Profile = json.RawMessage(`{"Error_Rate":0.1}`) }, `"Error_Rate"`},
		{"unknown nested key", func(c *Config) { c.Profile = json.RawMessage(`{"latency_ms":{"p50":1,"p95":3}}`) }, `"p95"`},
		{"empty profile", func(c *Config) { c.Profile = nil }, ""},
		{"no replica id", func(c *Config) { c.ReplicaID = "" }, "replica id"},
		{"no version", func(c *Config) { c.Version = "" }, "version"},
		{"unknown task", func(c *Config) { c.Task = "ranking" }, "task"},
		{"llm with a classifier profile and no engine", func(c *Config) { c.Task = TaskLLM }, "not an LLM profile"},
		{"negative load delay", func(c *Config) { c.LoadDelay = -time.Second }, "load delay"},
		{"profile not json", func(c *Config) { c.Profile = json.RawMessage(`{`) }, "sim profile"},
		{"p99 below p50", func(c *Config) { c.Profile = json.RawMessage(`{"latency_ms":{"p50":10,"p99":5}}`) }, "latency_ms"},
		{"error rate above 1", func(c *Config) { c.Profile = json.RawMessage(`{"error_rate":1.5}`) }, "error_rate"},
		{"score mean outside (0,1)", func(c *Config) { c.Profile = json.RawMessage(`{"score":{"mean":1.2,"sd":0.1}}`) }, "score"},
		{"score sd zero", func(c *Config) { c.Profile = json.RawMessage(`{"score":{"mean":0.5,"sd":0}}`) }, "score"},
		{"negative class share", func(c *Config) { c.Profile = json.RawMessage(`{"class_balance":{"a":-1,"b":2}}`) }, "class_balance"},
		{"class listed twice", func(c *Config) { c.Profile = json.RawMessage(`{"class_balance":{"a":0.5,"a":0.5}}`) }, "twice"},
		{"class balance not an object", func(c *Config) { c.Profile = json.RawMessage(`{"class_balance":[1]}`) }, "object"},
		{"negative value sd", func(c *Config) { c.Task, c.Profile = TaskRegression, json.RawMessage(`{"value":{"mean":1,"sd":-1}}`) }, "value"},
		{"regressor falling back to a bad score", func(c *Config) { c.Task, c.Profile = TaskRegression, json.RawMessage(`{"score":{"mean":1,"sd":-1}}`) }, "score"},
		{"class shares adding up to 0", func(c *Config) { c.Profile = json.RawMessage(`{"class_balance":{"a":0,"b":0}}`) }, "class_balance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tt.edit(&cfg)
			_, err := New(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("New() error = %v; want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("New() error = %v; want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestHealthReadinessAndDrain(t *testing.T) {
	t.Parallel()
	const load, drain = 200 * time.Millisecond, 1500 * time.Millisecond
	// The load and drain delays run on a clock the test moves; answers
	// take no time (latency 0), so only those two delays wait on it.
	clock := newClock(t, time.Unix(6_000_000, 0))
	s, err := New(Config{ReplicaID: "r1", Version: "v23", Task: TaskClassification, Clock: clock,
		Profile: json.RawMessage(`{"latency_ms":{"p50":0,"p99":0},"score":{"mean":0.3,"sd":0.2}}`), LoadDelay: load, DrainDelay: drain})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	base := "http://" + addr.String()
	c := newClient(t)

	if got := get(t, c, base+"/v2/health/live"); got != http.StatusOK {
		t.Errorf("live while loading = %d; want 200", got)
	}
	if got := get(t, c, base+"/v2/health/ready"); got != http.StatusServiceUnavailable {
		t.Errorf("ready while loading = %d; want 503", got)
	}
	if got, h, _ := post(t, c, base+"/predict", `{"instances":[1]}`); got != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Errorf("predict while loading = %d (Retry-After %q); want 503 with Retry-After", got, h.Get("Retry-After"))
	}
	// Not ready a millisecond before the load delay ends; ready at its end.
	timerSet(t, clock)
	clock.Advance(load - time.Millisecond).MustWait(t.Context())
	if got := get(t, c, base+"/v2/health/ready"); got != http.StatusServiceUnavailable {
		t.Errorf("ready 1 ms before the load delay ended = %d; want 503", got)
	}
	clock.Advance(time.Millisecond).MustWait(t.Context())
	wait.Eventually(t, 10*time.Second, func() bool { return get(t, c, base+"/v2/health/ready") == http.StatusOK }, "not ready after the load delay")
	if got, _, _ := post(t, c, base+"/predict", `{"instances":[1]}`); got != http.StatusOK {
		t.Errorf("predict when ready = %d; want 200", got)
	}

	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	wait.Eventually(t, 10*time.Second, func() bool { return !s.Ready() }, "waiting for draining")
	if got := get(t, c, base+"/v2/health/ready"); got != http.StatusServiceUnavailable {
		t.Errorf("ready while draining = %d; want 503", got)
	}
	if got := get(t, c, base+"/v2/health/live"); got != http.StatusOK {
		t.Errorf("live while draining = %d; want 200", got)
	}
	if got, _, _ := post(t, c, base+"/predict", `{"instances":[1]}`); got != http.StatusOK {
		t.Errorf("predict while draining = %d; want 200 (still served until the listener closes)", got)
	}
	// Stop serves for the drain delay, then returns.
	timerSet(t, clock)
	clock.Advance(drain - time.Millisecond).MustWait(t.Context())
	select {
	case <-stopped:
		t.Fatal("Stop returned before the drain delay ended")
	default:
	}
	clock.Advance(time.Millisecond).MustWait(t.Context())
	wait.Eventually(t, 10*time.Second, func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	}, "Stop did not return after the drain delay")
	c.CloseIdleConnections()
	if _, err := c.Get(base + "/v2/health/live"); err == nil {
		t.Error("live answered after Stop; want the connection refused")
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	t.Run("context cancel stops", func(t *testing.T) {
		t.Parallel()
		s, err := New(Config{ReplicaID: "r1", Version: "v1", Task: TaskLLM, Engine: newTestEngine()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		addr, err := s.Start(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		c := newClient(t)
		wait.Eventually(t, 10*time.Second, func() bool {
			c.CloseIdleConnections()
			resp, err := c.Get("http://" + addr.String() + "/v2/health/live")
			if err == nil {
				resp.Body.Close()
			}
			return err != nil
		}, "waiting for listener closed")
		s.Stop() // waits for the loop; a second Stop is harmless
	})
	t.Run("start twice fails", func(t *testing.T) {
		t.Parallel()
		s, _ := startReplica(t, Config{Task: TaskClassification})
		if _, err := s.Start(t.Context(), "127.0.0.1:0"); err == nil {
			t.Error("second Start succeeded; want an error")
		}
	})
	t.Run("stop before start", func(t *testing.T) {
		t.Parallel()
		s, err := New(Config{ReplicaID: "r1", Version: "v1", Task: TaskRegression})
		if err != nil {
			t.Fatal(err)
		}
		s.Stop()
		if _, err := s.Start(t.Context(), "127.0.0.1:0"); err == nil {
			t.Error("Start after Stop succeeded; want an error")
		}
	})
	t.Run("bad address", func(t *testing.T) {
		t.Parallel()
		s, err := New(Config{ReplicaID: "r1", Version: "v1", Task: TaskRegression})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Start(t.Context(), "256.0.0.1:x"); err == nil {
			t.Error("Start on a bad address succeeded")
		}
	})
}

func TestRoutesAndMethods(t *testing.T) {
	t.Parallel()
	_, clf := startReady(t, Config{Task: TaskClassification, Profile: json.RawMessage(classifierProfile)})
	_, llm := startReady(t, Config{Task: TaskLLM, Engine: newTestEngine()})
	c := newClient(t)
	tests := []struct {
		name, method, url string
		want              int
		wantAllow         string
	}{
		{"predict by GET", http.MethodGet, clf + "/predict", http.StatusMethodNotAllowed, "POST"},
		{"chat by GET", http.MethodGet, llm + "/v1/chat/completions", http.StatusMethodNotAllowed, "POST"},
		{"ready by POST", http.MethodPost, clf + "/v2/health/ready", http.StatusMethodNotAllowed, "GET"},
		{"chat on a classifier", http.MethodPost, clf + "/v1/chat/completions", http.StatusNotFound, ""},
		{"predict on an llm", http.MethodPost, llm + "/predict", http.StatusNotFound, ""},
		{"unknown route", http.MethodGet, clf + "/nope", http.StatusNotFound, ""},
		{"stats", http.MethodGet, llm + "/v2/stats", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, tt.url, strings.NewReader(`{}`))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.want)
			}
			if got := resp.Header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q; want %q", got, tt.wantAllow)
			}
			if tt.want >= 400 {
				var p problem
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type = %q; want application/problem+json", ct)
				}
				if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.Status != tt.want {
					t.Errorf("problem body = %+v, %v; want status %d", p, err, tt.want)
				}
			}
		})
	}
}

func TestStopCutsWhatOutlivesTheDrain(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	s, base := startReady(t, Config{Task: TaskLLM, Engine: eng, DrainTimeout: 100 * time.Millisecond})
	c := newClient(t)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4000,"stream":true}`))
		if err == nil {
			_, err = readSSE(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	wait.Eventually(t, 10*time.Second, func() bool { return eng.Stats().Running == 1 }, "waiting for generation running")
	s.Stop()
	if _, used := eng.sawCancel("chatcmpl-r1-1"); used != 0 {
		t.Errorf("pages used after Stop = %d; want 0", used)
	}
	if ok, _ := eng.sawCancel("chatcmpl-r1-1"); !ok {
		t.Error("engine saw no cancel for the cut generation")
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the cut stream ended cleanly; want an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client never saw the stream end")
	}
}
