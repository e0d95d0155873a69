package app

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/enrollment"
	"modelplane/gateway"
	"modelplane/internal/chtest"
	"modelplane/internal/kubetest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
	"modelplane/registry"
	"modelplane/rollout"
	"modelplane/tenant"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Most of this package's time is its end-to-end tests waiting on real
	// loops (bakes, drift windows, autoscaling windows, cold starts), not
	// computing: four run at once rather than GOMAXPROCS (two on CI), and
	// the dev stacks among them one at a time (oneDevAtATime). An explicit
	// -parallel wins.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", "4")
	}
	code := m.Run()
	removeBinary()
	pgtest.Stop()
	chtest.Stop()
	kubetest.StopShared(code)
	os.Exit(code)
}

// served is one response of the load: when its request started and which
// version answered.
type served struct {
	start   time.Time
	version string
	status  int
}

// stack is the whole system in one process around one demo model: real
// PostgreSQL, ClickHouse, NATS, control-plane loops (ingest, fleet
// controller, outbox relay, rollout controller with the drift gate), four
// simulated agents and a gateway publishing statistics every 500 ms.
type stack struct {
	ctx     context.Context
	cp      *controlplane.ControlPlane
	gw      *gateway.Gateway
	nc      *nats.Conn
	gateway string
	key     string
	// send sends one request of the model's kind through the gateway.
	send func(s *stack) served
}

// chatStack is a stack around the chat-assistant demo model.
type chatStack = stack

// stackPorts hands each stack the replica ports of its four simulated
// nodes, so that stacks run side by side (the tests using them are
// parallel): 400 ports each from 20000, below the kernel's ephemeral
// range (32768 up) where freeport and the dev stacks' ports are.
var stackPorts atomic.Int32

func stackPortBase() int {
	return 20000 + int(stackPorts.Add(1)-1)*4*SimPortsPerNode
}

