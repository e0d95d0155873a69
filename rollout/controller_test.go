package rollout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/judge"
	"modelplane/rollout"
)

func u64(v uint64) *uint64 { return &v }

// canary starts v2 on fraud-scoring as eng: 10 and 50 percent baking a
// minute each, then 100; judged every 10 s on at least 100 requests.
func (f *fixture) canary(t *testing.T) rollout.Rollout {
	t.Helper()
	r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2",
		Steps:              []rollout.Step{{Percent: 10, BakeSeconds: 60}, {Percent: 50, BakeSeconds: 60}, {Percent: 100, BakeSeconds: 60}},
		EvaluationInterval: 10 * time.Second, EvaluationWindow: time.Minute, Keep: 30 * time.Minute,
		Criteria: rollout.CriteriaSpec{MinRequests: u64(100)}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCanaryStepsApprovalAndRestart walks a healthy canary: no traffic moves
// before the candidate is ready; steps advance only after their bake;
// 100 percent waits for an admin other than the initiator; every pass is a
// freshly started controller, and the promotion happens once.
func TestCanaryStepsApprovalAndRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	good := window(500, 0, 10)
	f.stats.set("v1", good)
	f.stats.set("v2", good)
	r := f.canary(t)
	if r.State != rollout.StateStarting || r.FromVersion != "v1" || r.Criteria.MaxP99MS != 50 || r.Criteria.Drift {
		t.Fatalf("started = %+v; want starting from v1 with the SLA's 50 ms and no drift gate (nothing measures drift)", r)
	}

	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
		t.Fatalf("before the candidate is ready: weights %v, want v1 100 and v2 listed at 0 (so the fleet places it)", w)
	}
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 90, "v2": 10}) {
		t.Fatalf("step 1: weights %v, want 90/10", w)
	}
	if w := f.published(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 90, "v2": 10}) {
		t.Errorf("routing entry written with the step: weights %v, want 90/10", w)
	}
	for range 5 { // 50 s: judged, still baking
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	if got := f.get(t, r.ID); got.StepIndex != 0 || got.State != rollout.StateProgressing {
		t.Fatalf("before the bake ended: step %d state %s, want step 0 progressing", got.StepIndex, got.State)
	}
	f.clock.Advance(10 * time.Second)
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 50, "v2": 50}) {
		t.Fatalf("step 2: weights %v, want 50/50", w)
	}
	for range 6 {
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	got := f.get(t, r.ID)
	if got.State != rollout.StateAwaitingApproval {
		t.Fatalf("after step 2 baked: state %s, want awaiting_approval", got.State)
	}
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 50, "v2": 50}) {
		t.Fatalf("awaiting approval: weights %v, want 50/50 unchanged", w)
	}
	if list, _ := f.svc.AwaitingApproval(t.Context(), f.admin); len(list) != 1 || list[0].ID != r.ID {
		t.Errorf("admin's approval list = %v, want rollout %d", list, r.ID)
	}
	if list, _ := f.svc.AwaitingApproval(t.Context(), f.eng); len(list) != 0 {
		t.Errorf("engineer's approval list = %v, want none", list)
	}

	// Four eyes: an engineer may not; the initiator may not even as admin.
	if _, err := f.svc.Approve(t.Context(), f.eng, r.ID, "lgtm"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("engineer approves: %v, want forbidden", err)
	}
	selfAdmin := &auth.Principal{UserID: f.eng.UserID, Name: f.eng.Name, Teams: []auth.Membership{{TeamID: f.riskID, Team: "risk", Role: auth.RoleAdmin}}}
	if _, err := f.svc.Approve(t.Context(), selfAdmin, r.ID, "mine"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("initiator approves: %v, want forbidden", err)
	}
	if _, err := f.svc.Approve(t.Context(), f.sue, r.ID, ""); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("another team approves: %v, want not found", err)
	}
	if _, err := f.svc.Approve(t.Context(), f.admin, r.ID, "numbers look right"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Approve(t.Context(), f.admin2, r.ID, "me too"); !errors.Is(err, db.ErrConflict) {
		t.Errorf("second approval: %v, want conflict", err)
	}
	// The approval is in the audit log, with its comment; the refused ones
	// are not.
	if n := f.count(t, `SELECT count(*) FROM audit_log WHERE action = 'rollout.approve' AND actor = 'ann@example.com'
		AND after->>'decision' = 'approve' AND after->>'comment' = 'numbers look right'`); n != 1 {
		t.Errorf("approve audit records = %d, want 1", n)
	}
	if n := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'rollout.approve'"); n != 1 {
		t.Errorf("approve audit records of anyone = %d, want only the one that took", n)
	}
	// Restart after the approval: the new controller finds it.
	f.pass(t)
	f.pass(t)
	f.clock.Advance(10 * time.Second)
	f.pass(t)
	got = f.get(t, r.ID)
	if got.State != rollout.StatePromoted {
		t.Fatalf("after approval: state %s, want promoted", got.State)
	}
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 0, "v2": 100}) {
		t.Fatalf("promoted: weights %v, want v2 100, v1 kept at 0", w)
	}
	if n := f.count(t, "SELECT count(*) FROM rollout_events WHERE rollout_id = $1 AND decision = 'promote'", r.ID); n != 1 {
		t.Errorf("promote events = %d, want exactly 1", n)
	}
	if n := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'rollout.promote' AND actor = 'rollout-controller'"); n != 1 {
		t.Errorf("promote audit records = %d, want 1", n)
	}
	if n := f.count(t, "SELECT count(*) FROM outbox WHERE subject = 'mp.events.risk'"); n < 5 {
		t.Errorf("mp.events.risk messages = %d, want one per state change", n)
	}
	if len(got.Approvals) != 1 || got.Approvals[0].Approver != "ann@example.com" || got.Approvals[0].Comment != "numbers look right" {
		t.Errorf("approvals = %+v", got.Approvals)
	}
	// The old version leaves the routing table after the keep time.
	f.clock.Advance(31 * time.Minute)
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v2": 100}) {
		t.Errorf("after the keep time: weights %v, want only v2", w)
	}
}

func TestTooFewRequestsHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(20, 0, 10))
	r := f.canary(t)
	f.ready(t, "fraud-scoring", "v2")
	for range 30 {
		f.pass(t)
		f.clock.Advance(10 * time.Second)
	}
	got := f.get(t, r.ID)
	if got.State != rollout.StateProgressing || got.StepIndex != 0 {
		t.Fatalf("state %s step %d, want still at step 0", got.State, got.StepIndex)
	}
	holds := 0
	for _, e := range got.Events {
		if e.Kind == "verdict" {
			if e.Decision != "hold" || e.Windows == nil || e.Windows.Candidate.Requests != 20 || len(e.Verdict.Checks) == 0 {
				t.Fatalf("verdict %+v; want hold with the numbers it saw", e)
			}
			holds++
		}
	}
	if holds < 25 {
		t.Errorf("%d verdicts stored, want one per evaluation", holds)
	}
}

func TestBadWindowRollsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 50, 10)) // 10 percent errors
	r := f.canary(t)
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	f.clock.Advance(10 * time.Second)
	f.pass(t)
	got := f.get(t, r.ID)
	if got.State != rollout.StateRolledBack || !strings.Contains(got.Reason, "error_rate") {
		t.Fatalf("state %s reason %q; want rolled back on the error rate within one evaluation", got.State, got.Reason)
	}
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
		t.Fatalf("weights %v, want all on v1 and v2 kept at 0 for inspection", w)
	}
	if _, err := f.svc.Rollback(t.Context(), f.eng, r.ID, ""); !errors.Is(err, db.ErrConflict) {
		t.Errorf("rollback of a finished rollout: %v, want conflict", err)
	}
	f.clock.Advance(31 * time.Minute)
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100}) {
		t.Errorf("after the keep time: %v, want v2 gone", w)
	}
	// A new candidate starts its analysis from scratch.
	f.stats.set("v3", window(500, 0, 10))
	r2, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v3"})
	if err != nil {
		t.Fatal(err)
	}
	if r2.StepIndex != 0 || r2.State != rollout.StateStarting || len(r2.Events) != 1 {
		t.Errorf("new rollout = step %d %s with %d events, want a fresh start", r2.StepIndex, r2.State, len(r2.Events))
	}
}

