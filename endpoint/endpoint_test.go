package endpoint_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.create(t, "taken")
	with := func(mod func(*endpoint.Spec)) endpoint.Spec {
		s := endpoint.Spec{Model: "fraud", Version: "v1", Runtime: "triton", Settings: settings}
		mod(&s)
		return s
	}
	tests := []struct {
		name      string
		p         *auth.Principal
		spec      endpoint.Spec
		wantErr   error
		wantField string
		wantMsg   string // the field error's message, when it matters
	}{
		{name: "another team's model is no such model", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e1"; s.Model = "ranker"; s.Version = "r1" }),
			wantField: "model", wantMsg: "no such model"},
		{name: "missing model is no such model", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e2"; s.Model = "nope" }),
			wantField: "model", wantMsg: "no such model"},
		{name: "another model's version", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e3"; s.Version = "r1" }), wantField: "version"},
		{name: "missing version", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e4"; s.Version = "v9" }), wantField: "version"},
		{name: "viewer forbidden", p: f.riskViewer, spec: with(func(s *endpoint.Spec) { s.Name = "e5" }), wantErr: auth.ErrForbidden},
		{name: "empty name", p: f.riskEng, spec: with(func(s *endpoint.Spec) {}), wantField: "name"},
		{name: "upper-case name", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "Fraud" }), wantField: "name"},
		{name: "name with a slash", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "a/b" }), wantField: "name"},
		{name: "64-character name", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "a" + strings.Repeat("b", 63) }), wantField: "name"},
		{name: "no model", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e6"; s.Model = "" }), wantField: "model"},
		{name: "no version", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e7"; s.Version = "" }), wantField: "version"},
		{name: "runtime other than the version's", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e8"; s.Runtime = "vllm" }), wantField: "runtime"},
		{name: "min above max", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e9"; s.MinReplicas = 3 }), wantField: "min_replicas"},
		{name: "zero max", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e10"; s.MinReplicas = 0; s.MaxReplicas = 0 }), wantField: "max_replicas"},
		{name: "bad tier", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e11"; s.Tier = "gold" }), wantField: "tier"},
		{name: "bad profile", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e12"; s.InstanceProfile = "tpu-v5" }), wantField: "instance_profile"},
		{name: "sampling above 1", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e13"; s.SamplingRate = 1.5 }), wantField: "sampling_rate"},
		{name: "zero retention", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "e14"; s.RetentionDays = 0 }), wantField: "retention_days"},
		{name: "duplicate name", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "taken" }), wantErr: db.ErrConflict},
		{name: "duplicate name from another team", p: f.searchEng, spec: with(func(s *endpoint.Spec) { s.Name = "taken"; s.Model = "ranker"; s.Version = "r1" }), wantErr: db.ErrConflict},
		{name: "engineer", p: f.riskEng, spec: with(func(s *endpoint.Spec) { s.Name = "fraud-prod" })},
		{name: "platform admin in another team", p: f.root, spec: with(func(s *endpoint.Spec) { s.Name = "ranker-prod"; s.Model = "ranker"; s.Version = "r1" })},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got, err := f.svc.Create(ctx, tt.p, tt.spec)
				switch {
				case tt.wantErr != nil:
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("Create error = %v, want %v", err, tt.wantErr)
					}
				case tt.wantField != "":
					fe := fieldErrors(err)
					if len(fe) != 1 || fe[0].Field != tt.wantField || (tt.wantMsg != "" && fe[0].Message != tt.wantMsg) {
						t.Fatalf("Create error = %v, want one field error on %s %q", err, tt.wantField, tt.wantMsg)
					}
				default:
					if err != nil {
						t.Fatalf("Create: %v", err)
					}
					want := []endpoint.Weight{{Version: tt.spec.Version, Weight: 100}}
					if got.Name != tt.spec.Name || got.Model != tt.spec.Model || got.Status != "pending" || !equalWeights(got.Traffic, want) {
						t.Errorf("Create = %+v, want %s of %s pending at %v", got, tt.spec.Name, tt.spec.Model, want)
					}
					back, err := f.svc.Get(ctx, tt.p, tt.spec.Name)
					if err != nil || back.Team != got.Team || back.Team == "" || !equalWeights(back.Traffic, want) {
						t.Errorf("Get = %+v, %v; want team %q traffic %v", back, err, got.Team, want)
					}
					as := f.audits(t, "endpoint.create", tt.spec.Name)
					if len(as) != 1 || as[0].Before != nil || as[0].After["name"] != tt.spec.Name || as[0].Actor != tt.p.Name {
						t.Errorf("endpoint.create audit = %+v, want one row by %s with after.name %s and no before", as, tt.p.Name, tt.spec.Name)
					}
					return
				}
				if tt.spec.Name != "taken" {
					if _, err := f.svc.Get(ctx, f.root, tt.spec.Name); !errors.Is(err, db.ErrNotFound) {
						t.Errorf("Get(%q) after refused create error = %v, want ErrNotFound", tt.spec.Name, err)
					}
				}
			})
		}
	})
	if n := len(f.audits(t, "endpoint.create", "taken")); n != 1 {
		t.Errorf("endpoint.create audit rows for taken = %d, want 1", n)
	}
	var n int
	if err := f.pool.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE action = 'endpoint.create'").Scan(&n); err != nil || n != 3 {
		t.Errorf("endpoint.create audit rows = %d, %v; want 3", n, err)
	}
}