// newStack starts the stack with demo model m (its team, versions and
// endpoint), sending requests with send, and returns once the gateway
// answers with the endpoint's first version.
func newStack(t *testing.T, m demoModel, send func(s *stack) served) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := NewLogger("error")
	pool := pgtest.New(t)
	ch := chtest.New(t)
	ns, nc := natstest.Connect(t)
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: ch, NC: nc}, controlplane.Config{Log: log, ArtifactDir: t.TempDir(), MaxUploadBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	team := m.spec.Team
	if _, err := cp.Tenant.CreateTeam(ctx, system, team, team); err != nil {
		t.Fatal(err)
	}
	if err := seedModel(ctx, cp, m); err != nil {
		t.Fatal(err)
	}
	key, _, err := cp.Tenant.CreateKey(ctx, system, tenant.KeyRequest{Name: "load", Team: team, Role: auth.RoleEngineer})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{ctx: ctx, cp: cp, nc: nc, key: key, send: send}
	s.startLoops(t)
	t.Cleanup(s.cp.Stop)
	stopFleet, err := startSimFleet(ctx, log, simFleet{natsURL: ns.ClientURL(), enroll: enrollment.New(pool, natstest.Auth(t), nil, nil), dir: t.TempDir(),
		nodes: 4, gpus: 2, portBase: stackPortBase()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFleet)
	g, err := gateway.New(gateway.Config{StateDir: t.TempDir(), StatsInterval: 500 * time.Millisecond,
		MaxOutstandingPerReplica: gateway.DefaultMaxOutstandingPerReplica}, nc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	s.gw = g
	s.gateway = serveGateway(t, g.Handler())
	// The first version serving through the gateway.
	want := m.endpoint.Version
	wait.Eventually(t, 90*time.Second, func() bool {
		r := s.call()
		return r.status == http.StatusOK && r.version == want
	}, "%s never served %s through the gateway", m.endpoint.Name, want)
	return s
}

// newChatStack starts the stack with versions of chat-assistant (the demo's
// v42 and v43 unless given) and support-chat serving v42.
func newChatStack(t *testing.T, versions ...registry.VersionSpec) *chatStack {
	t.Helper()
	chat := demoModelNamed(t, "chat-assistant")
	if len(versions) > 0 {
		chat.versions = chat.versions[:1]
		for _, v := range versions {
			chat.versions = append(chat.versions, demoVersion{spec: v})
		}
	}
	return newStack(t, chat, (*stack).chat)
}

// demoVersionNamed is the spec of the demo model's version of that name.
func demoVersionNamed(t *testing.T, model, version string) registry.VersionSpec {
	t.Helper()
	for _, v := range demoModelNamed(t, model).versions {
		if v.spec.Name == version {
			return v.spec
		}
	}
	t.Fatalf("no demo version %s of %s", version, model)
	return registry.VersionSpec{}
}

// demoModelNamed is the demo model of that name.
func demoModelNamed(t *testing.T, name string) demoModel {
	t.Helper()
	models, err := demoModels()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m.spec.Name == name {
			return m
		}
	}
	t.Fatalf("no demo model %s", name)
	return demoModel{}
}

// startLoops starts the control plane's background services; s.cp.Stop
// stops them (a killed control plane) and startLoops starts its successor.
func (s *stack) startLoops(t *testing.T) {
	t.Helper()
	if err := s.cp.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
}

// call sends one request through the gateway.
func (s *stack) call() served { return s.send(s) }

var chatClient = &http.Client{Timeout: 10 * time.Second}

// chat sends one streamed chat completion to support-chat through the
// gateway and reads it to the end.
func (s *stack) chat() served {
	r := served{start: time.Now()}
	req, _ := http.NewRequest(http.MethodPost, s.gateway+"/v1/endpoints/support-chat/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"my card was charged twice"}],"stream":true,"max_tokens":6}`))
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := chatClient.Do(req)
	if err != nil {
		return r
	}
	defer resp.Body.Close()
	r.status, r.version = resp.StatusCode, resp.Header.Get("X-Model-Version")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	return r
}

// load runs n clients until stop is called; served returns what they got.
func (s *stack) load(n int) (stop func(), responses func() []served) {
	var mu sync.Mutex
	var log []served
	ctx, cancel := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				r := s.call()
				mu.Lock()
				log = append(log, r)
				mu.Unlock()
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }, func() []served {
		mu.Lock()
		defer mu.Unlock()
		return append([]served(nil), log...)
	}
}

// switched waits until the gateway serves an entry of endpoint for which
// done holds (the entry in mp_routes now, or a later one) and returns when
// it first saw it do so: requests started after that instant are routed
// by that entry or a newer one. The instant is found by polling, so it is
// at or after the real switch; an assertion on requests started after it
// is causal, not a bound on propagation time (bench rollback measures
// that).
func (s *stack) switched(t *testing.T, endpoint string, done func(busapi.Route) bool) time.Time {
	t.Helper()
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(s.ctx, busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	wait.Eventually(t, 30*time.Second, func() bool {
		e, err := kv.Get(s.ctx, endpoint)
		if err != nil {
			return false
		}
		var rt busapi.Route
		if json.Unmarshal(e.Value(), &rt) != nil || !done(rt) {
			return false
		}
		want = rt.Generation
		return true
	}, "mp_routes/%s never held the entry waited for", endpoint)
	var at time.Time
	wait.Eventually(t, 30*time.Second, func() bool {
		gen, ok := s.gw.RouteGeneration(endpoint)
		at = time.Now()
		return ok && gen >= want
	}, "the gateway never served generation %d of %s", want, endpoint)
	return at
}

// weight is version's weight in rt (0 when absent).
func weight(rt busapi.Route, version string) int {
	for _, v := range rt.Versions {
		if v.Name == version {
			return v.Weight
		}
	}
	return 0
}

// answeredSince waits until the load has n answers to requests started
// after from: the load has gone on that long, whatever the machine's pace.
func answeredSince(t *testing.T, responses func() []served, from time.Time, n int) {
	t.Helper()
	count := func() int {
		c := 0
		for _, r := range responses() {
			if r.start.After(from) {
				c++
			}
		}
		return c
	}
	wait.Eventually(t, 60*time.Second, func() bool { return count() >= n },
		"the load answered %v requests started after %s; want %d", wait.Show(func() any { return count() }), from.Format(time.StampMilli), n)
}

// wait polls the rollout until done says so, or fails after a minute.
func (s *stack) wait(t *testing.T, id int64, what string, done func(rollout.Rollout) bool) rollout.Rollout {
	t.Helper()
	var r rollout.Rollout
	wait.Eventually(t, 60*time.Second, func() bool {
		var err error
		if r, err = s.cp.Rollouts.Get(s.ctx, system, id); err != nil {
			t.Fatal(err)
		}
		return done(r)
	}, "rollout never %s: %v", what, wait.Show(func() any { return r.State + " (" + r.Reason + ")" }))
	return r
}

// TestCanaryRegressionRolledBackByJudge is the acceptance scenario of issue 6
// in real time at CI scale: real PostgreSQL, ClickHouse, NATS, ingest, fleet
// controller, simulated agents, gateway, rollout controller and judge. The
// chat-assistant demo's v43, with a decode step past the SLA's 30 ms time per
// output token, goes to 10 percent of support-chat, which v42 serves, under
// streamed chat completions; the judge
// must roll it back, with no human, at the first evaluation that has enough
// requests of both versions (how many evaluations that takes depends on
// the machine's speed, so it is not counted); no request
// started after the gateway serves the rollback's routing entry is answered
// by v43, and v42 answers throughout. How fast the entry reaches gateways
// is measured by `modelplane bench rollback`, not asserted here.
func TestCanaryRegressionRolledBackByJudge(t *testing.T) {
	t.Parallel()
	// The demo's v43 decodes a step in 23 ms and 0.65 ms a sequence: slower
	// than v42, and under the SLA at this load, so whether its p99 crossed
	// 30 ms was the scheduler's jitter (a CI run held at 29.86 ms). Here a
	// step takes 45 ms, past the SLA however the machine runs.
	slow := demoVersionNamed(t, "chat-assistant", "v43")
	slow.Sim = json.RawMessage(`{"prefill_ms_per_token":0.05,"decode_base_ms":45,"decode_ms_per_seq":0.65,"kv_mb_per_token":0.8,"usable_gb":13}`)
	s := newChatStack(t, slow)
	ctx, nc := s.ctx, s.nc
	stopLoad, responses := s.load(8)
	defer stopLoad()

	// A watcher of the routing table, as gateways watch it: when does the
	// entry without v43's weight arrive?
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(ctx, "support-chat", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	type routeSeen struct {
		at     time.Time
		weight int
	}
	var routeMu sync.Mutex
	var routes []routeSeen // v43's weight in each entry, as it arrived
	go func() {
		for e := range watch.Updates() {
			if e == nil {
				continue
			}
			var rt busapi.Route
			if json.Unmarshal(e.Value(), &rt) != nil {
				continue
			}
			for _, v := range rt.Versions {
				if v.Name == "v43" {
					routeMu.Lock()
					routes = append(routes, routeSeen{time.Now(), v.Weight})
					routeMu.Unlock()
				}
			}
		}
	}()

	// The team's live pages hear of it on mp.events.search.
	events := make(chan busapi.Event, 256)
	sub, err := nc.Subscribe(busapi.EventsSubject("search"), func(m *nats.Msg) {
		var ev busapi.Event
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
	r, err := s.cp.Rollouts.Start(ctx, system, "support-chat", rollout.Spec{Version: "v43",
		Steps:              []rollout.Step{{Percent: 10, BakeSeconds: 30}, {Percent: 100, BakeSeconds: 30}},
		EvaluationInterval: interval, EvaluationWindow: 3 * interval, Criteria: rollout.CriteriaSpec{MinRequests: &min}})
	if err != nil {
		t.Fatal(err)
	}
	if r.FromVersion != "v42" || r.Criteria.MaxP99TPOTMS != 30 {
		t.Fatalf("rollout from %s with TPOT ceiling %v; want from v42 with the SLA's 30 ms", r.FromVersion, r.Criteria.MaxP99TPOTMS)
	}
	got := s.wait(t, r.ID, "ended", func(r rollout.Rollout) bool { return !r.Active() })
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
			// How many evaluations pass before both versions have min
			// requests in the window depends on how fast this machine
			// serves the load; from the first that has them, the judge
			// must roll back.
			if e.Windows.Candidate.Requests >= min && e.Windows.Incumbent.Requests >= min && e.Decision != "rollback" {
				t.Errorf("verdict %s with %d candidate and %d incumbent requests in the window; want a rollback at the first evaluation with %d of each",
					e.Decision, e.Windows.Candidate.Requests, e.Windows.Incumbent.Requests, min)
			}
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
	// The first entry giving v43 no weight after one that gave it some,
	// and the rollback event: both leave with the relay's next round after
	// the rollout's transaction, so they may come after the state is read.
	var propagated time.Time
	wait.Eventually(t, 30*time.Second, func() bool {
		routeMu.Lock()
		defer routeMu.Unlock()
		weighted := false
		for _, r := range routes {
			if r.weight > 0 {
				weighted = true
			} else if weighted {
				propagated = r.at
				return true
			}
		}
		return false
	}, "no routing entry without v43's weight reached a watcher after the rollback")
	// rollbackAt is the end of the window the judge read, before the
	// ClickHouse read and the transaction, so this is an upper bound that
	// grows with a loaded machine; what a caller sees (no v43 answer once
	// the gateway serves the entry) is asserted below.
	t.Logf("rollback decision to routing entry at a watcher: %s", propagated.Sub(rollbackAt))
	wait.Eventually(t, 30*time.Second, func() bool {
		for {
			select {
			case ev := <-events:
				if ev.Kind == "rollout" && ev.ID == r.ID && ev.State == rollout.StateRolledBack {
					return true
				}
			default:
				return false
			}
		}
	}, "no rollback event on %s", busapi.EventsSubject("search"))
	// Once the gateway serves the entry without v43, no request started
	// after it reaches v43; the load goes on for 20 more answers.
	quiet := s.switched(t, "support-chat", func(rt busapi.Route) bool { return weight(rt, "v43") == 0 })
	t.Logf("rollback decision to the gateway serving the entry: at most %s", quiet.Sub(rollbackAt))
	answeredSince(t, responses, quiet, 20)
	stopLoad()
	log2 := responses()
	var v42, v43, late43, failed int
	var lastV43 time.Time
	v42ByWindow := map[int64]int{}
	for _, x := range log2 {
		switch {
		case x.status != http.StatusOK:
			failed++
		case x.version == "v43":
			v43++
			if x.start.After(lastV43) {
				lastV43 = x.start
			}
			if x.start.After(quiet) {
				late43++
			}
		case x.version == "v42":
			v42++
			v42ByWindow[x.start.Unix()]++
		}
	}
	t.Logf("responses: v42 %d, v43 %d, failed %d; last v43 request started %s after the rollback", v42, v43, failed, lastV43.Sub(rollbackAt))
	if v43 == 0 {
		t.Errorf("no response came from v43: the canary never got traffic")
	}
	if late43 > 0 {
		t.Errorf("%d responses from v43 to requests started after the gateway served the rollback's entry", late43)
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

// TestRolloutSurvivesControlPlaneRestart kills the control plane's loops (the
// rollout controller with them) in the middle of a healthy canary: the
// gateway keeps serving the last split meanwhile, the successor resumes at
// the persisted step instead of starting over, an approval given while no
// controller ran is found and not asked for again, and the promotion happens
// once.
func TestRolloutSurvivesControlPlaneRestart(t *testing.T) {
	t.Parallel()
	v44 := demoModelNamed(t, "chat-assistant").versions[0].spec // v42's profile: a healthy candidate
	v44.Name, v44.Lineage.ParentVersion = "v44", "v42"
	s := newChatStack(t, v44)
	stopLoad, responses := s.load(6)
	defer stopLoad()
	// The judge is not what this test is about: v44 is v42's twin, and on
	// a loaded machine either may stream slower than the SLA's 30 ms TPOT.
	min, regression, tpot := uint64(5), 1.0, 1000.0
	r, err := s.cp.Rollouts.Start(s.ctx, system, "support-chat", rollout.Spec{Version: "v44",
		Steps:              []rollout.Step{{Percent: 20, BakeSeconds: 3}, {Percent: 100, BakeSeconds: 1}},
		EvaluationInterval: time.Second, EvaluationWindow: 3 * time.Second,
		Criteria: rollout.CriteriaSpec{MinRequests: &min, MaxRegression: &regression, MaxP99TPOTMS: &tpot}})
	if err != nil {
		t.Fatal(err)
	}
	s.wait(t, r.ID, "at 20 percent", func(r rollout.Rollout) bool { return r.State == rollout.StateProgressing })

	s.cp.Stop()
	killed := time.Now()
	// The gateway serves the split on its own while no control plane runs.
	answeredSince(t, responses, killed, 30)
	restarted := time.Now()
	s.startLoops(t)
	s.wait(t, r.ID, "waiting for approval", func(r rollout.Rollout) bool { return r.State == rollout.StateAwaitingApproval })

	// Approved while no controller runs; the next one acts on it.
	s.cp.Stop()
	ops := &auth.Principal{UserID: 4242, Name: "ops@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	if _, err := s.cp.Rollouts.Approve(s.ctx, ops, r.ID, "looks healthy"); err != nil {
		t.Fatal(err)
	}
	s.startLoops(t)
	got := s.wait(t, r.ID, "promoted", func(r rollout.Rollout) bool { return r.State == rollout.StatePromoted })
	count := map[string]int{}
	for _, e := range got.Events {
		if e.Kind == "state" {
			count[e.Decision]++
		}
	}
	if count["start"] != 1 || count["step"] != 1 || count["promote"] != 1 || count["await_approval"] != 1 {
		t.Errorf("state changes %v; want one start, one first step, one wait for approval and one promotion across two restarts", count)
	}
	promoted := s.switched(t, "support-chat", func(rt busapi.Route) bool { return weight(rt, "v42") == 0 && weight(rt, "v44") == 100 })
	answeredSince(t, responses, promoted, 20)
	stopLoad()
	var duringKill44, failed, late42 int
	for _, x := range responses() {
		switch {
		case x.status != http.StatusOK:
			failed++
		case x.version == "v44" && x.start.After(killed) && x.start.Before(restarted):
			duringKill44++
		case x.version == "v42" && x.start.After(promoted):
			late42++
		}
	}
	t.Logf("while the control plane was down, v44 answered %d requests", duringKill44)
	if duringKill44 == 0 {
		t.Errorf("v44 served nothing while the control plane was down: the gateway did not keep the last split")
	}
	if failed > 0 {
		t.Errorf("%d requests failed across the restarts", failed)
	}
	if late42 > 0 {
		t.Errorf("%d responses from v42 to requests started after the gateway served the promotion's entry", late42)
	}
}