// TestWindowEndsWhereStatisticsArrived: the judge's window ends at the
// newest statistics in ClickHouse, not at now. With ingest five minutes
// behind a one-minute window, a window read up to now holds no request at
// any evaluation, and a bad candidate would be held, never rolled back.
func TestWindowEndsWhereStatisticsArrived(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 50, 10)) // 10 percent errors
	r := f.canary(t)
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	stepAt := f.get(t, r.ID).StepStartedAt
	if stepAt == nil {
		t.Fatal("the canary's first step has not started")
	}
	f.clock.Advance(6 * time.Minute)
	arrived := stepAt.Add(time.Minute)
	f.stats.lag(arrived)
	f.pass(t)
	got := f.get(t, r.ID)
	if got.State != rollout.StateRolledBack || !strings.Contains(got.Reason, "error_rate") {
		t.Fatalf("state %s reason %q; want rolled back on the error rate in the window that arrived", got.State, got.Reason)
	}
	verdicts := 0
	for _, e := range got.Events {
		if e.Kind != "verdict" {
			continue
		}
		verdicts++
		if e.Windows == nil || !e.Windows.To.Equal(arrived) {
			t.Errorf("verdict's windows %+v; want them to end where the statistics arrived, %s", e.Windows, arrived)
		}
	}
	if verdicts == 0 {
		t.Error("no verdict stored for the rollback")
	}
}

// TestNoStatisticsStoreHolds: a controller without request statistics (a
// control plane without ClickHouse) holds every evaluation and says why;
// it neither advances nor rolls back, nor fails its pass.
func TestNoStatisticsStoreHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.canary(t)
	f.ready(t, "fraud-scoring", "v2")
	for range 3 {
		c := rollout.NewController(rollout.ControllerConfig{Pool: f.pool, Clock: f.clock})
		if err := c.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(10 * time.Second)
	}
	got := f.get(t, r.ID)
	if got.State != rollout.StateProgressing || got.StepIndex != 0 || !strings.Contains(got.Reason, "no request statistics store") {
		t.Fatalf("state %s step %d reason %q; want held at step 0 for want of a statistics store", got.State, got.StepIndex, got.Reason)
	}
}

func TestStartValidationAndConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.canary(t)
	_, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v3"})
	var ce *rollout.ConflictError
	if !errors.As(err, &ce) || ce.ActiveID != r.ID || !strings.Contains(err.Error(), "v2") {
		t.Errorf("second start: %v; want a conflict naming rollout %d to v2", err, r.ID)
	}
	for name, tc := range map[string]struct {
		p    *auth.Principal
		ep   string
		spec rollout.Spec
		want error
	}{
		"other team":        {f.sue, "fraud-scoring", rollout.Spec{Version: "v3"}, db.ErrNotFound},
		"viewer":            {f.viewer, "fraud-scoring", rollout.Spec{Version: "v3"}, auth.ErrForbidden},
		"no version":        {f.sue, "ranking", rollout.Spec{Version: "nope"}, field.Errors{}},
		"same version":      {f.sue, "ranking", rollout.Spec{Version: "r1"}, field.Errors{}},
		"last step not 100": {f.sue, "ranking", rollout.Spec{Version: "r2", Steps: []rollout.Step{{Percent: 5}, {Percent: 50}}}, field.Errors{}},
		"bad strategy":      {f.sue, "ranking", rollout.Spec{Version: "r2", Strategy: "yolo"}, field.Errors{}},
		"bad criteria":      {f.sue, "ranking", rollout.Spec{Version: "r2", Criteria: rollout.CriteriaSpec{MinRequests: u64(0)}}, field.Errors{}},
	} {
		_, err := f.svc.Start(t.Context(), tc.p, tc.ep, tc.spec)
		var ve field.Errors
		if _, isVal := tc.want.(field.Errors); isVal {
			if !errors.As(err, &ve) {
				t.Errorf("%s: %v, want a validation error", name, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	var ve field.Errors
	if _, err := endpoint.New(f.pool).SetTraffic(t.Context(), f.eng, "fraud-scoring", []endpoint.Weight{{Version: "v3", Weight: 100}}); !errors.As(err, &ve) ||
		!strings.Contains(err.Error(), "rollout") {
		t.Errorf("setting traffic by hand during a rollout: %v, want a validation error naming the rollout", err)
	}
	if _, err := f.svc.Get(t.Context(), f.sue, r.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("other team's Get: %v, want not found", err)
	}
}

func TestPauseResumeAndManualRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 0, 10))
	r := f.canary(t)
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	if _, err := f.svc.Pause(t.Context(), f.viewer, r.ID); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("viewer pauses: %v, want forbidden", err)
	}
	if _, err := f.svc.Pause(t.Context(), f.eng, r.ID); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	if got := f.get(t, r.ID); got.StepIndex != 0 || !got.Paused {
		t.Fatalf("paused: step %d paused %v, want step 0 paused", got.StepIndex, got.Paused)
	}
	if _, err := f.svc.Resume(t.Context(), f.eng, r.ID); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(10 * time.Second)
	f.pass(t)
	if got := f.get(t, r.ID); got.StepIndex != 0 {
		t.Fatalf("resumed: step %d, want 0: the bake starts again after a pause", got.StepIndex)
	}
	for range 6 {
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	if got := f.get(t, r.ID); got.StepIndex != 1 {
		t.Fatalf("a bake after resume: step %d, want 1", got.StepIndex)
	}
	if _, err := f.svc.Rollback(t.Context(), f.eng, r.ID, "saw something odd"); err != nil {
		t.Fatal(err)
	}
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
		t.Errorf("manual rollback: weights %v", w)
	}
	if n := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'rollout.rollback' AND actor = 'bob@example.com'"); n != 1 {
		t.Errorf("rollback audit records by bob = %d, want 1", n)
	}
}

func TestRejectRollsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 0, 10))
	r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen,
		Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	if got := f.get(t, r.ID); got.State != rollout.StateAwaitingApproval {
		t.Fatalf("blue-green with the candidate up: %s, want awaiting_approval", got.State)
	}
	if _, err := f.svc.Reject(t.Context(), f.admin, r.ID, "not this week"); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, r.ID)
	if got.State != rollout.StateRolledBack || len(got.Approvals) != 1 || got.Approvals[0].Decision != "reject" {
		t.Errorf("rejected: %s with approvals %+v, want rolled back with the rejection recorded", got.State, got.Approvals)
	}
	if n := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'rollout.reject' AND after->>'comment' = 'not this week'"); n != 1 {
		t.Errorf("reject audit records = %d, want 1", n)
	}
}

