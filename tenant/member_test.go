package tenant_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/tenant"
)

func TestSetMember(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		p         func(f *fixture) *auth.Principal
		team      string
		email     string
		role      auth.Role
		wantErr   error
		wantField string
		want      map[string]auth.Role // risk's members afterwards, when no error
	}{
		{name: "engineer forbidden", p: func(f *fixture) *auth.Principal { return f.bob }, team: "risk", email: "cat@example.com", role: auth.RoleViewer, wantErr: auth.ErrForbidden},
		{name: "viewer forbidden", p: func(f *fixture) *auth.Principal { return f.val }, team: "risk", email: "cat@example.com", role: auth.RoleViewer, wantErr: auth.ErrForbidden},
		{name: "other team's admin gets not found", p: func(f *fixture) *auth.Principal { return f.sam }, team: "risk", email: "cat@example.com", role: auth.RoleViewer, wantErr: db.ErrNotFound},
		{name: "unknown email", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "nobody@example.com", role: auth.RoleViewer, wantField: "email"},
		{name: "empty email", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "", role: auth.RoleViewer, wantField: "email"},
		{name: "bad role", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "cat@example.com", role: "owner", wantField: "role"},
		{name: "platform role is not a team role", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "cat@example.com", role: auth.RolePlatformAdmin, wantField: "role"},
		{
			name: "admin adds a viewer", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "cat@example.com", role: auth.RoleViewer,
			want: map[string]auth.Role{"ann@example.com": "admin", "bob@example.com": "engineer", "val@example.com": "viewer", "cat@example.com": "viewer"},
		},
		{
			name: "admin promotes an engineer", p: func(f *fixture) *auth.Principal { return f.ann }, team: "risk", email: "bob@example.com", role: auth.RoleAdmin,
			want: map[string]auth.Role{"ann@example.com": "admin", "bob@example.com": "admin", "val@example.com": "viewer"},
		},
		{
			name: "platform admin adds a member", p: func(f *fixture) *auth.Principal { return f.root }, team: "risk", email: "sam@example.com", role: auth.RoleEngineer,
			want: map[string]auth.Role{"ann@example.com": "admin", "bob@example.com": "engineer", "val@example.com": "viewer", "sam@example.com": "engineer"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := t.Context()
			before := f.roles(t, f.risk.ID)
			m, err := f.svc.SetMember(ctx, tt.p(f), tt.team, tt.email, tt.role)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("SetMember error = %v, want %v", err, tt.wantErr)
				}
			case tt.wantField != "":
				if !hasField(err, tt.wantField) {
					t.Fatalf("SetMember error = %v (fields %q), want a field error on %s", err, fields(err), tt.wantField)
				}
			default:
				if err != nil {
					t.Fatalf("SetMember: %v", err)
				}
				if m.Email != tt.email || m.Role != tt.role {
					t.Errorf("SetMember = %+v, want %s as %s", m, tt.email, tt.role)
				}
				if got := f.roles(t, f.risk.ID); !maps.Equal(got, tt.want) {
					t.Errorf("members = %v, want %v", got, tt.want)
				}
				if got := f.auditCount(t, "member.set"); got != 1 {
					t.Errorf("member.set audit rows = %d, want 1", got)
				}
				return
			}
			if got := f.roles(t, f.risk.ID); !maps.Equal(got, before) {
				t.Errorf("members after refused change = %v, want unchanged %v", got, before)
			}
			if got := f.auditCount(t, "member.set"); got != 0 {
				t.Errorf("member.set audit rows after refused change = %d, want 0", got)
			}
		})
	}
}

func TestLastAdmin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(ctx context.Context, f *fixture) error
	}{
		{"demote to engineer", func(ctx context.Context, f *fixture) error {
			_, err := f.svc.SetMember(ctx, f.ann, "risk", "ann@example.com", auth.RoleEngineer)
			return err
		}},
		{"demote to viewer by platform admin", func(ctx context.Context, f *fixture) error {
			_, err := f.svc.SetMember(ctx, f.root, "risk", "ann@example.com", auth.RoleViewer)
			return err
		}},
		{"remove self", func(ctx context.Context, f *fixture) error {
			return f.svc.RemoveMember(ctx, f.ann, "risk", "ann@example.com")
		}},
		{"removed by platform admin", func(ctx context.Context, f *fixture) error {
			return f.svc.RemoveMember(ctx, f.root, "risk", "ann@example.com")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := t.Context()
			before := f.roles(t, f.risk.ID)
			if err := tt.change(ctx, f); !errors.Is(err, tenant.ErrLastAdmin) {
				t.Fatalf("error = %v, want ErrLastAdmin", err)
			}
			if got := f.roles(t, f.risk.ID); !maps.Equal(got, before) {
				t.Errorf("members = %v, want unchanged %v", got, before)
			}
			var n int
			if err := f.pool.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE action LIKE 'member.%'").Scan(&n); err != nil || n != 0 {
				t.Errorf("member audit rows = %d, %v; want 0", n, err)
			}
		})
	}
}

