package registry_test

import (
	"encoding/json"
	"errors"
	"testing"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/registry"
)

func TestCreateModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.svc.CreateModel(ctx, f.riskEng, registry.ModelSpec{Team: "risk", Name: "taken", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		p         *auth.Principal
		spec      registry.ModelSpec
		wantErr   error
		wantField string
	}{
		{name: "viewer forbidden", p: f.riskViewer, spec: registry.ModelSpec{Team: "risk", Name: "m-viewer", Task: registry.TaskLLM}, wantErr: auth.ErrForbidden},
		{name: "other team is not found", p: f.searchEng, spec: registry.ModelSpec{Team: "risk", Name: "m-other", Task: registry.TaskLLM}, wantErr: db.ErrNotFound},
		{name: "missing team is not found", p: f.riskEng, spec: registry.ModelSpec{Team: "nope", Name: "m-nope", Task: registry.TaskLLM}, wantErr: db.ErrNotFound},
		{name: "platform admin, missing team", p: f.root, spec: registry.ModelSpec{Team: "nope", Name: "m-nope2", Task: registry.TaskLLM}, wantErr: db.ErrNotFound},
		{name: "input schema not json", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "m-s1", Task: registry.TaskLLM, InputSchema: json.RawMessage(`{`)}, wantField: "input_schema"},
		{name: "input schema not a schema", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "m-s2", Task: registry.TaskLLM, InputSchema: json.RawMessage(`{"type":"nonsense"}`)}, wantField: "input_schema"},
		{name: "output schema not a schema", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "m-s3", Task: registry.TaskLLM, OutputSchema: json.RawMessage(`{"minimum":"x"}`)}, wantField: "output_schema"},
		{name: "bad name", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "Bad_Name", Task: registry.TaskLLM}, wantField: "name"},
		{name: "bad task", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "m-task", Task: "ranking"}, wantField: "task"},
		{name: "duplicate feature", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "m-feat", Task: registry.TaskRegression, FeatureNames: []string{"a", "a"}}, wantField: "feature_names[1]"},
		{name: "duplicate name", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "taken", Task: registry.TaskLLM}, wantErr: db.ErrConflict},
		{name: "duplicate name across teams", p: f.searchEng, spec: registry.ModelSpec{Team: "search", Name: "taken", Task: registry.TaskLLM}, wantErr: db.ErrConflict},
		{name: "engineer", p: f.riskEng, spec: registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}}}`), FeatureNames: []string{"amount"}}},
		{name: "team defaults to the only one", p: f.riskAdmin, spec: registry.ModelSpec{Name: "only", Task: registry.TaskRegression}},
		{name: "platform admin in any team", p: f.root, spec: registry.ModelSpec{Team: "search", Name: "ranker", Task: registry.TaskLLM}},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got, err := f.svc.CreateModel(ctx, tt.p, tt.spec)
				switch {
				case tt.wantErr != nil:
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("CreateModel error = %v, want %v", err, tt.wantErr)
					}
				case tt.wantField != "":
					if !hasField(err, tt.wantField) {
						t.Fatalf("CreateModel error = %v (fields %q), want a field error on %s", err, fields(err), tt.wantField)
					}
				default:
					if err != nil {
						t.Fatalf("CreateModel: %v", err)
					}
					wantTeam := tt.spec.Team
					if wantTeam == "" {
						wantTeam = tt.p.Teams[0].Team
					}
					if got.Name != tt.spec.Name || got.Team != wantTeam || got.CreatedBy != tt.p.Name {
						t.Errorf("CreateModel = %+v, want %s in %s by %s", got, tt.spec.Name, wantTeam, tt.p.Name)
					}
					back, err := f.svc.Model(ctx, tt.p, tt.spec.Name)
					if err != nil || back.ID != got.ID || back.Team != wantTeam {
						t.Errorf("Model(%s) = %+v, %v; want id %d team %s", tt.spec.Name, back, err, got.ID, wantTeam)
					}
					return
				}
				if n := f.count(t, "SELECT count(*) FROM models WHERE name = $1", tt.spec.Name); n != 0 && tt.spec.Name != "taken" {
					t.Errorf("models named %s after refusal = %d, want 0", tt.spec.Name, n)
				}
			})
		}
	})
	if got := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'model.create'"); got != 4 {
		t.Errorf("model.create audit rows = %d, want 4 (one per created model)", got)
	}
}

func TestModelScoping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "fraud")
	if _, err := f.svc.Model(ctx, f.searchEng, "fraud"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Model(other team's) error = %v, want ErrNotFound", err)
	}
	if _, err := f.svc.Model(ctx, f.riskViewer, "fraud"); err != nil {
		t.Errorf("Model(viewer of the team): %v", err)
	}
	for _, tt := range []struct {
		name string
		p    *auth.Principal
		want int
	}{{"own team", f.riskViewer, 1}, {"other team", f.searchEng, 0}, {"platform admin", f.root, 1}} {
		ms, err := f.svc.Models(ctx, tt.p, 0, 10)
		if err != nil || len(ms) != tt.want {
			t.Errorf("Models(%s) = %d models, %v; want %d", tt.name, len(ms), err, tt.want)
		}
	}
}

// TestAuditInSameTransaction: a change whose audit record cannot be written
// is not made at all.
func TestAuditInSameTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "fraud")
	if _, err := f.pool.Exec(ctx, "ALTER TABLE audit_log ADD CONSTRAINT refuse CHECK (action NOT IN ('model.create', 'version.register')) NOT VALID"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreateModel(ctx, f.riskEng, registry.ModelSpec{Team: "risk", Name: "other", Task: registry.TaskLLM}); err == nil {
		t.Errorf("CreateModel with the audit insert failing: no error")
	}
	if n := f.count(t, "SELECT count(*) FROM models WHERE name = 'other'"); n != 0 {
		t.Errorf("models named other = %d, want 0: the model must not outlive its failed audit record", n)
	}
	up := upload{{"model.safetensors", safetensors}}
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "fraud", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, up.manifest(), up.files()); err == nil {
		t.Errorf("RegisterVersion with the audit insert failing: no error")
	}
	if n := f.versions(t); n != 0 {
		t.Errorf("versions = %d, want 0: the version must not outlive its failed audit record", n)
	}
}
