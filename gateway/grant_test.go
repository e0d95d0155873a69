package gateway_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// sharedRoute is risk's fraud-scoring with grants, at generation gen.
func sharedRoute(addr string, gen int64, grants ...busapi.RouteGrant) busapi.Route {
	rt := route("fraud-scoring", "risk", "classification", gen, ver("v23", 100, addr))
	rt.EndpointID = 7
	rt.Grants = grants
	return rt
}

// authenticates waits until g knows key: its key digests arrive apart
// from the routing entries.
func authenticates(t *testing.T, g *gw, key string) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() bool {
		return call(t, g.url, predictPath("no-such-endpoint"), key, predictBody).status == http.StatusNotFound
	}, "waiting for the gateway to know the key")
}

// TestGrantedTeamCallsSharedEndpoint: a team granted in the routing entry
// calls another team's endpoint (API key and OIDC-less key alike); a team
// without a grant gets the same 404 as for an endpoint that does not
// exist; once an entry without the grant arrives, the granted team gets
// that 404 too.
func TestGrantedTeamCallsSharedEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, sharedRoute(addr, 1, busapi.RouteGrant{Team: "search"}))
	search := e.newKey(t, "search", "viewer", nil)
	ads := e.newKey(t, "ads", "admin", nil)
	risk := e.newKey(t, "risk", "viewer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, func() bool { gen, ok := g.RouteGeneration("fraud-scoring"); return ok && gen == 1 }, "waiting for the entry")
	for _, k := range []string{search, ads, risk} {
		authenticates(t, g, k)
	}

	for name, key := range map[string]string{"owner": risk, "granted": search} {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Errorf("%s: status %d (%s), want 200", name, r.status, r.body)
		}
	}
	other := call(t, g.url, predictPath("fraud-scoring"), ads, predictBody)
	none := call(t, g.url, predictPath("no-such-endpoint"), ads, predictBody)
	if other.status != http.StatusNotFound || problemDetail(t, other) != `no endpoint "fraud-scoring"` || none.status != http.StatusNotFound {
		t.Errorf("team without a grant: %d %s; no endpoint: %d; want the same 404", other.status, other.body, none.status)
	}

	// Revoked: the next entry has no grant, and the team is refused once
	// the gateway serves from it (the condition, not a clock).
	e.putRoute(t, sharedRoute(addr, 2))
	wait.Eventually(t, 10*time.Second, func() bool { gen, _ := g.RouteGeneration("fraud-scoring"); return gen == 2 }, "waiting for the entry without the grant")
	if r := call(t, g.url, predictPath("fraud-scoring"), search, predictBody); r.status != http.StatusNotFound {
		t.Errorf("revoked team: status %d (%s), want 404", r.status, r.body)
	}
	if r := call(t, g.url, predictPath("fraud-scoring"), risk, predictBody); r.status != http.StatusOK {
		t.Errorf("owner after the revocation: status %d, want 200", r.status)
	}
}

// TestGrantRateLimitIsPerConsumer: a grant's rate limit refuses the
// consumer team's requests beyond it with 429 and Retry-After, across its
// keys, while the owners and other consumers are not limited by it; the
// bucket refills with the gateway's clock.
func TestGrantRateLimitIsPerConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	e.putRoute(t, sharedRoute(addr, 1, busapi.RouteGrant{Team: "search", RateLimitRPS: 0.5, RateLimitBurst: 2}, busapi.RouteGrant{Team: "ads"}))
	s1, s2 := e.newKey(t, "search", "viewer", nil), e.newKey(t, "search", "engineer", nil)
	ads := e.newKey(t, "ads", "viewer", nil)
	risk := e.newKey(t, "risk", "viewer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk})
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("fraud-scoring"); return ok }, "waiting for the entry")
	for _, k := range []string{s1, s2, ads, risk} {
		authenticates(t, g, k)
	}

	for i, k := range []string{s1, s2} {
		if r := call(t, g.url, predictPath("fraud-scoring"), k, predictBody); r.status != http.StatusOK {
			t.Fatalf("search request %d within the burst: %d (%s)", i, r.status, r.body)
		}
	}
	r := call(t, g.url, predictPath("fraud-scoring"), s1, predictBody)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" {
		t.Fatalf("search beyond its rate: %d Retry-After %q (%s), want 429 with Retry-After 2", r.status, r.header.Get("Retry-After"), r.body)
	}
	for name, k := range map[string]string{"owner": risk, "other consumer": ads} {
		for range 5 {
			if r := call(t, g.url, predictPath("fraud-scoring"), k, predictBody); r.status != http.StatusOK {
				t.Fatalf("%s while search is limited: %d", name, r.status)
			}
		}
	}
	clk.Advance(2 * time.Second)
	if r := call(t, g.url, predictPath("fraud-scoring"), s2, predictBody); r.status != http.StatusOK {
		t.Errorf("search after its bucket refilled: %d (%s), want 200", r.status, r.body)
	}
}

