package app

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/endpoint"
	"modelplane/internal/wait"
)

// TestScaleToZeroWakesOnRequest runs scale from zero end to end:
// support-chat goes to min_replicas 0 and loses its replica; a request then
// is held at the gateway, whose wake request reaches the control plane, the
// reconciler places a replica on a simulated agent, and the held request is
// served (200) by it within the endpoint's cold-start budget (120 s: its
// version needs a GPU), with no 202 for the client to poll on.
func TestScaleToZeroWakesOnRequest(t *testing.T) {
	t.Parallel()
	s := newChatStack(t)
	e, err := s.cp.Endpoints.Get(s.ctx, system, "support-chat")
	if err != nil {
		t.Fatal(err)
	}
	set := endpoint.Settings{InstanceProfile: e.InstanceProfile, MinReplicas: 0, MaxReplicas: e.MaxReplicas, Tier: e.Tier,
		SamplingRate: e.SamplingRate, RetentionDays: e.RetentionDays}
	if _, err := s.cp.Endpoints.Update(s.ctx, system, "support-chat", set); err != nil {
		t.Fatal(err)
	}
	// No request meanwhile: a served one would wake the endpoint again.
	wait.Eventually(t, 60*time.Second, func() bool {
		e, err := s.cp.Endpoints.Get(s.ctx, system, "support-chat")
		if err != nil {
			t.Fatal(err)
		}
		return len(e.Replicas) == 0 && s.gw.RouteReplicas("support-chat") == 0
	}, "support-chat never scaled to zero (a replica in the database or the gateway's table)")

	// The client waits longer than the budget, so the gateway's hold, not
	// its timeout, decides.
	client := &http.Client{Timeout: 150 * time.Second}
	req, _ := http.NewRequestWithContext(s.ctx, http.MethodPost, s.gateway+"/v1/endpoints/support-chat/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"my card was charged twice"}],"stream":true,"max_tokens":6}`))
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("request at zero: %v", err)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data:") {
			events++
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Model-Version") != "v42" || events == 0 {
		t.Fatalf("request at zero = %d from %q with %d events, want 200 streamed by v42 once the woken replica is ready",
			resp.StatusCode, resp.Header.Get("X-Model-Version"), events)
	}
	t.Logf("held for a cold start: answered after %v", time.Since(start).Round(time.Millisecond))
	if h := s.gw.Holds(); h.Served != 1 || h.Expired != 0 || h.Waiting != 0 {
		t.Errorf("gateway holds = %+v, want the one request held and served", h)
	}
	var woken *time.Time
	if err := s.cp.Pool.QueryRow(s.ctx, "SELECT woken_at FROM endpoints WHERE name = 'support-chat'").Scan(&woken); err != nil {
		t.Fatal(err)
	}
	if woken == nil {
		t.Error("the held request never woke support-chat (woken_at still NULL)")
	}
	e, err = s.cp.Endpoints.Get(s.ctx, system, "support-chat")
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != "ready" || len(e.Replicas) != 1 {
		t.Fatalf("support-chat = %s with %d replicas, want ready with the one woken replica", e.Status, len(e.Replicas))
	}
}
