package replica

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"modelplane/busapi"
)

// TestTokenRequiredButForProbes: a replica given a token answers 401 to
// inference without it or with another, and serves it with it; the agent's
// probes need none.
func TestTokenRequiredButForProbes(t *testing.T) {
	t.Parallel()
	_, base := startReady(t, Config{Task: TaskClassification, Profile: []byte(classifierProfile), Seed: 1, Token: "tok-1"})
	c := newClient(t)
	body := `{"instances":[{"amount":1}]}`
	for _, tc := range []struct {
		name, token string
		want        int
	}{{"no token", "", http.StatusUnauthorized}, {"another token", "tok-2", http.StatusUnauthorized}, {"its token", "tok-1", http.StatusOK}} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/predict", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set(busapi.ReplicaTokenHeader, tc.token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: POST /predict = %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/stats"} {
		if got := get(t, c, base+p); got != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", p, got)
		}
	}
}

// TestTenantIsTheTeamHeader: the scheduler's tenant is the team the gateway
// sends, never the body's user field.
func TestTenantIsTheTeamHeader(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	_, base := startLLM(t, eng, nil)
	c := newClient(t)
	for _, team := range []string{"risk", ""} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"user":"search"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(busapi.TeamHeader, team)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat = %d", resp.StatusCode)
		}
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if want := []string{"risk", ""}; !slices.Equal(eng.tenants, want) {
		t.Errorf("tenants %q, want %q: the team header, not the user field", eng.tenants, want)
	}
}