// TestCreateUnknownRuntime: the runtime names the serving runtime agents
// start; one nobody can start must be refused up front, like the registry
// refuses it for a version.
func TestCreateUnknownRuntime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := f.svc.Create(t.Context(), f.riskEng, endpoint.Spec{Name: "fraud-prod", Model: "fraud", Version: "v1", Runtime: "no-such-runtime", Settings: settings})
	if !hasField(err, "runtime") {
		t.Errorf("Create(runtime no-such-runtime) error = %v, want a field error on runtime", err)
	}
}

func TestSetTraffic(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	initial := []endpoint.Weight{{Version: "v1", Weight: 100}}
	tests := []struct {
		name      string
		p         *auth.Principal
		weights   []endpoint.Weight
		wantErr   error
		wantField string
		want      []endpoint.Weight
	}{
		{name: "split", p: f.riskEng, weights: []endpoint.Weight{{Version: "v2", Weight: 30}, {Version: "v1", Weight: 70}}, want: []endpoint.Weight{{Version: "v1", Weight: 70}, {Version: "v2", Weight: 30}}},
		{name: "move all", p: f.riskEng, weights: []endpoint.Weight{{Version: "v3", Weight: 100}}, want: []endpoint.Weight{{Version: "v3", Weight: 100}}},
		{name: "zero weight kept", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 0}, {Version: "v2", Weight: 100}}, want: []endpoint.Weight{{Version: "v1", Weight: 0}, {Version: "v2", Weight: 100}}},
		{name: "shadow on a weight-0 version", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0, ShadowPercent: 12.5}},
			want: []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0, ShadowPercent: 12.5}}},
		{name: "shadow on a served version", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 90, ShadowPercent: 10}, {Version: "v2", Weight: 10}},
			wantField: "weights[0].shadow_percent"},
		{name: "shadow above 100", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0, ShadowPercent: 101}},
			wantField: "weights[1].shadow_percent"},
		{name: "negative shadow", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0, ShadowPercent: -1}},
			wantField: "weights[1].shadow_percent"},
		{name: "platform admin", p: f.root, weights: []endpoint.Weight{{Version: "v2", Weight: 100}}, want: []endpoint.Weight{{Version: "v2", Weight: 100}}},
		{name: "sum below 100", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 50}, {Version: "v2", Weight: 40}}, wantField: "weights"},
		{name: "sum above 100", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 60}, {Version: "v2", Weight: 50}}, wantField: "weights"},
		{name: "empty", p: f.riskEng, weights: nil, wantField: "weights"},
		{name: "negative", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: -10}, {Version: "v2", Weight: 110}}, wantField: "weights[0].weight"},
		{name: "duplicate version", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 50}, {Version: "v1", Weight: 50}}, wantField: "weights[1].version"},
		{name: "unknown version", p: f.riskEng, weights: []endpoint.Weight{{Version: "v1", Weight: 50}, {Version: "v9", Weight: 50}}, wantField: "weights[1].version"},
		{name: "another model's version", p: f.riskEng, weights: []endpoint.Weight{{Version: "r1", Weight: 100}}, wantField: "weights[0].version"},
		{name: "viewer forbidden", p: f.riskViewer, weights: []endpoint.Weight{{Version: "v2", Weight: 100}}, wantErr: auth.ErrForbidden},
		{name: "other team not found", p: f.searchEng, weights: []endpoint.Weight{{Version: "v2", Weight: 100}}, wantErr: db.ErrNotFound},
	}
	t.Run("cases", func(t *testing.T) {
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				name := "e" + string(rune('a'+i))
				f.create(t, name)
				got, err := f.svc.SetTraffic(ctx, tt.p, name, tt.weights)
				switch {
				case tt.wantErr != nil:
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("SetTraffic error = %v, want %v", err, tt.wantErr)
					}
				case tt.wantField != "":
					if fs := fields(err); len(fs) == 0 || fs[0] != tt.wantField {
						t.Fatalf("SetTraffic error = %v (fields %q), want a field error on %s", err, fs, tt.wantField)
					}
				default:
					if err != nil {
						t.Fatalf("SetTraffic: %v", err)
					}
					if !equalWeights(got.Traffic, tt.want) {
						t.Errorf("SetTraffic traffic = %v, want %v", got.Traffic, tt.want)
					}
					if stored := f.traffic(t, name); !equalWeights(stored, tt.want) {
						t.Errorf("stored traffic = %v, want %v", stored, tt.want)
					}
					as := f.audits(t, "endpoint.traffic", name)
					if len(as) != 1 || as[0].Actor != tt.p.Name {
						t.Fatalf("endpoint.traffic audit = %+v, want one row by %s", as, tt.p.Name)
					}
					var before, after []endpoint.Weight
					if err := json.Unmarshal(as[0].BeforeRaw, &before); err != nil || !equalWeights(before, initial) {
						t.Errorf("audit before = %s, %v; want %v", as[0].BeforeRaw, err, initial)
					}
					if err := json.Unmarshal(as[0].AfterRaw, &after); err != nil || !equalWeights(after, tt.want) {
						t.Errorf("audit after = %s, %v; want %v", as[0].AfterRaw, err, tt.want)
					}
					return
				}
				if stored := f.traffic(t, name); !equalWeights(stored, initial) {
					t.Errorf("traffic after refused change = %v, want unchanged %v", stored, initial)
				}
				if as := f.audits(t, "endpoint.traffic", name); len(as) != 0 {
					t.Errorf("endpoint.traffic audit rows after refused change = %d, want 0", len(as))
				}
			})
		}
	})
}

