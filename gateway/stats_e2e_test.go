package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// TestStatsThroughTheGateway sends a known mix of requests through a real
// gateway and checks the MP_REQSTATS messages it publishes: requests
// counted per version, a replica that cannot be reached counted as an
// upstream error, requests refused before a version is chosen not counted,
// and for streamed completions the streams, tokens and TTFT/TPOT samples.
func TestStatsThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v42", 100, startReplica(t, "v42", replica.TaskLLM))))
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v23", 100, deadAddr(t))))
	searchKey := e.newKey(t, "search", "viewer", nil)
	riskKey := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{ID: "gw-e2e", Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	const streams, plain, down = 5, 3, 4
	for range streams {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+chatPath("support-chat"),
			strings.NewReader(`{"messages":[{"role":"user","content":"Where is my parcel?"}],"max_tokens":8,"stream":true}`))
		req.Header.Set("Authorization", "Bearer "+searchKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("streamed chat: status %d", resp.StatusCode)
		}
	}
	for range plain {
		if r := call(t, g.url, chatPath("support-chat"), searchKey, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`); r.status != http.StatusOK {
			t.Fatalf("plain chat: status %d", r.status)
		}
	}
	for range down {
		if r := call(t, g.url, predictPath("fraud-scoring"), riskKey, predictBody); r.status != http.StatusServiceUnavailable {
			t.Fatalf("predict on a dead replica: status %d, want 503", r.status)
		}
	}
	// Refused before a version is chosen: not a version's request.
	if r := call(t, g.url, chatPath("support-chat"), "", `{}`); r.status != http.StatusUnauthorized {
		t.Fatalf("no key: status %d", r.status)
	}
	if r := call(t, g.url, chatPath("support-chat"), searchKey, `{"messages":[{"role":"user","content":"hi"}]}`, "X-Model-Version", "v99"); r.status != http.StatusNotFound {
		t.Fatalf("unknown pin: status %d", r.status)
	}

	// Every request is counted before the window ends; then one window
	// publishes one message per series, with every request in it.
	const total = streams + plain + down
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == total }, "waiting for %d requests counted", total)
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Published == 2 }, "waiting for statistics published")
	if c := g.Stats(); c.PublishedRequests != total || c.Dropped != 0 || c.Pending != 0 {
		t.Fatalf("counters %+v, want %d requests published in 2 messages", c, total)
	}

	got := map[string]*busapi.ReqStats{}
	for _, m := range publishedStats(t, e.nc, int(g.Stats().Published)) {
		if m.Gateway != "gw-e2e" {
			t.Errorf("gateway %q, want gw-e2e", m.Gateway)
		}
		a := got[m.Endpoint+"/"+m.Version]
		if a == nil {
			a = &busapi.ReqStats{Endpoint: m.Endpoint, Team: m.Team, Version: m.Version,
				Latency: make([]uint64, busapi.LatencyBuckets), TTFT: make([]uint64, busapi.LatencyBuckets), TPOT: make([]uint64, busapi.LatencyBuckets)}
			got[m.Endpoint+"/"+m.Version] = a
		}
		a.Count += m.Count
		a.Errors.Upstream += m.Errors.Upstream
		a.Errors.Client += m.Errors.Client
		a.Streams += m.Streams
		a.Tokens += m.Tokens
		for i := range busapi.LatencyBuckets {
			a.Latency[i] += m.Latency[i]
			a.TTFT[i] += m.TTFT[i]
			a.TPOT[i] += m.TPOT[i]
		}
	}
	sum := func(h []uint64) (n uint64) {
		for _, v := range h {
			n += v
		}
		return n
	}
	chat, fraud := got["support-chat/v42"], got["fraud-scoring/v23"]
	if chat == nil || fraud == nil || len(got) != 2 {
		t.Fatalf("series %v, want support-chat/v42 and fraud-scoring/v23", got)
	}
	if chat.Team != "search" || chat.Count != streams+plain || chat.Errors.Client+chat.Errors.Upstream != 0 ||
		chat.Streams != streams || chat.Tokens != streams*8 || sum(chat.TTFT) != streams || sum(chat.TPOT) != streams || sum(chat.Latency) != chat.Count {
		t.Errorf("support-chat/v42: %+v, want %d requests, %d streams of 8 tokens with TTFT and TPOT", *chat, streams+plain, streams)
	}
	if fraud.Team != "risk" || fraud.Count != down || fraud.Errors.Upstream != down || fraud.Streams != 0 || sum(fraud.Latency) != down {
		t.Errorf("fraud-scoring/v23: %+v, want %d requests, all upstream errors", *fraud, down)
	}
}
