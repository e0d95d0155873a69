package app

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent/proto"
	"modelplane/auth"
	"modelplane/gateway"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/rollout"
	"modelplane/tenant"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	chtest.Stop()
	os.Exit(code)
}

// served is one response of the load: when its request started and which
// version answered.
type served struct {
	start   time.Time
	version string
	status  int
}

// TestCanaryRegressionRolledBackByJudge is the acceptance scenario of issue 6
// in real time at CI scale: real PostgreSQL, ClickHouse, NATS, ingest, fleet
// controller, simulated agents, gateway, rollout controller and judge. The
// chat-assistant demo's v43 (slower decode) goes to 10 percent of
// support-chat, which v42 serves, under streamed chat completions; the judge
// must roll it back within three evaluations with no human, after which (plus
// one second) no response carries X-Model-Version: v43, and v42 answers
// throughout.
func TestCanaryRegressionRolledBackByJudge(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := NewLogger("error")
	pool := pgtest.New(t)
	ch := chtest.New(t)
	ns, nc := natstest.Connect(t)
	cp := controlPlane{Log: log, Pool: pool, CH: ch, NC: nc, ArtifactDir: t.TempDir(), MaxUploadBytes: 16 << 20}
	h, err := cp.handler()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Tenant.CreateTeam(ctx, system, "search", "Search"); err != nil {
		t.Fatal(err)
	}
	chat := demoModels[1]
	if chat.spec.Name != "chat-assistant" {
		t.Fatalf("demo model 1 is %s, want chat-assistant", chat.spec.Name)
	}
	if err := seedModel(ctx, h, chat); err != nil {
		t.Fatal(err)
	}
	key, _, err := h.Tenant.CreateKey(ctx, system, tenant.KeyRequest{Name: "load", Team: "search", Role: auth.RoleEngineer})
	if err != nil {
		t.Fatal(err)
	}
	stopLoops, err := cp.startLoops(ctx, h.Metrics, h.Rollouts)
	if err != nil {
		t.Fatal(err)
	}
	defer stopLoops()
	stopFleet, err := startSimFleet(ctx, log, ns.ClientURL(), t.TempDir(), 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer stopFleet()
	stopGW, gh, err := startGateway(ctx, gateway.Config{StateDir: t.TempDir(), StatsInterval: 500 * time.Millisecond,
		MaxOutstandingPerReplica: gateway.DefaultMaxOutstandingPerReplica}, nc, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stopGW()
	gw := httptest.NewServer(gh)
	defer gw.Close()

	client := &http.Client{Timeout: 10 * time.Second}
	call := func() served {
		s := served{start: time.Now()}
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/endpoints/support-chat/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"my card was charged twice"}],"stream":true,"max_tokens":6}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return s
		}
		defer resp.Body.Close()
		s.status, s.version = resp.StatusCode, resp.Header.Get("X-Model-Version")
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		return s
	}
	// v42 serving through the gateway.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if s := call(); s.status == http.StatusOK && s.version == "v42" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("support-chat never served v42 through the gateway")
		}
		time.Sleep(250 * time.Millisecond)
	}

	var mu sync.Mutex
	var log2 []served
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				s := call()
				mu.Lock()
				log2 = append(log2, s)
				mu.Unlock()
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()

	// A watcher of the routing table, as gateways watch it: when does the
	// entry without v43's weight arrive?
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(ctx, "support-chat", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	var routeMu sync.Mutex
	var routeTimes []time.Time // arrivals of entries giving v43 no weight
	go func() {
		for e := range watch.Updates() {
			if e == nil {
				continue
			}
			var rt proto.Route
			if json.Unmarshal(e.Value(), &rt) != nil {
				continue
			}
			for _, v := range rt.Versions {
				if v.Name == "v43" && v.Weight == 0 {
					routeMu.Lock()
					routeTimes = append(routeTimes, time.Now())
					routeMu.Unlock()
				}
			}
		}
	}()

	// The team's live pages hear of it on mp.events.search.
	events := make(chan proto.Event, 256)
	sub, err := nc.Subscribe(proto.EventsSubject("search"), func(m *nats.Msg) {
		var ev proto.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			select {
			case events <- ev:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	interval := 2 * time.Second
	min := uint64(10)
	r, err := h.Rollouts.Start(ctx, system, "support-chat", rollout.Spec{Version: "v43",
		Steps:              []rollout.Step{{Percent: 10, BakeSeconds: 30}, {Percent: 100, BakeSeconds: 30}},
		EvaluationInterval: interval, EvaluationWindow: 3 * interval, Criteria: rollout.CriteriaSpec{MinRequests: &min}})
	if err != nil {
		t.Fatal(err)
	}
	if r.FromVersion != "v42" || r.Criteria.MaxP99TPOTMS != 30 {
		t.Fatalf("rollout from %s with TPOT ceiling %v; want from v42 with the SLA's 30 ms", r.FromVersion, r.Criteria.MaxP99TPOTMS)
	}
	var got rollout.Rollout
	deadline = time.Now().Add(90 * time.Second)
	for {
		if got, err = h.Rollouts.Get(ctx, system, r.ID); err != nil {
			t.Fatal(err)
		}
		if !got.Active() || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.State != rollout.StateRolledBack {
		t.Fatalf("rollout ended %s (%s); want rolled_back by the judge", got.State, got.Reason)
	}
	var stepAt, rollbackAt time.Time
	verdicts := 0
	for _, e := range got.Events {
		switch {
		case e.Kind == "state" && e.Decision == "step":
			stepAt = e.At
		case e.Kind == "verdict":
			verdicts++
			t.Logf("verdict %s: %s (candidate %+v, incumbent %+v)", e.Decision, e.Message, e.Windows.Candidate, e.Windows.Incumbent)
		case e.Kind == "state" && e.Decision == "rollback":
			rollbackAt = e.At
			if e.Actor != "rollout-controller" || !strings.HasPrefix(e.Message, "judge: ") {
				t.Errorf("rollback by %s (%s); want the judge, no human", e.Actor, e.Message)
			}
		}
	}
	if stepAt.IsZero() || rollbackAt.IsZero() {
		t.Fatalf("events lack the 10 percent step or the rollback: %+v", got.Events)
	}
	t.Logf("v43 got 10 percent at %s; rolled back %s later after %d evaluations", stepAt.Format(time.StampMilli), rollbackAt.Sub(stepAt), verdicts)
	routeMu.Lock()
	var propagated time.Time
	for _, at := range routeTimes {
		if at.After(stepAt) {
			propagated = at
			break
		}
	}
	routeMu.Unlock()
	if propagated.IsZero() {
		t.Errorf("no routing entry without v43's weight reached a watcher after the rollback")
	} else {
		// rollbackAt is the end of the window the judge read (before the
		// ClickHouse read and the transaction), so this is an upper bound.
		t.Logf("rollback decision to routing entry at a watcher: %s", propagated.Sub(rollbackAt))
		if d := propagated.Sub(rollbackAt); d > time.Second {
			t.Errorf("the routing entry without v43 arrived %s after the rollback; want within a second", d)
		}
	}
	heard := false
	for len(events) > 0 && !heard {
		ev := <-events
		heard = ev.Kind == "rollout" && ev.ID == r.ID && ev.State == rollout.StateRolledBack
	}
	if !heard {
		t.Errorf("no rollback event on %s", proto.EventsSubject("search"))
	}
	if verdicts > 3 {
		t.Errorf("rolled back after %d evaluations, want within 3", verdicts)
	}
	// Load goes on for two seconds past the rollback plus one second.
	quiet := rollbackAt.Add(time.Second)
	time.Sleep(time.Until(quiet.Add(2 * time.Second)))
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var v42, v43, late43, failed int
	var lastV43 time.Time
	v42ByWindow := map[int64]int{}
	for _, s := range log2 {
		switch {
		case s.status != http.StatusOK:
			failed++
		case s.version == "v43":
			v43++
			if s.start.After(lastV43) {
				lastV43 = s.start
			}
			if s.start.After(quiet) {
				late43++
			}
		case s.version == "v42":
			v42++
			v42ByWindow[s.start.Unix()]++
		}
	}
	t.Logf("responses: v42 %d, v43 %d, failed %d; last v43 request started %s after the rollback", v42, v43, failed, lastV43.Sub(rollbackAt))
	if v43 == 0 {
		t.Errorf("no response came from v43: the canary never got traffic")
	}
	if late43 > 0 {
		t.Errorf("%d responses from v43 to requests started more than a second after the rollback", late43)
	}
	if failed > 0 {
		t.Errorf("%d requests failed during the rollout", failed)
	}
	first, last := log2[0].start.Unix(), log2[len(log2)-1].start.Unix()
	for sec := first; sec < last; sec++ {
		if v42ByWindow[sec] == 0 {
			t.Errorf("no v42 response to requests started in second %d of the load: v42 must never stop", sec-first)
		}
	}
}
