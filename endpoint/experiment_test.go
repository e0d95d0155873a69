package endpoint_test

import (
	"errors"
	"reflect"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
)

func TestSetExperiment(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	split := []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0}}
	ab := func(a, b int32) []endpoint.Arm {
		return []endpoint.Arm{{Version: "v1", Share: a}, {Version: "v2", Share: b}}
	}
	tests := []struct {
		name      string
		p         *auth.Principal
		x         endpoint.Experiment
		wantErr   error
		wantField string
	}{
		{name: "ab", p: f.riskEng, x: endpoint.Experiment{Name: "checkout-2026", Arms: ab(50, 50)}},
		{name: "uneven", p: f.riskEng, x: endpoint.Experiment{Name: "uneven", Arms: ab(90, 10)}},
		{name: "platform admin", p: f.root, x: endpoint.Experiment{Name: "admin", Arms: ab(50, 50)}},
		{name: "bad name", p: f.riskEng, x: endpoint.Experiment{Name: "Big Test", Arms: ab(50, 50)}, wantField: "name"},
		{name: "one arm", p: f.riskEng, x: endpoint.Experiment{Name: "one", Arms: []endpoint.Arm{{Version: "v1", Share: 100}}}, wantField: "arms"},
		{name: "shares below 100", p: f.riskEng, x: endpoint.Experiment{Name: "low", Arms: ab(40, 50)}, wantField: "arms"},
		{name: "zero share", p: f.riskEng, x: endpoint.Experiment{Name: "zero", Arms: ab(100, 0)}, wantField: "arms[1].share"},
		{name: "version twice", p: f.riskEng, x: endpoint.Experiment{Name: "twice", Arms: []endpoint.Arm{{Version: "v1", Share: 50}, {Version: "v1", Share: 50}}},
			wantField: "arms[1].version"},
		{name: "version not routed", p: f.riskEng, x: endpoint.Experiment{Name: "unrouted", Arms: []endpoint.Arm{{Version: "v1", Share: 50}, {Version: "v3", Share: 50}}},
			wantField: "arms[1].version"},
		{name: "viewer forbidden", p: f.riskViewer, x: endpoint.Experiment{Name: "viewer", Arms: ab(50, 50)}, wantErr: auth.ErrForbidden},
		{name: "other team not found", p: f.searchEng, x: endpoint.Experiment{Name: "other", Arms: ab(50, 50)}, wantErr: db.ErrNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "x" + string(rune('a'+i))
			f.create(t, name)
			if _, err := f.svc.SetTraffic(ctx, f.riskEng, name, split); err != nil {
				t.Fatal(err)
			}
			got, err := f.svc.SetExperiment(ctx, tt.p, name, tt.x)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("SetExperiment error = %v, want %v", err, tt.wantErr)
				}
			case tt.wantField != "":
				if !hasField(err, tt.wantField) {
					t.Fatalf("SetExperiment error = %v (fields %q), want a field error on %s", err, fields(err), tt.wantField)
				}
			default:
				if err != nil {
					t.Fatalf("SetExperiment: %v", err)
				}
				stored, err := f.svc.Get(ctx, f.root, name)
				if err != nil {
					t.Fatal(err)
				}
				for what, e := range map[string]*endpoint.Experiment{"returned": got.Experiment, "stored": stored.Experiment} {
					if e == nil || !reflect.DeepEqual(*e, tt.x) {
						t.Errorf("%s experiment = %+v, want %+v", what, e, tt.x)
					}
				}
				if as := f.audits(t, "endpoint.experiment", name); len(as) != 1 || as[0].Actor != tt.p.Name {
					t.Errorf("endpoint.experiment audit = %+v, want one row by %s", as, tt.p.Name)
				}
				return
			}
			if stored, err := f.svc.Get(ctx, f.root, name); err != nil || stored.Experiment != nil {
				t.Errorf("experiment after refused change = %+v (%v), want none", stored.Experiment, err)
			}
		})
	}
}

// TestExperimentReplaceEndAndDelete: a second SetExperiment replaces the
// first (name and arms), EndExperiment removes it (a second end is not
// found), and deleting the endpoint deletes its experiment with it.
func TestExperimentReplaceEndAndDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.create(t, "fraud-prod")
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "fraud-prod", []endpoint.Weight{{Version: "v1", Weight: 80}, {Version: "v2", Weight: 10}, {Version: "v3", Weight: 10}}); err != nil {
		t.Fatal(err)
	}
	first := endpoint.Experiment{Name: "first", Arms: []endpoint.Arm{{Version: "v1", Share: 50}, {Version: "v2", Share: 50}}}
	second := endpoint.Experiment{Name: "second", Arms: []endpoint.Arm{{Version: "v2", Share: 30}, {Version: "v3", Share: 70}}}
	for _, x := range []endpoint.Experiment{first, second} {
		if _, err := f.svc.SetExperiment(ctx, f.riskEng, "fraud-prod", x); err != nil {
			t.Fatal(err)
		}
	}
	if e, err := f.svc.Get(ctx, f.riskEng, "fraud-prod"); err != nil || e.Experiment == nil || !reflect.DeepEqual(*e.Experiment, second) {
		t.Fatalf("experiment = %+v (%v), want the second one %+v", e.Experiment, err, second)
	}
	if err := f.svc.EndExperiment(ctx, f.riskViewer, "fraud-prod"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("viewer EndExperiment = %v, want forbidden", err)
	}
	if err := f.svc.EndExperiment(ctx, f.riskEng, "fraud-prod"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.EndExperiment(ctx, f.riskEng, "fraud-prod"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("second EndExperiment = %v, want not found", err)
	}
	if e, err := f.svc.Get(ctx, f.riskEng, "fraud-prod"); err != nil || e.Experiment != nil {
		t.Errorf("experiment after end = %+v (%v), want none", e.Experiment, err)
	}
	if _, err := f.svc.SetExperiment(ctx, f.riskEng, "fraud-prod", first); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Delete(ctx, f.riskEng, "fraud-prod"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := f.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM experiments) + (SELECT count(*) FROM experiment_arms)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("experiment rows after the endpoint was deleted = %d, want 0", n)
	}
}

