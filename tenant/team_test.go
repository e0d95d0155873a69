package tenant_test

import (
	"errors"
	"strings"
	"testing"

	"modelplane/auth"
	"modelplane/db"
)

func TestCreateTeam(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	tests := []struct {
		name        string
		p           *auth.Principal
		team, dname string
		wantErr     error  // sentinel, or nil
		wantField   string // field error, or ""
	}{
		{name: "team admin forbidden", p: f.ann, team: "new-a", wantErr: auth.ErrForbidden},
		{name: "engineer forbidden", p: f.bob, team: "new-b", wantErr: auth.ErrForbidden},
		{name: "finance forbidden", p: &auth.Principal{Name: "fin", PlatformRole: auth.RoleFinance}, team: "new-c", wantErr: auth.ErrForbidden},
		{name: "empty name", p: f.root, team: "", wantField: "name"},
		{name: "upper case", p: f.root, team: "Fraud", wantField: "name"},
		{name: "leading digit", p: f.root, team: "1fraud", wantField: "name"},
		{name: "trailing hyphen", p: f.root, team: "fraud-", wantField: "name"},
		{name: "underscore", p: f.root, team: "fraud_ml", wantField: "name"},
		{name: "64 characters", p: f.root, team: "a" + strings.Repeat("b", 63), wantField: "name"},
		{name: "path", p: f.root, team: "../risk", wantField: "name"},
		{name: "long display name", p: f.root, team: "fraud", dname: strings.Repeat("x", 201), wantField: "display_name"},
		{name: "duplicate", p: f.root, team: "risk", wantErr: db.ErrConflict},
		{name: "ok", p: f.root, team: "fraud", dname: "Fraud"},
		{name: "ok 63 characters", p: f.root, team: "a" + strings.Repeat("b", 62)},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got, err := f.svc.CreateTeam(ctx, tt.p, tt.team, tt.dname)
				switch {
				case tt.wantErr != nil:
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("CreateTeam(%q) error = %v, want %v", tt.team, err, tt.wantErr)
					}
				case tt.wantField != "":
					if fs := fields(err); len(fs) != 1 || fs[0] != tt.wantField {
						t.Fatalf("CreateTeam(%q) error = %v (fields %q), want a field error on %s", tt.team, err, fs, tt.wantField)
					}
				default:
					if err != nil {
						t.Fatalf("CreateTeam(%q): %v", tt.team, err)
					}
					if got.Name != tt.team || got.DisplayName != tt.dname || got.ID == 0 {
						t.Errorf("CreateTeam = %+v, want name %q display %q with an id", got, tt.team, tt.dname)
					}
					back, err := f.svc.Team(ctx, f.root, tt.team)
					if err != nil || back.ID != got.ID {
						t.Errorf("Team(%q) = %+v, %v; want id %d", tt.team, back, err, got.ID)
					}
				}
			})
		}
	})
	// risk and search by the fixture, fraud and the 63-character one here.
	if got := f.auditCount(t, "team.create"); got != 4 {
		t.Errorf("team.create audit rows = %d, want 4 (one per created team)", got)
	}
}

func TestTeamScoping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	tests := []struct {
		name    string
		p       *auth.Principal
		team    string
		wantErr error
	}{
		{"member sees own team", f.val, "risk", nil},
		{"other team is not found", f.val, "search", db.ErrNotFound},
		{"missing team is not found", f.val, "nope", db.ErrNotFound},
		{"platform admin sees any team", f.root, "search", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.Team(ctx, tt.p, tt.team)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Team(%q) error = %v, want %v", tt.team, err, tt.wantErr)
			}
			_, err = f.svc.Members(ctx, tt.p, tt.team)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Members(%q) error = %v, want %v", tt.team, err, tt.wantErr)
			}
		})
	}
	teams, err := f.svc.Teams(ctx, f.ann, 0, 10)
	if err != nil || len(teams) != 1 || teams[0].Name != "risk" {
		t.Errorf("Teams(ann) = %+v, %v; want [risk]", teams, err)
	}
	all, err := f.svc.Teams(ctx, f.root, 0, 1)
	if err != nil || len(all) != 1 || all[0].Name != "risk" {
		t.Fatalf("Teams(root, limit 1) = %+v, %v; want [risk]", all, err)
	}
	next, err := f.svc.Teams(ctx, f.root, all[0].ID, 10)
	if err != nil || len(next) != 1 || next[0].Name != "search" {
		t.Errorf("Teams(root, after risk) = %+v, %v; want [search]", next, err)
	}
}