func TestRemoveMember(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if err := f.svc.RemoveMember(ctx, f.bob, "risk", "val@example.com"); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("RemoveMember by engineer error = %v, want ErrForbidden", err)
	}
	if err := f.svc.RemoveMember(ctx, f.sam, "risk", "val@example.com"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("RemoveMember by other team's admin error = %v, want ErrNotFound", err)
	}
	if err := f.svc.RemoveMember(ctx, f.ann, "risk", "cat@example.com"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("RemoveMember of a non-member error = %v, want ErrNotFound", err)
	}
	if err := f.svc.RemoveMember(ctx, f.ann, "risk", "val@example.com"); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	want := map[string]auth.Role{"ann@example.com": "admin", "bob@example.com": "engineer"}
	if got := f.roles(t, f.risk.ID); !maps.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	if got := f.auditCount(t, "member.remove"); got != 1 {
		t.Errorf("member.remove audit rows = %d, want 1", got)
	}
	// With a second admin, the first may step down.
	if _, err := f.svc.SetMember(ctx, f.ann, "risk", "bob@example.com", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetMember(ctx, f.ann, "risk", "ann@example.com", auth.RoleViewer); err != nil {
		t.Errorf("demote one of two admins: %v", err)
	}
}

// TestSetMemberFirstOfNewTeam: a team starts with no members, so the rule
// that a team keeps an admin cannot apply to its first member: a platform
// admin adding an engineer to a new team must not be told the team "must
// keep at least one admin".
func TestSetMemberFirstOfNewTeam(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.svc.CreateTeam(ctx, f.root, "fraud", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetMember(ctx, f.root, "fraud", "cat@example.com", auth.RoleEngineer); err != nil {
		t.Errorf("SetMember(first member, engineer) error = %v, want nil: a team with no admin has none to keep", err)
	}
}

// TestLastAdminConcurrent: two admins demoting each other at the same time
// must not leave the team without an admin. Each transaction counts admins
// after its own change but before the other commits, so both see one admin
// left unless member changes of a team are serialised.
func TestLastAdminConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := f.svc.SetMember(ctx, f.ann, "risk", "bob@example.com", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	bobAdmin := &auth.Principal{UserID: f.bob.UserID, Name: f.bob.Name, Via: "session",
		Teams: []auth.Membership{{TeamID: f.risk.ID, Team: "risk", Role: auth.RoleAdmin}}}

	// Hold both changes just before their audit insert, after their admin
	// count, so they overlap the way two concurrent requests can.
	gate, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Rollback(context.WithoutCancel(ctx))
	if _, err := gate.Exec(ctx, "LOCK TABLE audit_log IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := f.svc.SetMember(ctx, f.ann, "risk", "bob@example.com", auth.RoleEngineer)
		errs <- err
	}()
	go func() {
		_, err := f.svc.SetMember(ctx, bobAdmin, "risk", "ann@example.com", auth.RoleEngineer)
		errs <- err
	}()
	for {
		var waiting int
		if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the two changes never both waited: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := gate.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var lastAdmin int
	for range 2 {
		err := <-errs
		switch {
		case errors.Is(err, tenant.ErrLastAdmin):
			lastAdmin++
		case err != nil:
			t.Errorf("SetMember: %v", err)
		}
	}
	admins := 0
	for _, r := range f.roles(t, f.risk.ID) {
		if r == auth.RoleAdmin {
			admins++
		}
	}
	if admins != 1 || lastAdmin != 1 {
		t.Errorf("after two admins demoted each other concurrently: %d admins, %d ErrLastAdmin; want 1 admin and one change refused", admins, lastAdmin)
	}
}