// TestGatewaySettings: the rate limit and timeout are stored by Create and
// Update, and out-of-range values are refused per field.
func TestGatewaySettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	set := settings
	set.RateLimitRPS, set.RateLimitBurst, set.TimeoutMS = 2.5, 5, 1500
	e, err := f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "limited", Model: "fraud", Version: "v1", Runtime: "triton", Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	if e.RateLimitRPS != 2.5 || e.RateLimitBurst != 5 || e.TimeoutMS != 1500 {
		t.Errorf("created %+v, want rate 2.5 burst 5 timeout 1500", e)
	}
	set.RateLimitRPS, set.RateLimitBurst, set.TimeoutMS = 100, 0, 250
	if _, err := f.svc.Update(ctx, f.riskEng, "limited", set); err != nil {
		t.Fatal(err)
	}
	if e, err = f.svc.Get(ctx, f.riskEng, "limited"); err != nil || e.RateLimitRPS != 100 || e.RateLimitBurst != 0 || e.TimeoutMS != 250 {
		t.Errorf("updated %+v (%v), want rate 100 burst 0 timeout 250", e, err)
	}
	for _, tt := range []struct {
		field string
		mod   func(*endpoint.Settings)
	}{
		{"rate_limit_rps", func(s *endpoint.Settings) { s.RateLimitRPS = -1 }},
		{"rate_limit_burst", func(s *endpoint.Settings) { s.RateLimitBurst = -1 }},
		{"timeout_ms", func(s *endpoint.Settings) { s.TimeoutMS = 3_600_001 }},
	} {
		bad := settings
		tt.mod(&bad)
		if _, err := f.svc.Update(ctx, f.riskEng, "limited", bad); !hasField(err, tt.field) {
			t.Errorf("Update with bad %s = %v, want a field error on it", tt.field, err)
		}
	}
}

// TestExperimentShadowAndRolloutGuards: a shadow version cannot be an arm
// (its replies are discarded), an arm cannot be made a shadow, and no
// experiment can be set while a rollout owns the endpoint's traffic.
func TestExperimentShadowAndRolloutGuards(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	ab := endpoint.Experiment{Name: "ab", Arms: []endpoint.Arm{{Version: "v1", Share: 50}, {Version: "v2", Share: 50}}}

	f.create(t, "shadowed")
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "shadowed", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", ShadowPercent: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetExperiment(ctx, f.riskEng, "shadowed", ab); !hasField(err, "arms[1].version") {
		t.Errorf("SetExperiment with a shadow arm: %v (fields %q), want a field error on arms[1].version", err, fields(err))
	}

	f.create(t, "armed")
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "armed", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetExperiment(ctx, f.riskEng, "armed", ab); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "armed", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", ShadowPercent: 10}}); !hasField(err, "weights[1].shadow_percent") {
		t.Errorf("SetTraffic making an arm a shadow: %v (fields %q), want a field error on weights[1].shadow_percent", err, fields(err))
	}
	if e, err := f.svc.Get(ctx, f.root, "armed"); err != nil || len(e.Traffic) != 2 || e.Traffic[1].ShadowPercent != 0 {
		t.Errorf("traffic after the refused change = %+v (%v), want v2 without a shadow", e.Traffic, err)
	}

	e := f.create(t, "rolling")
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "rolling", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO rollouts (team_id, endpoint_id, from_version_id, to_version_id, strategy, steps, criteria,
		eval_interval_ms, eval_window_ms, keep_ms, initiator)
		SELECT e.team_id, e.id, v1.id, v2.id, 'canary', '[]', '{}', 1000, 1000, 0, 'test'
		FROM endpoints e JOIN model_versions v1 ON v1.model_id = e.model_id AND v1.name = 'v1'
		JOIN model_versions v2 ON v2.model_id = e.model_id AND v2.name = 'v2' WHERE e.id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetExperiment(ctx, f.riskEng, "rolling", ab); !hasField(err, "arms") {
		t.Errorf("SetExperiment during a rollout: %v (fields %q), want a field error on arms", err, fields(err))
	}
	if got, err := f.svc.Get(ctx, f.root, "rolling"); err != nil || got.Experiment != nil {
		t.Errorf("experiment after the refused start = %+v (%v), want none", got.Experiment, err)
	}
}
