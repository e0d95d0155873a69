package tenant_test

import (
	"errors"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/tenant"
)

func ptr[T any](v T) *T { return &v }

func TestCreateKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	tests := []struct {
		name      string
		p         *auth.Principal
		req       tenant.KeyRequest
		wantErr   error
		wantField string
		wantP     auth.Principal // the principal the key authenticates as (Teams[0] or PlatformRole)
	}{
		{name: "team admin creates an engineer key", p: f.ann, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleEngineer},
			wantP: auth.Principal{Teams: []auth.Membership{{TeamID: f.risk.ID, Team: "risk", Role: auth.RoleEngineer}}}},
		{name: "team admin creates an admin key", p: f.ann, req: tenant.KeyRequest{Name: "ops", Team: "risk", Role: auth.RoleAdmin, ExpiresAt: ptr(t0.Add(time.Hour))},
			wantP: auth.Principal{Teams: []auth.Membership{{TeamID: f.risk.ID, Team: "risk", Role: auth.RoleAdmin}}}},
		{name: "platform admin creates a team key", p: f.root, req: tenant.KeyRequest{Name: "ci", Team: "search", Role: auth.RoleViewer},
			wantP: auth.Principal{Teams: []auth.Membership{{TeamID: f.search.ID, Team: "search", Role: auth.RoleViewer}}}},
		{name: "platform admin creates a platform key", p: f.root, req: tenant.KeyRequest{Name: "automation", Role: auth.RolePlatformAdmin},
			wantP: auth.Principal{PlatformRole: auth.RolePlatformAdmin}},
		{name: "platform admin creates a finance key", p: f.root, req: tenant.KeyRequest{Name: "billing", Role: auth.RoleFinance},
			wantP: auth.Principal{PlatformRole: auth.RoleFinance}},
		{name: "engineer forbidden", p: f.bob, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleEngineer}, wantErr: auth.ErrForbidden},
		{name: "viewer forbidden", p: f.val, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer}, wantErr: auth.ErrForbidden},
		{name: "other team's admin gets not found", p: f.sam, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer}, wantErr: db.ErrNotFound},
		{name: "team admin cannot create a platform key", p: f.ann, req: tenant.KeyRequest{Name: "x", Role: auth.RolePlatformAdmin}, wantErr: auth.ErrForbidden},
		{name: "team admin cannot create a finance key", p: f.ann, req: tenant.KeyRequest{Name: "x", Role: auth.RoleFinance}, wantErr: auth.ErrForbidden},
		{name: "finance cannot create a finance key", p: &auth.Principal{Name: "fin", PlatformRole: auth.RoleFinance}, req: tenant.KeyRequest{Name: "x", Role: auth.RoleFinance}, wantErr: auth.ErrForbidden},
		{name: "expiry in the past", p: f.ann, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer, ExpiresAt: ptr(t0.Add(-time.Second))}, wantField: "expires_at"},
		{name: "expiry now", p: f.ann, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer, ExpiresAt: ptr(t0)}, wantField: "expires_at"},
		{name: "empty name", p: f.ann, req: tenant.KeyRequest{Team: "risk", Role: auth.RoleViewer}, wantField: "name"},
		{name: "unknown role", p: f.ann, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: "owner"}, wantField: "role"},
		{name: "team key without team", p: f.ann, req: tenant.KeyRequest{Name: "ci", Role: auth.RoleViewer}, wantField: "team"},
		{name: "platform key with a team", p: f.root, req: tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RolePlatformAdmin}, wantField: "team"},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				raw, k, err := f.svc.CreateKey(ctx, tt.p, tt.req)
				switch {
				case tt.wantErr != nil:
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("CreateKey error = %v, want %v", err, tt.wantErr)
					}
					return
				case tt.wantField != "":
					if !hasField(err, tt.wantField) {
						t.Fatalf("CreateKey error = %v (fields %q), want a field error on %s", err, fields(err), tt.wantField)
					}
					return
				case err != nil:
					t.Fatalf("CreateKey: %v", err)
				}
				if raw == "" || k.Prefix == "" || raw[:len(k.Prefix)] != k.Prefix {
					t.Errorf("CreateKey = %q, %+v; want a key starting with its prefix", raw, k)
				}
				if k.Team != tt.req.Team || k.Role != tt.req.Role || k.Name != tt.req.Name {
					t.Errorf("key = %+v, want team %q role %s name %q", k, tt.req.Team, tt.req.Role, tt.req.Name)
				}
				var stored []byte
				if err := f.pool.QueryRow(ctx, "SELECT hash FROM api_keys WHERE id = $1", k.ID).Scan(&stored); err != nil {
					t.Fatal(err)
				}
				if string(stored) == raw || string(stored) != string(auth.HashKey(raw)) {
					t.Errorf("stored hash = %x, want sha256 of the key, never the key", stored)
				}
				p, err := f.authenticate(ctx, raw)
				if err != nil {
					t.Fatalf("Authenticate(new key): %v", err)
				}
				if p.OwnerUserID != tt.p.UserID || p.HumanID() != tt.p.UserID {
					t.Errorf("Authenticate owner = %d (human %d), want the creator %d: four eyes compares the person behind a key", p.OwnerUserID, p.HumanID(), tt.p.UserID)
				}
				if p.KeyID != k.ID || p.Via != "api-key" || p.Name != k.Prefix || p.PlatformRole != tt.wantP.PlatformRole ||
					len(p.Teams) != len(tt.wantP.Teams) || (len(p.Teams) == 1 && p.Teams[0] != tt.wantP.Teams[0]) {
					t.Errorf("Authenticate = %+v, want key %d via api-key with role %q teams %+v", p, k.ID, tt.wantP.PlatformRole, tt.wantP.Teams)
				}
			})
		}
	})
	if got := f.auditCount(t, "api_key.create"); got != 5 {
		t.Errorf("api_key.create audit rows = %d, want 5 (one per created key)", got)
	}
}

func TestKeyExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	raw, _, err := f.svc.CreateKey(ctx, f.ann, tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer, ExpiresAt: ptr(t0.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after time.Duration
		ok    bool
	}{{0, true}, {time.Hour - time.Second, true}, {time.Hour, false}, {2 * time.Hour, false}} {
		f.clk.Set(t0.Add(step.after))
		if _, err := f.authenticate(ctx, raw); (err == nil) != step.ok {
			t.Errorf("Authenticate %v after creation: error = %v, want ok %v", step.after, err, step.ok)
		}
	}
}

// TestKeyMadeByKeyKeepsItsOwner: a key created through an API key belongs
// to the person behind that key, so four eyes still knows whose it is.
func TestKeyMadeByKeyKeepsItsOwner(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	raw, _, err := f.svc.CreateKey(ctx, f.ann, tenant.KeyRequest{Name: "ops", Team: "risk", Role: auth.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	viaKey, err := f.authenticate(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	raw2, _, err := f.svc.CreateKey(ctx, viaKey, tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleEngineer})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.authenticate(ctx, raw2)
	if err != nil {
		t.Fatal(err)
	}
	if p.OwnerUserID != f.ann.UserID || p.HumanID() != f.ann.UserID {
		t.Errorf("key made by ann's key: owner %d, want ann (%d)", p.OwnerUserID, f.ann.UserID)
	}
}

func TestRevokeKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	raw, k, err := f.svc.CreateKey(ctx, f.ann, tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleEngineer})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		p    *auth.Principal
		want error
	}{
		{"other team's admin", f.sam, db.ErrNotFound},           // cannot see it
		{"engineer of the team", f.bob, auth.ErrForbidden},      // sees it, may not manage it
		{"viewer of the team", f.val, auth.ErrForbidden},        // sees it, may not manage it
		{"no team", &auth.Principal{Name: "x"}, db.ErrNotFound}, // cannot see it
	} {
		if _, err := f.svc.RevokeKey(ctx, tt.p, k.ID); !errors.Is(err, tt.want) {
			t.Errorf("RevokeKey by %s error = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := f.svc.RevokeKey(ctx, f.ann, k.ID+1000); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("RevokeKey(missing) error = %v, want ErrNotFound", err)
	}
	if _, err := f.authenticate(ctx, raw); err != nil {
		t.Fatalf("key after refused revocations: %v, want it still valid", err)
	}
	got, err := f.svc.RevokeKey(ctx, f.ann, k.ID)
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if got.RevokedAt == nil || got.Team != "risk" {
		t.Errorf("RevokeKey = %+v, want revoked_at set and team risk", got)
	}
	if _, err := f.authenticate(ctx, raw); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Authenticate(revoked key) error = %v, want ErrUnauthenticated", err)
	}
	again, err := f.svc.RevokeKey(ctx, f.ann, k.ID)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(*got.RevokedAt) {
		t.Errorf("RevokeKey again = %+v, %v; want the same revoked key and no error", again, err)
	}
	if n := f.auditCount(t, "api_key.revoke"); n != 1 {
		t.Errorf("api_key.revoke audit rows = %d, want 1 (revoking again changes nothing)", n)
	}
}