// TestGrantDailyQuotaAcrossTwoGateways: a consumer's daily quota is one
// counter for every gateway. Two gateways serving the same team until
// both refuse admit at least 95 % of the quota and never more than it;
// a refusal is 429 with Retry-After until midnight UTC, and the next UTC
// day starts a fresh quota.
func TestGrantDailyQuotaAcrossTwoGateways(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	const quota = 400
	e.putRoute(t, sharedRoute(addr, 1, busapi.RouteGrant{Team: "search", DailyQuota: quota}))
	key := e.newKey(t, "search", "viewer", nil)
	risk := e.newKey(t, "risk", "viewer", nil)
	clk := newClock(t)
	clk.Set(time.Date(2026, 12, 5, 23, 0, 0, 0, time.UTC))
	g1 := startGateway(t, e.nc, gateway.Config{Clock: clk, ID: "gw-1", QuotaGateways: 2})
	g2 := startGateway(t, e.nc, gateway.Config{Clock: clk, ID: "gw-2", QuotaGateways: 2})
	for _, g := range []*gw{g1, g2} {
		wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("fraud-scoring"); return ok }, "waiting for the entry")
		authenticates(t, g, key)
		authenticates(t, g, risk)
	}

	// Both gateways serve at once, alternating, until each refuses.
	var mu sync.Mutex
	served := map[string]int{}
	var wg sync.WaitGroup
	for _, g := range []*gw{g1, g2} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
					if r.status == http.StatusTooManyRequests {
						if ra := r.header.Get("Retry-After"); ra != "3600" {
							t.Errorf("quota refusal Retry-After %q, want 3600 (midnight UTC)", ra)
						}
						return
					}
					if r.status != http.StatusOK {
						t.Errorf("within the quota: %d (%s)", r.status, r.body)
						return
					}
					mu.Lock()
					served[g.url]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	total := served[g1.url] + served[g2.url]
	if total > quota || total < quota*95/100 {
		t.Fatalf("served %d (gateway 1 %d, gateway 2 %d) of a daily quota of %d; want between %d and %d",
			total, served[g1.url], served[g2.url], quota, quota*95/100, quota)
	}
	if served[g1.url] == 0 || served[g2.url] == 0 {
		t.Errorf("served %v: want both gateways serving", served)
	}
	// The shared counter holds no more than the quota.
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), busapi.BucketGrantQuota)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(t.Context(), busapi.GrantQuotaKey(7, "search", "20261205"))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(string(entry.Value())); n != quota {
		t.Errorf("shared counter %d, want %d (the whole quota reserved)", n, quota)
	}
	// The owners are not limited by a consumer's quota.
	if r := call(t, g1.url, predictPath("fraud-scoring"), risk, predictBody); r.status != http.StatusOK {
		t.Errorf("owner: %d, want 200", r.status)
	}
	// A new UTC day, a new quota.
	advance(t, clk, time.Hour)
	for _, g := range []*gw{g1, g2} {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Errorf("next day: %d (%s), want 200", r.status, r.body)
		}
	}
}

// TestGrantedCallsAreTheirOwnStatistics: a consumer's requests are a
// statistics series of their own naming caller_team (chargeback splits
// the endpoint's cost by it), and are sampled only when the grant allows.
func TestGrantedCallsAreTheirOwnStatistics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := startReplica(t, "v23", replica.TaskClassification)
	rt := sharedRoute(addr, 1, busapi.RouteGrant{Team: "search", Sampling: true}, busapi.RouteGrant{Team: "ads"})
	rt.SamplingRate = 1
	e.putRoute(t, rt)
	keys := map[string]string{"risk": e.newKey(t, "risk", "viewer", nil), "search": e.newKey(t, "search", "viewer", nil), "ads": e.newKey(t, "ads", "viewer", nil)}
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk, ID: "gw-share"})
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("fraud-scoring"); return ok }, "waiting for the entry")
	for _, k := range keys {
		authenticates(t, g, k)
	}
	want := map[string]uint64{"risk": 3, "search": 2, "ads": 4}
	var total uint64
	for team, n := range want {
		for range n {
			if r := call(t, g.url, predictPath("fraud-scoring"), keys[team], predictBody); r.status != http.StatusOK {
				t.Fatalf("%s: %d (%s)", team, r.status, r.body)
			}
		}
		total += n
	}
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Pending == total }, "waiting for %d requests counted", total)
	advance(t, clk, gateway.DefaultStatsInterval)
	wait.Eventually(t, 10*time.Second, func() bool { return g.Stats().Published == 3 }, "waiting for three series published")
	// risk's 3 and search's 2 are sampled (2 instances each), ads' never.
	wait.Eventually(t, 10*time.Second, func() bool { return g.Samples().Published == 5 }, "waiting for samples of risk and search only")

	got := map[string]uint64{}
	for _, m := range publishedStats(t, e.nc, 3) {
		if m.Team != "risk" || m.EndpointID != 7 {
			t.Errorf("series %s: team %q endpoint id %d, want the owners' risk and 7", m.ID, m.Team, m.EndpointID)
		}
		caller := m.CallerTeam
		if caller == "" {
			caller = "risk"
		}
		got[caller] += m.Count
	}
	for team, n := range want {
		if got[team] != n {
			t.Errorf("caller %s counted %d, want %d (all %v)", team, got[team], n, got)
		}
	}
	if c := g.Samples(); c.Offered != 5 {
		t.Errorf("samples offered %d, want 5: ads' grant does not allow sampling", c.Offered)
	}
}
