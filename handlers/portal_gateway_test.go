package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"modelplane/endpoint"
)

// TestPortalShadowAndGatewaySettings: the traffic form sets a shadow
// percentage on a weight-0 version (and refuses one on a served version),
// and the settings form sets the endpoint's rate limit and timeout (blank
// fields are the gateway's default).
func TestPortalShadowAndGatewaySettings(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")

	r := u.post("/endpoints/risk-endpoint/traffic", u.form("w_v1", "100", "w_v2", "0", "s_v2", "12.5"), "HX-Request", "true")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("traffic with a shadow = %d\n%s", r.StatusCode, r.Body)
	}
	if got := r.doc(t).Find(`#traffic input[name="s_v2"]`).AttrOr("value", ""); got != "12.5" {
		t.Errorf("v2 shadow shown = %q, want 12.5", got)
	}
	ep, err := e.srv.Endpoints.Get(context.Background(), system, "risk-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ep.Traffic); got != "[{v1 100 0} {v2 0 12.5}]" {
		t.Errorf("stored traffic = %s, want v1 100 and v2 as a 12.5%% shadow", got)
	}

	// An experiment arm may not be a shadow: v2 stops mirroring first.
	if _, err := e.srv.Endpoints.SetTraffic(context.Background(), system, "risk-endpoint", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Endpoints.SetExperiment(context.Background(), system, "risk-endpoint", endpoint.Experiment{Name: "ab-1",
		Arms: []endpoint.Arm{{Version: "v1", Share: 70}, {Version: "v2", Share: 30}}}); err != nil {
		t.Fatal(err)
	}
	if got := portalText(u.page("/endpoints/risk-endpoint").Find("#experiment")); !strings.Contains(got, "ab-1: v1 70%, v2 30%") {
		t.Errorf("experiment shown = %q, want ab-1: v1 70%%, v2 30%%", got)
	}

	r = u.post("/endpoints/risk-endpoint/traffic", u.form("w_v1", "100", "s_v1", "5"), "HX-Request", "true")
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("shadow on the served version = %d, want 422", r.StatusCode)
	}
	if msg := portalText(r.doc(t).Find(`#traffic .err`)); !strings.Contains(msg, "weight 0") {
		t.Errorf("shadow on the served version: no error shown:\n%s", r.Body)
	}

	r = u.post("/endpoints/risk-endpoint/settings", u.form("instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1",
		"max_replicas", "2", "sampling_rate", "0", "retention_days", "30", "rate_limit_rps", "25", "rate_limit_burst", "50", "timeout_ms", "1500"))
	if r.StatusCode != http.StatusOK && r.StatusCode != http.StatusSeeOther {
		t.Fatalf("settings with gateway limits = %d\n%s", r.StatusCode, r.Body)
	}
	if ep, err = e.srv.Endpoints.Get(context.Background(), system, "risk-endpoint"); err != nil {
		t.Fatal(err)
	}
	if ep.RateLimitRPS != 25 || ep.RateLimitBurst != 50 || ep.TimeoutMS != 1500 {
		t.Errorf("stored rate %v burst %d timeout %d, want 25, 50, 1500", ep.RateLimitRPS, ep.RateLimitBurst, ep.TimeoutMS)
	}
	r = u.post("/endpoints/risk-endpoint/settings", u.form("instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1",
		"max_replicas", "2", "sampling_rate", "0", "retention_days", "30", "timeout_ms", "soon"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("settings with a bad timeout = %d, want 422", r.StatusCode)
	}
}
