package versioncheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/registry"
	"modelplane/versioncheck"
)

// registerGGUF uploads the demo model as a builtin-llm version of model.
func registerGGUF(t *testing.T, f *fixture, p *auth.Principal, model, name string, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	man := artifact.Manifest{"model.gguf": hex.EncodeToString(sum[:])}
	if _, err := f.reg.RegisterVersion(t.Context(), p, model, registry.VersionSpec{Name: name, Runtime: "builtin-llm",
		Resources: registry.Resources{CPUCores: 1, MemoryMB: 256}}, man.Canonical(),
		func(u *artifact.Upload) error {
			return u.Add(context.Background(), "model.gguf", bytes.NewReader(body))
		}); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
}

// TestSecurityValidationChildIsSandboxed reproduces what a model's code
// (or an exploit of a parser) inside the validation child could reach: the
// child is a wrapper that records its own environment, user, network and
// whether it can read a file only the control plane may (as the NATS
// authority's seeds are), then runs the real `runtime validate`. The
// control plane's secrets are in the test's environment, as they are in
// `modelplane server`'s; the child sees none of them.
// Not parallel: it sets the environment.
func TestSecurityValidationChildIsSandboxed(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	secrets := map[string]string{"MP_DATABASE_URL": "postgres://cp:hunter2@db/modelplane",
		"MP_OIDC_CLIENT_SECRET": "oidc-secret", "MP_AGENT_TOKEN": "agent-token", "MP_NATS_CREDS": "/etc/modelplane/cp.creds"}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	seed := filepath.Join(t.TempDir(), "nats-authority.json")
	if err := os.WriteFile(seed, []byte("SAAUTHORITYSEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The wrapper and its report live where the sandbox user may reach.
	dir, err := os.MkdirTemp("", "sandbox-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// The validator runs its binary through a descriptor, but the wrapper
	// runs the real one by path, as the sandbox user.
	if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "probe")
	script := "#!/bin/sh\n" +
		"tr '\\0' '\\n' < /proc/$$/environ > " + dir + "/environ\n" +
		"/usr/bin/id -u > " + dir + "/uid\n" +
		"cat /proc/net/dev > " + dir + "/netdev\n" +
		"if cat " + seed + " >/dev/null 2>&1; then echo read > " + dir + "/seed; else echo refused > " + dir + "/seed; fi\n" +
		"exec " + binary + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	v := versioncheck.New(versioncheck.Config{Pool: f.db, Store: f.store, Binary: wrapper, WorkDir: t.TempDir()})
	if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "chat", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	registerGGUF(t, f, f.eng, "chat", "v1", demoGGUF(t))
	if n, err := v.Pass(ctx); err != nil || n != 1 {
		t.Fatalf("pass = %d, %v; want 1", n, err)
	}
	if got := f.version(t, "chat", "v1"); got.Status != registry.StatusValidated {
		t.Fatalf("v1 = %q %+v; want validated inside the sandbox", got.Status, got.Validation)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	env := strings.Fields(read("environ"))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, secret := secrets[name]; secret || strings.Contains(kv, "hunter2") {
			t.Errorf("the child's environment holds %s", kv)
		}
		if name != "MP_ONNXRUNTIME_LIB" && name != "PWD" { // sh sets PWD itself
			t.Errorf("the child's environment holds %s; want only MP_ONNXRUNTIME_LIB", kv)
		}
	}
	if os.Geteuid() != 0 {
		t.Logf("not root: the child runs as this user (uid %s) and reads its files; seed %s", read("uid"), read("seed"))
		return
	}
	if uid := read("uid"); uid != strconv.Itoa(versioncheck.DefaultSandboxID) {
		t.Errorf("the child ran as uid %s, want %d", uid, versioncheck.DefaultSandboxID)
	}
	if got := read("seed"); got != "refused" {
		t.Errorf("the child %s a file only the control plane may read", got)
	}
	var ifaces []string
	for _, line := range strings.Split(read("netdev"), "\n")[2:] {
		name, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		ifaces = append(ifaces, name)
	}
	if !slices.Equal(ifaces, []string{"lo"}) {
		t.Errorf("the child sees network interfaces %v, want only lo (a network namespace of its own)", ifaces)
	}
}

// TestSecurityValidationQueueRoundRobinByTeam: the queue was one FIFO,
// so a team that queued many versions (each up to a minute) delayed every
// other team's. Pending versions are claimed round-robin by team: team
// ads's one version, queued after risk's three, is validated second.
func TestSecurityValidationQueueRoundRobinByTeam(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	ads, err := db.New(f.db).TeamCreate(ctx, db.TeamCreateParams{Name: "ads"})
	if err != nil {
		t.Fatal(err)
	}
	adsEng := &auth.Principal{Name: "ads@example.com", Via: "session", Teams: []auth.Membership{{TeamID: ads.ID, Team: "ads", Role: auth.RoleEngineer}}}
	if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "chat", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.CreateModel(ctx, adsEng, registry.ModelSpec{Team: "ads", Name: "adchat", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	demo := demoGGUF(t)
	for _, name := range []string{"r1", "r2", "r3"} {
		registerGGUF(t, f, f.eng, "chat", name, demo)
	}
	registerGGUF(t, f, adsEng, "adchat", "a1", demo)
	if n, err := f.validator.Pass(ctx); err != nil || n != 4 {
		t.Fatalf("pass = %d, %v; want 4", n, err)
	}
	type done struct {
		name string
		at   int64
	}
	var order []done
	for _, v := range []struct{ model, name string }{{"chat", "r1"}, {"chat", "r2"}, {"chat", "r3"}, {"adchat", "a1"}} {
		var got registry.Version
		if v.model == "adchat" {
			got, err = f.reg.Version(ctx, adsEng, v.model, v.name)
		} else {
			got, err = f.reg.Version(ctx, f.eng, v.model, v.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got.Validation == nil || got.Validation.FinishedAt == nil {
			t.Fatalf("%s: %+v, want finished", v.name, got.Validation)
		}
		order = append(order, done{v.name, got.Validation.FinishedAt.UnixMicro()})
	}
	slices.SortFunc(order, func(a, b done) int { return int(a.at - b.at) })
	var names []string
	for _, d := range order {
		names = append(names, d.name)
	}
	if want := []string{"r1", "a1", "r2", "r3"}; !slices.Equal(names, want) {
		t.Errorf("validated in the order %v, want %v (round-robin by team)", names, want)
	}
}