// TestSetTrafficErrorIndex: a field error names the caller's entry, in the
// order the caller sent them, and the caller's slice is left as it was.
func TestSetTrafficErrorIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.create(t, "fraud-prod")
	weights := []endpoint.Weight{{Version: "v2", Weight: 50}, {Version: "a-missing", Weight: 50}}
	_, err := f.svc.SetTraffic(t.Context(), f.riskEng, "fraud-prod", weights)
	if fs := fields(err); len(fs) != 1 || fs[0] != "weights[1].version" {
		t.Errorf("SetTraffic error fields = %q (%v), want [weights[1].version]: the unknown version is the caller's second entry", fs, err)
	}
	if weights[0].Version != "v2" || weights[1].Version != "a-missing" {
		t.Errorf("caller's weights after SetTraffic = %v, want them in the order given", weights)
	}
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.create(t, "fraud-prod")
	next := settings
	next.MinReplicas, next.MaxReplicas, next.Tier = 2, 8, "critical"
	bad := settings
	bad.RetentionDays = 5000
	if _, err := f.svc.Update(ctx, f.searchEng, "fraud-prod", next); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Update by other team error = %v, want ErrNotFound", err)
	}
	if _, err := f.svc.Update(ctx, f.riskViewer, "fraud-prod", next); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("Update by viewer error = %v, want ErrForbidden", err)
	}
	if _, err := f.svc.Update(ctx, f.riskEng, "nope", next); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Update(missing) error = %v, want ErrNotFound", err)
	}
	if _, err := f.svc.Update(ctx, f.riskEng, "fraud-prod", bad); !hasField(err, "retention_days") {
		t.Errorf("Update(bad retention) error = %v, want a field error on retention_days", err)
	}
	if got, _ := f.svc.Get(ctx, f.riskEng, "fraud-prod"); got.MaxReplicas != settings.MaxReplicas {
		t.Errorf("max_replicas after refused updates = %d, want %d", got.MaxReplicas, settings.MaxReplicas)
	}
	if as := f.audits(t, "endpoint.update", "fraud-prod"); len(as) != 0 {
		t.Errorf("endpoint.update audit rows after refusals = %d, want 0", len(as))
	}
	got, err := f.svc.Update(ctx, f.riskEng, "fraud-prod", next)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got.MinReplicas != 2 || got.MaxReplicas != 8 || got.Tier != "critical" || len(got.Traffic) != 1 {
		t.Errorf("Update = %+v, want 2-8 replicas, critical, traffic kept", got)
	}
	as := f.audits(t, "endpoint.update", "fraud-prod")
	if len(as) != 1 {
		t.Fatalf("endpoint.update audit rows = %d, want 1", len(as))
	}
	if as[0].Before["max_replicas"] != float64(2) || as[0].After["max_replicas"] != float64(8) ||
		as[0].Before["tier"] != "standard" || as[0].After["tier"] != "critical" {
		t.Errorf("audit before/after = %v / %v, want max_replicas 2 -> 8 and tier standard -> critical", as[0].Before, as[0].After)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.create(t, "fraud-prod")
	audits := f.countAudit(t)
	if err := f.svc.Delete(ctx, f.searchEng, "fraud-prod"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Delete by other team error = %v, want ErrNotFound", err)
	}
	if err := f.svc.Delete(ctx, f.riskViewer, "fraud-prod"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("Delete by viewer error = %v, want ErrForbidden", err)
	}
	if err := f.svc.Delete(ctx, f.riskEng, "nope"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Delete(missing) error = %v, want ErrNotFound", err)
	}
	if got := f.countAudit(t) - audits; got != 0 {
		t.Errorf("audit rows after refused deletes = %d, want 0", got)
	}
	if err := f.svc.Delete(ctx, f.riskEng, "fraud-prod"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := f.svc.Get(ctx, f.root, "fraud-prod"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Get after Delete error = %v, want ErrNotFound", err)
	}
	var rules int
	if err := f.pool.QueryRow(ctx, "SELECT count(*) FROM routing_rules").Scan(&rules); err != nil || rules != 0 {
		t.Errorf("routing rules after Delete = %d, %v; want 0", rules, err)
	}
	as := f.audits(t, "endpoint.delete", "fraud-prod")
	if len(as) != 1 || as[0].Before["name"] != "fraud-prod" || as[0].AfterRaw != nil {
		t.Errorf("endpoint.delete audit = %+v, want one row with before and no after", as)
	}
	// The name is free again.
	f.create(t, "fraud-prod")
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	a, b, c := f.create(t, "a"), f.create(t, "b"), f.create(t, "c")
	if _, err := f.svc.Create(ctx, f.searchEng, endpoint.Spec{Name: "s", Model: "ranker", Version: "r1", Runtime: "triton", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetTraffic(ctx, f.riskEng, "b", []endpoint.Weight{{Version: "v1", Weight: 90}, {Version: "v2", Weight: 10}}); err != nil {
		t.Fatal(err)
	}
	one := []endpoint.Weight{{Version: "v1", Weight: 100}}
	tests := []struct {
		name    string
		p       *auth.Principal
		afterID int64
		limit   int
		want    []string
		traffic map[string][]endpoint.Weight
	}{
		{"first page", f.riskViewer, 0, 2, []string{"a", "b"}, map[string][]endpoint.Weight{"a": one, "b": {{Version: "v1", Weight: 90}, {Version: "v2", Weight: 10}}}},
		{"second page", f.riskViewer, b.ID, 2, []string{"c"}, map[string][]endpoint.Weight{"c": one}},
		{"past the end", f.riskViewer, c.ID, 2, []string{}, nil},
		{"other team", f.searchEng, 0, 10, []string{"s"}, map[string][]endpoint.Weight{"s": {{Version: "r1", Weight: 100}}}},
		{"platform admin", f.root, a.ID, 10, []string{"b", "c", "s"}, nil},
		{"no team", &auth.Principal{Name: "nobody"}, 0, 10, []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			es, err := f.svc.List(ctx, tt.p, tt.afterID, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, e := range es {
				got = append(got, e.Name)
				if e.Traffic == nil {
					t.Errorf("%s traffic = nil, want a list", e.Name)
				}
				if want, ok := tt.traffic[e.Name]; ok && !equalWeights(e.Traffic, want) {
					t.Errorf("%s traffic = %v, want %v", e.Name, e.Traffic, want)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("List = %v, want %v", got, tt.want)
			}
		})
	}
}