// TestPlatformKeysManageable: org-wide keys (platform_admin, finance) are the
// most powerful keys and have no team. The platform admins who create them
// must be able to list and revoke them like any other key.
func TestPlatformKeysManageable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	raw, k, err := f.svc.CreateKey(ctx, f.root, tenant.KeyRequest{Name: "automation", Role: auth.RolePlatformAdmin})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := f.svc.Keys(ctx, f.root, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, got := range keys {
		listed = listed || got.ID == k.ID
	}
	if !listed {
		t.Errorf("Keys(platform admin) = %+v, want it to include the org-wide key %d", keys, k.ID)
	}
	if _, err := f.svc.RevokeKey(ctx, f.root, k.ID); err != nil {
		t.Errorf("RevokeKey(org-wide key) by platform admin: %v, want nil", err)
	}
	if _, err := f.authenticate(ctx, raw); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Authenticate(org-wide key after revoke) error = %v, want ErrUnauthenticated", err)
	}
	// Team admins never see or revoke it.
	if _, err := f.svc.RevokeKey(ctx, f.ann, k.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("RevokeKey(org-wide key) by team admin error = %v, want ErrNotFound", err)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	create := func(p *auth.Principal, team string) tenant.Key {
		t.Helper()
		_, k, err := f.svc.CreateKey(ctx, p, tenant.KeyRequest{Name: "k", Team: team, Role: auth.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	r1, s1, r2 := create(f.ann, "risk"), create(f.sam, "search"), create(f.ann, "risk")
	ids := func(ks []tenant.Key) []int64 {
		out := []int64{}
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	tests := []struct {
		name    string
		p       *auth.Principal
		afterID int64
		limit   int
		want    []int64
	}{
		{"risk admin sees risk keys", f.ann, 0, 10, []int64{r1.ID, r2.ID}},
		{"search admin sees search keys", f.sam, 0, 10, []int64{s1.ID}},
		{"engineer sees none", f.bob, 0, 10, []int64{}},
		{"viewer sees none", f.val, 0, 10, []int64{}},
		{"platform admin sees all", f.root, 0, 10, []int64{r1.ID, s1.ID, r2.ID}},
		{"page 1", f.root, 0, 2, []int64{r1.ID, s1.ID}},
		{"page 2", f.root, s1.ID, 2, []int64{r2.ID}},
		{"admin of two teams sees both", &auth.Principal{Name: "two", Teams: []auth.Membership{
			{TeamID: f.risk.ID, Team: "risk", Role: auth.RoleAdmin}, {TeamID: f.search.ID, Team: "search", Role: auth.RoleViewer}}}, 0, 10, []int64{r1.ID, r2.ID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ks, err := f.svc.Keys(ctx, tt.p, tt.afterID, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(ks); !equal(got, tt.want) {
				t.Errorf("Keys ids = %v, want %v", got, tt.want)
			}
			for _, k := range ks {
				if k.Team == "" || k.Prefix == "" {
					t.Errorf("listed key %+v, want team and prefix", k)
				}
			}
		})
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestKeyLastUsed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	raw, k, err := f.svc.CreateKey(ctx, f.ann, tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() *time.Time {
		t.Helper()
		ks, err := f.svc.Keys(ctx, f.ann, 0, 10)
		if err != nil || len(ks) != 1 || ks[0].ID != k.ID {
			t.Fatalf("Keys = %+v, %v; want the one key", ks, err)
		}
		return ks[0].LastUsedAt
	}
	if got := lastUsed(); got != nil {
		t.Errorf("last_used_at before use = %v, want nil", got)
	}
	steps := []struct {
		advance time.Duration
		want    time.Time
	}{
		{0, t0},                // first use
		{30 * time.Second, t0}, // within a minute: not written again
		{45 * time.Second, t0.Add(75 * time.Second)}, // stale: written
	}
	for _, s := range steps {
		f.clk.Advance(s.advance)
		if _, err := f.authenticate(ctx, raw); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); got == nil || !got.Equal(s.want) {
			t.Errorf("last_used_at at %v = %v, want %v", f.clk.Now().Sub(t0), got, s.want)
		}
	}
	// A failed authentication (wrong secret) is not a use.
	f.clk.Advance(time.Hour)
	bad := raw[:len(raw)-1] + "A"
	if raw[len(raw)-1] == 'A' {
		bad = raw[:len(raw)-1] + "B"
	}
	if _, err := f.authenticate(ctx, bad); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Authenticate(wrong secret) error = %v, want ErrUnauthenticated", err)
	}
	if got := lastUsed(); got == nil || !got.Equal(t0.Add(75*time.Second)) {
		t.Errorf("last_used_at after a failed authentication = %v, want unchanged %v", got, t0.Add(75*time.Second))
	}
}
