package tenant_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/tenant"
)

// outboxRows returns the payloads written for a key's gateway entry, oldest
// first.
func (f *fixture) outboxRows(t *testing.T, prefix string) []string {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), "SELECT payload::text FROM outbox WHERE subject = $1 ORDER BY id", busapi.KVSubject(busapi.BucketKeys, prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func entryOf(t *testing.T, payload string) busapi.KeyEntry {
	t.Helper()
	var e busapi.KeyEntry
	if err := json.Unmarshal([]byte(payload), &e); err != nil {
		t.Fatalf("outbox payload %s: %v", payload, err)
	}
	return e
}

func digest(raw string) string {
	s := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(s[:])
}

func TestKeysPublishedToGateways(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	exp := t0.Add(time.Hour)
	raw, k, err := f.svc.CreateKey(ctx, f.ann, tenant.KeyRequest{Name: "ci", Team: "risk", Role: auth.RoleEngineer, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	rows := f.outboxRows(t, k.Prefix)
	if len(rows) != 1 {
		t.Fatalf("outbox rows after CreateKey = %q, want one", rows)
	}
	// The name too: a client certificate of the team's service "ci"
	// authenticates as this key at a gateway (docs/tls.md).
	want := busapi.KeyEntry{Prefix: k.Prefix, SHA256: digest(raw), Team: "risk", Role: "engineer", ExpiresAt: &exp, Name: "ci"}
	if got := entryOf(t, rows[0]); got.Prefix != want.Prefix || got.SHA256 != want.SHA256 || got.Team != want.Team ||
		got.Role != want.Role || got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || got.Name != want.Name {
		t.Errorf("entry = %+v, want %+v", got, want)
	}
	orgRaw, org, err := f.svc.CreateKey(ctx, f.root, tenant.KeyRequest{Name: "automation", Role: auth.RolePlatformAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if rows := f.outboxRows(t, org.Prefix); len(rows) != 1 || entryOf(t, rows[0]).Team != "" || entryOf(t, rows[0]).SHA256 != digest(orgRaw) {
		t.Errorf("org-wide key rows = %q, want one entry without a team", rows)
	}

	if _, err := f.svc.RevokeKey(ctx, f.ann, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RevokeKey(ctx, f.ann, k.ID); err != nil { // again: nothing new
		t.Fatal(err)
	}
	if rows := f.outboxRows(t, k.Prefix); len(rows) != 2 || rows[1] != "null" {
		t.Errorf("outbox rows after RevokeKey = %q, want the entry then one null (a delete)", rows)
	}

	// A refused change writes nothing.
	if _, _, err := f.svc.CreateKey(ctx, f.bob, tenant.KeyRequest{Name: "x", Team: "risk", Role: auth.RoleViewer}); err == nil {
		t.Fatal("engineer created a key")
	}

	// The backfill republishes every active key, and only those.
	expiring := t0.Add(time.Minute)
	_, short, err := f.svc.CreateKey(ctx, f.sam, tenant.KeyRequest{Name: "short", Team: "search", Role: auth.RoleViewer, ExpiresAt: &expiring})
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(2 * time.Minute)
	n, err := f.svc.PublishKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("PublishKeys = %d, want 1 (the org-wide key; one revoked, one expired)", n)
	}
	if rows := f.outboxRows(t, org.Prefix); len(rows) != 2 || entryOf(t, rows[1]).SHA256 != digest(orgRaw) || entryOf(t, rows[1]).Name != "automation" {
		t.Errorf("org-wide key rows after backfill = %q, want its entry again, with its name", rows)
	}
	if rows := f.outboxRows(t, k.Prefix); len(rows) != 2 {
		t.Errorf("revoked key rows after backfill = %q, want no new row", rows)
	}
	if rows := f.outboxRows(t, short.Prefix); len(rows) != 1 {
		t.Errorf("expired key rows after backfill = %q, want no new row", rows)
	}
}
