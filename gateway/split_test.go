package gateway_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// instant is a replica stand-in that answers every call at once, so the
// split test measures only the gateway's choices.
type instant struct{}

func (instant) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"predictions":[0]}`)), Request: r}, nil
}

func TestSplitWithinBinomialBounds(t *testing.T) {
	t.Parallel()
	const n = 20000
	for _, pct := range []int{1, 5, 25, 50} {
		t.Run(fmt.Sprintf("%d%%", pct), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.putRoute(t, route("fraud-scoring", "risk", "classification", 1,
				ver("stable", 100-pct, "10.0.0.1:1"), ver("canary", pct, "10.0.0.2:1")))
			key := e.newKey(t, "risk", "engineer", nil)
			g := startGateway(t, e.nc, gateway.Config{Transport: instant{}})
			wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
			h := g.Handler()
			canary := 0
			for i := range n {
				req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, predictPath("fraud-scoring"), strings.NewReader(predictBody))
				req.Header.Set("Authorization", "Bearer "+key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					t.Fatalf("request %d: status %d (%s)", i, w.Code, w.Body)
				}
				if w.Header().Get("X-Model-Version") == "canary" {
					canary++
				}
			}
			// Five standard deviations: a correct split fails about once in
			// three million runs.
			p := float64(pct) / 100
			mean, sd := n*p, math.Sqrt(n*p*(1-p))
			if d := math.Abs(float64(canary) - mean); d > 5*sd {
				t.Errorf("canary at %d%% got %d of %d, want %.0f ± %.0f", pct, canary, n, mean, 5*sd)
			}
		})
	}
}