// TestBlueGreen: after the switch the incumbent serves nothing, as in
// production; the candidate is judged against the incumbent's last window
// before the switch and promoted only on a verdict that passed every
// check: a failing candidate rolls back, and without statistics nothing
// is promoted.
func TestBlueGreen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		candidate judge.Window // after the switch
		fail      bool         // request statistics unavailable after the switch
		want      string
	}{
		{"healthy candidate promoted", window(500, 0, 10), false, rollout.StatePromoted},
		{"40 percent errors roll back", window(500, 200, 10), false, rollout.StateRolledBack},
		{"statistics unavailable: no promotion", window(500, 0, 10), true, rollout.StateProgressing},
		{"too few requests: no promotion", window(20, 0, 10), false, rollout.StateProgressing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.stats.set("v1", window(500, 0, 10))
			r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen,
				Steps: []rollout.Step{{Percent: 100, BakeSeconds: 60}}, EvaluationInterval: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			f.pass(t)
			if got := f.get(t, r.ID); got.State != rollout.StateStarting {
				t.Fatalf("before the candidate is up: %s", got.State)
			}
			f.ready(t, "fraud-scoring", "v2")
			f.pass(t)
			if _, err := f.svc.Approve(t.Context(), f.admin, r.ID, ""); err != nil {
				t.Fatal(err)
			}
			f.pass(t)
			if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 0, "v2": 100}) {
				t.Fatalf("after the switch: %v, want one switch to v2 with v1 kept", w)
			}
			if got := f.get(t, r.ID); got.State != rollout.StateProgressing {
				t.Fatalf("in the rollback window: %s", got.State)
			}
			// From the switch on, v1 serves nothing and v2 everything.
			f.stats.setPast(f.clock.Now(), map[string]judge.Window{"v1": window(500, 0, 10)})
			f.stats.set("v1", judge.Window{})
			f.stats.set("v2", tt.candidate)
			if tt.fail {
				f.stats.setFail(errors.New("clickhouse: connection refused"))
			}
			for range 9 {
				f.clock.Advance(10 * time.Second)
				f.pass(t)
			}
			got := f.get(t, r.ID)
			if got.State != tt.want {
				t.Fatalf("after the rollback window: %s (%s), want %s", got.State, got.Reason, tt.want)
			}
			if tt.want == rollout.StateRolledBack {
				if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
					t.Errorf("rolled back: weights %v, want v1 100", w)
				}
			}
		})
	}
}

func TestShadowThenCanary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(200, 0, 10))
	r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.Shadow,
		Steps: []rollout.Step{{Percent: 25, BakeSeconds: 30}}, EvaluationInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0, "v2/shadow": 25}) {
		t.Fatalf("shadow: %v, want v2 at weight 0 mirroring 25 percent", w)
	}
	for range 5 {
		f.clock.Advance(10 * time.Second)
		f.pass(t)
	}
	got := f.get(t, r.ID)
	if got.State != rollout.StateProgressing {
		t.Fatalf("shadow: %s, want still progressing (a shadow never promotes itself)", got.State)
	}
	last := got.Events[len(got.Events)-1]
	if last.Kind != "verdict" || last.Decision != "advance" || last.Windows.Candidate.Requests != 200 {
		t.Errorf("last event %+v, want an advance verdict on the shadow's numbers", last)
	}
	c, err := f.svc.CanaryFromShadow(t.Context(), f.eng, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Strategy != rollout.Canary || c.ToVersion != "v2" || c.State != rollout.StateStarting || len(c.Steps) != 5 {
		t.Errorf("canary = %+v", c)
	}
	if got := f.get(t, r.ID); got.State != rollout.StateCompleted {
		t.Errorf("shadow after the canary started: %s, want completed", got.State)
	}
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
		t.Errorf("after the shadow: %v, want mirroring off", w)
	}
}

// TestConcurrentControllersPromoteOnce runs several controllers at once, as
// two leaders might overlap for a moment after a lease change: the row lock
// makes the promotion happen once.
func TestConcurrentControllersPromoteOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.stats.set("v1", window(500, 0, 10))
	f.stats.set("v2", window(500, 0, 10))
	r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2",
		Steps: []rollout.Step{{Percent: 10, BakeSeconds: 0}, {Percent: 100, BakeSeconds: 0}}, EvaluationInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.ready(t, "fraud-scoring", "v2")
	f.pass(t)
	f.clock.Advance(time.Second)
	f.pass(t)
	if got := f.get(t, r.ID); got.State != rollout.StateAwaitingApproval {
		t.Fatalf("state %s, want awaiting_approval", got.State)
	}
	if _, err := f.svc.Approve(t.Context(), f.admin, r.ID, ""); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			c := rollout.NewController(rollout.ControllerConfig{Pool: f.pool, Stats: f.stats, Clock: f.clock})
			errs <- c.Pass(t.Context())
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM rollout_events WHERE rollout_id = $1 AND decision = 'promote'", r.ID); n != 1 {
		t.Errorf("promote events after 4 concurrent passes = %d, want 1", n)
	}
	if got := f.get(t, r.ID); got.State != rollout.StatePromoted {
		t.Errorf("state %s, want promoted", got.State)
	}
}
