package cli_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
)

// TestVerbsAgainstAControlPlane runs every verb of the client against a
// real control plane, in the order a user would: its happy path (JSON
// output parsed back) and its error paths (not found 3, conflict 4,
// forbidden and bad input 1, usage 2), each printed readably.
func TestVerbsAgainstAControlPlane(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	risk, viewer, admin, search := s.keys["risk-admin"], s.keys["risk-viewer"], s.keys["platform-admin"], s.keys["search-admin"]

	t.Run("me", func(t *testing.T) {
		me := jsonOf[map[string]any](t, s.run(t, risk, "me", "-o", "json").ok(t, "me"))
		if me["via"] != "api-key" {
			t.Errorf("me = %v; want via api-key", me)
		}
		s.run(t, "mpk_000000000000_nope", "me").want(t, "me with a bad key", 1, "401")
		// Its team as a person reads it, not the membership's field names.
		if out := s.run(t, risk, "me").ok(t, "me as a table"); !strings.Contains(out, "TEAMS:          risk (admin)\n") {
			t.Errorf("me = %q; want TEAMS: risk (admin)", out)
		}
	})

	t.Run("models", func(t *testing.T) {
		m := jsonOf[map[string]any](t, s.run(t, risk, "models", "create", "scorer", "--task", "classification",
			"--feature-names", "amount,country", "--input-schema", `{"type":"object"}`, "-o", "json").ok(t, "models create"))
		if m["name"] != "scorer" || m["team"] != "risk" {
			t.Errorf("models create = %v; want scorer of team risk", m)
		}
		s.run(t, risk, "models", "create", "scorer", "--task", "classification").want(t, "models create again", 4, "409")
		s.run(t, viewer, "models", "create", "other", "--task", "classification").want(t, "models create as viewer", 1, "403")
		s.run(t, risk, "models", "create", "bad", "--task", "astrology").want(t, "models create with a bad task", 1, "400", "task")
		s.run(t, risk, "models", "create", "x").want(t, "models create without --task", 2, "task")
		list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "models", "list", "-o", "json").ok(t, "models list"))
		if len(list.Items) != 1 || list.Items[0]["name"] != "scorer" {
			t.Errorf("models list = %v; want scorer alone", list.Items)
		}
		if out := s.run(t, risk, "models", "get", "scorer").ok(t, "models get"); !strings.Contains(out, "scorer") || !strings.Contains(out, "classification") {
			t.Errorf("models get table:\n%s", out)
		}
		s.run(t, search, "models", "get", "scorer").want(t, "another team's model", 3, "404")
		s.run(t, risk, "models", "get", "nope").want(t, "models get a missing one", 3, "404")
	})

	dir := t.TempDir()
	files := map[string][]byte{"model.safetensors": safetensors("v1"), "tokenizer/config.json": []byte(`{"vocab": 3}`)}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta := filepath.Join(t.TempDir(), "meta.json")
	if err := os.WriteFile(meta, []byte(`{"runtime":"onnxruntime","resources":{"gpu_count":1,"gpu_memory_mb":1024}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("versions", func(t *testing.T) {
		v := jsonOf[map[string]any](t, s.run(t, risk, "versions", "push", "scorer", dir, "--name", "v1", "--metadata", meta, "-o", "json").ok(t, "versions push"))
		man, _ := v["manifest"].(map[string]any)
		if v["name"] != "v1" || v["status"] != "registered" || len(man) != 2 || man["tokenizer/config.json"] == nil {
			t.Errorf("versions push = %v; want v1 registered with both files in its manifest", v)
		}
		r := s.run(t, risk, "versions", "push", "scorer", dir, "--name", "v2", "--metadata", meta)
		out := r.ok(t, "versions push v2")
		if !strings.Contains(r.stderr, "uploaded ") {
			t.Errorf("versions push reports no progress on stderr: %q", r.stderr)
		}
		if !strings.Contains(out, "STATUS:") || !strings.Contains(out, "registered") {
			t.Errorf("versions push prints the version with its status:\n%s", out)
		}
		s.run(t, risk, "versions", "push", "scorer", dir, "--name", "v1", "--metadata", meta).want(t, "versions push of an existing name", 4, "409")
		s.run(t, risk, "versions", "push", "scorer", dir, "--metadata", meta).want(t, "versions push without a name", 2, "--name")
		bad := t.TempDir()
		if err := os.WriteFile(filepath.Join(bad, "model.pkl"), []byte("\x80\x04pickle"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.run(t, risk, "versions", "push", "scorer", bad, "--name", "v9", "--metadata", meta).want(t, "versions push of a pickle", 1, "model.pkl")

		list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "versions", "list", "scorer", "-o", "json").ok(t, "versions list"))
		if len(list.Items) != 2 {
			t.Errorf("versions list = %v; want v1 and v2", list.Items)
		}
		got := jsonOf[map[string]any](t, s.run(t, risk, "versions", "get", "scorer", "v1", "-o", "yaml", "-o", "json").ok(t, "versions get"))
		if got["name"] != "v1" {
			t.Errorf("versions get = %v", got)
		}
		s.run(t, risk, "versions", "get", "scorer", "v7").want(t, "versions get a missing one", 3, "404")

		into := filepath.Join(t.TempDir(), "v1")
		s.run(t, risk, "versions", "download", "scorer", "v1", "--dir", into).ok(t, "versions download")
		for p, want := range files {
			if b, err := os.ReadFile(filepath.Join(into, p)); err != nil || !bytes.Equal(b, want) {
				t.Errorf("downloaded %s = %q (%v); want the pushed bytes", p, b, err)
			}
		}
		// A store that changed a file under the manifest is caught.
		corrupt(t, s.artifacts, files["tokenizer/config.json"])
		again := filepath.Join(t.TempDir(), "v1")
		s.run(t, risk, "versions", "download", "scorer", "v1", "--dir", again).want(t, "versions download of a corrupted file", 1, "tokenizer/config.json", "sha256")
		if _, err := os.Stat(filepath.Join(again, "tokenizer/config.json")); err == nil {
			t.Error("the corrupted file was left on disk")
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		e := jsonOf[map[string]any](t, s.run(t, risk, "endpoints", "create", "scoring", "--model", "scorer", "--version", "v1",
			"--instance-profile", "mig-1g.10gb", "-o", "json").ok(t, "endpoints create"))
		if e["tier"] != "standard" || e["min_replicas"] != 1.0 || e["max_replicas"] != 1.0 {
			t.Errorf("endpoints create = %v; want the defaults: tier standard, 1 replica", e)
		}
		s.run(t, risk, "endpoints", "create", "scoring", "--model", "scorer", "--version", "v1", "--instance-profile", "mig-1g.10gb").
			want(t, "endpoints create again", 4, "409")
		s.run(t, risk, "endpoints", "create", "scoring2", "--model", "scorer", "--version", "v1", "--instance-profile", "mig-1g.10gb", "--tier", "gold").
			want(t, "endpoints create with a bad tier", 1, "400", "tier")
		u := jsonOf[map[string]any](t, s.run(t, risk, "endpoints", "update", "scoring", "--max-replicas", "3", "--tier", "batch", "-o", "json").ok(t, "endpoints update"))
		if u["max_replicas"] != 3.0 || u["tier"] != "batch" || u["instance_profile"] != "mig-1g.10gb" {
			t.Errorf("endpoints update = %v; want max 3, tier batch, the profile kept", u)
		}
		s.run(t, viewer, "endpoints", "update", "scoring", "--max-replicas", "4").want(t, "endpoints update as viewer", 1, "403")
		list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "endpoints", "list", "-o", "json").ok(t, "endpoints list"))
		if len(list.Items) != 1 {
			t.Errorf("endpoints list = %v; want scoring", list.Items)
		}
		if out := s.run(t, risk, "endpoints", "get", "scoring").ok(t, "endpoints get"); !strings.Contains(out, "v1=100") {
			t.Errorf("endpoints get shows the traffic as v1=100:\n%s", out)
		}
		s.run(t, search, "endpoints", "get", "scoring").want(t, "another team's endpoint", 3, "404")
	})

	t.Run("traffic", func(t *testing.T) {
		e := jsonOf[map[string]any](t, s.run(t, risk, "traffic", "set", "scoring", "v1=95", "v2=5", "-o", "json").ok(t, "traffic set"))
		if tr, _ := json.Marshal(e["traffic"]); !strings.Contains(string(tr), `"weight":95`) {
			t.Errorf("traffic set = %s; want v1 at 95", tr)
		}
		s.run(t, risk, "traffic", "set", "scoring", "v1=90", "v2=5").want(t, "weights not summing to 100", 1, "400")
		s.run(t, risk, "traffic", "set", "scoring", "v1").want(t, "a weight without =", 2, "VERSION=WEIGHT")
		x := jsonOf[map[string]any](t, s.run(t, risk, "experiments", "set", "scoring", "ab", "v1=50", "v2=50", "-o", "json").ok(t, "experiments set"))
		if ex, _ := x["experiment"].(map[string]any); ex["name"] != "ab" {
			t.Errorf("experiments set = %v; want experiment ab", x)
		}
		s.run(t, risk, "experiments", "set", "scoring", "ab", "v1=50", "v9=50").want(t, "an arm outside the split", 1, "400")
		s.run(t, risk, "experiments", "clear", "scoring").ok(t, "experiments clear")
		s.run(t, risk, "experiments", "clear", "nowhere").want(t, "experiments clear of a missing endpoint", 3, "404")
		s.run(t, risk, "traffic", "set", "scoring", "v1=100").ok(t, "traffic back to v1")
	})

	t.Run("rollouts", func(t *testing.T) {
		r := jsonOf[map[string]any](t, s.run(t, risk, "rollouts", "start", "scoring", "v2", "--steps", "25,100", "--bake", "10m", "-o", "json").ok(t, "rollouts start"))
		id := r["id"].(float64)
		ids := jsonNumber(id)
		if r["to_version"] != "v2" {
			t.Errorf("rollouts start = %v; want to v2", r)
		}
		s.run(t, risk, "rollouts", "start", "scoring", "v2").want(t, "a second active rollout", 4, "409")
		list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "rollouts", "list", "scoring", "-o", "json").ok(t, "rollouts list"))
		if len(list.Items) != 1 {
			t.Errorf("rollouts list = %v", list.Items)
		}
		p := jsonOf[map[string]any](t, s.run(t, risk, "rollouts", "pause", ids, "-o", "json").ok(t, "rollouts pause"))
		if p["paused"] != true {
			t.Errorf("rollouts pause = %v; want paused", p)
		}
		s.run(t, risk, "rollouts", "resume", ids).ok(t, "rollouts resume")
		s.run(t, risk, "rollouts", "approve", ids, "-m", "looks good").want(t, "approve before the 100 percent step", 4, "409", "not waiting for approval")
		s.run(t, risk, "rollouts", "reject", ids).want(t, "reject before the 100 percent step", 4, "409", "not waiting for approval")
		s.run(t, viewer, "rollouts", "rollback", ids).want(t, "rollback as a viewer", 1, "403")
		// watch follows the rollout until the rollback ends it.
		watched := make(chan result, 1)
		go func() { watched <- s.run(t, risk, "rollouts", "watch", ids) }()
		rb := jsonOf[map[string]any](t, s.run(t, risk, "rollouts", "rollback", ids, "-m", "on-call: p99", "-o", "json").ok(t, "rollouts rollback"))
		var w result
		wait.Eventually(t, time.Minute, func() bool {
			select {
			case w = <-watched:
				return true
			default:
				return false
			}
		}, "rollouts watch did not end with the rolled-back rollout")
		if w.code != 1 || !strings.Contains(w.stdout, "rollout "+ids+" rolled_back") || !strings.Contains(w.stdout, "on-call: p99") {
			t.Errorf("rollouts watch: exit %d\n%s%s\nwant exit 1 after the rollback event and the final state", w.code, w.stdout, w.stderr)
		}
		if rb["state"] == "running" {
			t.Errorf("rollouts rollback = %v; want it ended", rb)
		}
		g := jsonOf[map[string]any](t, s.run(t, risk, "rollouts", "get", ids, "-o", "json").ok(t, "rollouts get"))
		if g["state"] != rb["state"] {
			t.Errorf("rollouts get state %v; rollback answered %v", g["state"], rb["state"])
		}
		s.run(t, risk, "rollouts", "get", "999999").want(t, "a missing rollout", 3, "404")
	})

	t.Run("keys", func(t *testing.T) {
		k := jsonOf[map[string]any](t, s.run(t, risk, "keys", "create", "ci", "--role", "engineer", "--team", "risk", "-o", "json").ok(t, "keys create"))
		raw, _ := k["key"].(string)
		if !strings.HasPrefix(raw, "mpk_") {
			t.Fatalf("keys create = %v; want the key shown", k)
		}
		s.run(t, raw, "models", "list").ok(t, "the new key works")
		list := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "keys", "list", "-o", "json").ok(t, "keys list"))
		if len(list.Items) < 3 {
			t.Errorf("keys list = %v; want the team's keys", list.Items)
		}
		id := jsonNumber(k["id"].(float64))
		s.run(t, risk, "keys", "revoke", id).ok(t, "keys revoke")
		s.run(t, raw, "models", "list").want(t, "the revoked key", 1, "401")
		s.run(t, risk, "keys", "create", "x", "--role", "wizard", "--team", "risk").want(t, "a bad role", 1, "400", "role")
	})

	t.Run("nodes", func(t *testing.T) {
		s.run(t, admin, "nodes", "list", "-o", "json").ok(t, "nodes list")
		s.run(t, risk, "nodes", "list").want(t, "nodes as a team admin", 1, "403")
		s.run(t, admin, "nodes", "get", "gpu-404").want(t, "a missing node", 3, "404")
	})

	t.Run("audit", func(t *testing.T) {
		a := jsonOf[struct{ Items []map[string]any }](t, s.run(t, risk, "audit", "--action", "endpoint.update", "-o", "json").ok(t, "audit"))
		if len(a.Items) != 1 || a.Items[0]["object_name"] != "scoring" {
			t.Errorf("audit --action endpoint.update = %v; want the one update of scoring", a.Items)
		}
		s.run(t, viewer, "audit").want(t, "audit as a viewer", 1, "403")
	})

	t.Run("chargeback", func(t *testing.T) {
		c := jsonOf[map[string]any](t, s.run(t, s.keys["finance"], "chargeback", "--from", "2026-11-01", "--to", "2026-12-01", "--group-by", "team", "-o", "json").ok(t, "chargeback"))
		if _, ok := c["total"]; !ok {
			t.Errorf("chargeback = %v; want a total", c)
		}
		csv := s.run(t, s.keys["finance"], "chargeback", "--from", "2026-11-01", "--to", "2026-12-01", "--csv").ok(t, "chargeback --csv")
		if !strings.Contains(csv, "\nkind,team,") || !strings.Contains(csv, "\ntotal,") {
			t.Errorf("chargeback --csv:\n%s", csv)
		}
		if out := s.run(t, s.keys["finance"], "chargeback", "--from", "2026-11-01", "--to", "2026-12-01").ok(t, "chargeback table"); !strings.Contains(out, "TOTAL") {
			t.Errorf("chargeback table has no TOTAL row:\n%s", out)
		}
		s.run(t, s.keys["finance"], "chargeback", "--from", "yesterday", "--to", "2026-12-01").want(t, "a bad date", 1, "400", "from")
		// Without dates, the calendar month the client's clock is in.
		month := jsonOf[map[string]any](t, s.runAt(t, s.keys["finance"], time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC), "chargeback", "-o", "json").ok(t, "chargeback without dates"))
		if month["from"] != "2026-11-01T00:00:00Z" || month["to"] != "2026-12-01T00:00:00Z" {
			t.Errorf("chargeback without dates on 30 November covers %v to %v; want November", month["from"], month["to"])
		}
		from := jsonOf[map[string]any](t, s.runAt(t, s.keys["finance"], time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "chargeback", "--from", "2026-11-15", "-o", "json").ok(t, "chargeback with --from only"))
		if from["from"] != "2026-11-15T00:00:00Z" || from["to"] != "2027-01-01T00:00:00Z" {
			t.Errorf("chargeback --from 2026-11-15 on 1 December covers %v to %v; want to the end of December", from["from"], from["to"])
		}
	})

	t.Run("drift", func(t *testing.T) {
		d := jsonOf[map[string]any](t, s.run(t, risk, "drift", "scoring", "--current", "2h", "-o", "json").ok(t, "drift"))
		if d["endpoint"] != "scoring" || d["verdict"] == nil {
			t.Errorf("drift = %v; want scoring's verdict", d)
		}
		s.run(t, risk, "drift", "scoring", "--current", "forever").want(t, "a bad window", 1, "400", "current")
		s.run(t, search, "drift", "scoring").want(t, "another team's drift", 3, "404")
	})

	t.Run("endpoints delete", func(t *testing.T) {
		s.run(t, viewer, "endpoints", "delete", "scoring").want(t, "delete as viewer", 1, "403")
		s.run(t, risk, "endpoints", "delete", "scoring").ok(t, "endpoints delete")
		s.run(t, risk, "endpoints", "get", "scoring").want(t, "a deleted endpoint", 3, "404")
	})

	t.Run("usage", func(t *testing.T) {
		s.run(t, risk, "models").want(t, "a noun alone", 2, "verb is missing")
		s.run(t, risk, "models", "fly").want(t, "an unknown verb", 2, `unknown verb "fly"`, "modelplane models --help")
		s.run(t, risk, "models", "list", "--bogus").want(t, "an unknown flag", 2, "bogus")
		s.run(t, risk, "models", "list", "-o", "xml").want(t, "an unknown output", 2, "xml")
		s.run(t, risk, "audit", "list").want(t, "an argument to a noun without verbs", 2, `audit takes no arguments, got "list"`)
		s.run(t, risk, "endpoints", "get").want(t, "a verb short of its argument", 2, "want 1 argument(s) ENDPOINT, got 0")
		s.runEnv(t, nil, "", "models", "list").want(t, "no API configured", 2, "MP_API")
		if out := s.run(t, risk, "rollouts", "approve", "--help").ok(t, "rollouts approve --help"); !strings.Contains(out, "--comment") {
			t.Errorf("rollouts approve --help:\n%s", out)
		}
	})
}

// corrupt overwrites the stored copy of the file whose content is orig,
// as a failing disk would.
func corrupt(t *testing.T, root string, orig []byte) {
	t.Helper()
	found := false
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, orig) {
			found = os.WriteFile(p, []byte(`{"vocab": 4}`), 0o644) == nil
		}
		return nil
	})
	if !found {
		t.Fatal("the stored file was not found to corrupt")
	}
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
