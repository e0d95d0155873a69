package gateway_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// TestStreamedTokensCountedFromTheReplicasUsage: the built-in runtime sends
// one event a token, with no text for a token that ends mid-character, and
// a last event with text that is no token, so counting events miscounts.
// The gateway asks every stream for its usage and meters that; a caller
// that did not ask for the usage never sees it, one that did gets it once.
func TestStreamedTokensCountedFromTheReplicasUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("chat", "search", "llm", 1, ver("v1", 100, llmRuntime(t))))
	key := e.newKey(t, "search", "viewer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{ID: "gw-usage", Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	stream := func(options string) (events []string) {
		t.Helper()
		body := `{"messages":[{"role":"user","content":"Where is my parcel?"}],"max_tokens":24,"temperature":0,"stream":true` + options + `}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+chatPath("chat"), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: status %d", resp.StatusCode)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events = append(events, data)
			}
		}
		return events
	}
	usageOf := func(events []string) (n int, found int) {
		for _, ev := range events {
			var c struct {
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(ev), &c) == nil && c.Usage != nil {
				n, found = c.Usage.CompletionTokens, found+1
			}
		}
		return n, found
	}

	plain := stream("")
	if _, found := usageOf(plain); found != 0 {
		t.Errorf("a stream that did not ask for usage got %d usage events: %q", found, plain)
	}
	if len(plain) < 2 || plain[len(plain)-1] != "[DONE]" || !strings.Contains(plain[len(plain)-2], `"finish_reason":"length"`) {
		t.Fatalf("the stream lost its finish chunk or [DONE]: %q", plain)
	}
	asked := stream(`,"stream_options":{"include_usage":true}`)
	tokens, found := usageOf(asked)
	if found != 1 || tokens != 24 {
		t.Fatalf("a stream that asked for usage got %d usage events, %d tokens; want one, of 24", found, tokens)
	}

	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == 2 }, "waiting for 2 requests counted")
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Published >= 1 }, "waiting for statistics published")
	var metered uint64
	for _, m := range publishedStats(t, e.nc, int(g.Stats().Published)) {
		metered += m.Tokens
	}
	if metered != 2*24 {
		t.Errorf("metered %d tokens for two streams of 24, want 48", metered)
	}
}
