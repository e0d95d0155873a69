package replica

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/internal/wait"
	"modelplane/sim"
	"modelplane/sim/profile"
)

// TestChatOverRealScheduler streams chat completions through the real
// continuous-batching scheduler and paged KV cache: every request streams
// exactly usage.completion_tokens tokens, and the cache is empty afterwards.
func TestChatOverRealScheduler(t *testing.T) {
	t.Parallel()
	raw := `{"prefill_ms_per_token":0.001,"decode_base_ms":0.2,"decode_ms_per_seq":0.01,"kv_mb_per_token":0.8,"usable_gb":0.2,"max_batch":3}`
	p, err := profile.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	eng := NewSchedulerEngine(s)
	srv, base := startReady(t, Config{Task: TaskLLM, Version: "v42", Profile: json.RawMessage(raw), Engine: eng, Seed: 7})
	c := newClient(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			maxTokens := 5 + 13*i // crosses 16-token page boundaries
			resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(fmt.Sprint("q", i), maxTokens, true)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("request %d: status %d", i, resp.StatusCode)
				return
			}
			got, err := readSSE(resp.Body)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if got.usage == nil || got.content != got.usage.CompletionTokens || got.content != maxTokens {
				t.Errorf("request %d: streamed %d tokens, usage %+v; want %d in both", i, got.content, got.usage, maxTokens)
			}
		})
	}
	wg.Wait()
	wait.Eventually(t, 10*time.Second, func() bool { return srv.Stats().KVPagesUsed == 0 }, "waiting for KV cache empty")
}

// Without an Engine an llm replica runs the real scheduler from its profile.
func TestLLMReplicaDefaultsToScheduler(t *testing.T) {
	t.Parallel()
	profile := `{"prefill_ms_per_token":0.001,"decode_base_ms":0.2,"decode_ms_per_seq":0.01,"kv_mb_per_token":0.8,"usable_gb":0.2}`
	srv, base := startReady(t, Config{Task: TaskLLM, Version: "v42", Profile: json.RawMessage(profile), Seed: 1})
	code, _, raw := post(t, newClient(t), base+"/v1/chat/completions", chatBody("hello", 20, false))
	if code != http.StatusOK || !strings.Contains(string(raw), `"completion_tokens":20`) {
		t.Fatalf("chat = %d %s; want 200 with 20 completion tokens", code, raw)
	}
	if st := srv.Stats(); st.KVPagesTotal == 0 {
		t.Errorf("stats show no KV cache: %+v", st)
	}
}
