package app

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/cli"
)

// TestGeneratedClientAndLoginOnTheDevStack is what a user of another
// language's tooling and a user at a terminal meet on the dev stack:
//   - a Go client generated from the served OpenAPI document by
//     oapi-codegen v2.8.2 (a tool of its own module, internal/oapitool,
//     never the product's go.mod) compiles, lists and reads endpoints with
//     the risk key, and gets another team's endpoint as a typed 404
//     problem;
//   - `modelplane login` signs in against the dev identity provider with a
//     loopback redirect (the test plays the browser by following it) and
//     the API takes the token.
func TestGeneratedClientAndLoginOnTheDevStack(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to generate and build a client with")
	}
	oneDevAtATime(t)
	dir, err := os.MkdirTemp("", "mp-dev-clients-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, stop := startDev(t, filepath.Join(dir, ".modelplane"), 0)
	defer stop()
	env := readEnvFile(d.EnvFile)

	t.Run("generated client", func(t *testing.T) {
		spec := filepath.Join(t.TempDir(), "openapi.json")
		if err := os.WriteFile(spec, []byte(get(t, env["MP_API"]+"/openapi.json", "")), 0o644); err != nil {
			t.Fatal(err)
		}
		mod := t.TempDir()
		gen := exec.Command("go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "main", "-o", filepath.Join(mod, "client.go"), spec)
		gen.Dir = filepath.Join("..", "internal", "oapitool")
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("oapi-codegen: %v\n%s", err, out)
		}
		for name, src := range map[string]string{"main.go": "main.go.txt", "go.mod": "go.mod.txt"} {
			b, err := os.ReadFile(filepath.Join("testdata", "oapiclient", src))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(mod, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		goCmd := func(args ...string) string {
			t.Helper()
			c := exec.Command("go", args...)
			c.Dir = mod
			c.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		goCmd("mod", "tidy")
		goCmd("build", "-o", "check", ".")
		run := exec.Command(filepath.Join(mod, "check"))
		run.Env = append(os.Environ(), "MP_API="+env["MP_API"], "MP_API_KEY="+env["MP_RISK_KEY"], "MP_OTHER_KEY="+env["MP_SEARCH_KEY"])
		out, err := run.CombinedOutput()
		t.Logf("generated client:\n%s", out)
		if err != nil {
			t.Fatalf("the generated client failed: %v", err)
		}
		for _, want := range []string{"endpoint fraud-scoring model fraud-detector", "get fraud-scoring", "problem 404 not found"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("the generated client printed no %q", want)
			}
		}
	})

	t.Run("login", func(t *testing.T) {
		var out, errb bytes.Buffer
		cfgDir := t.TempDir()
		getenv := func(k string) string { return map[string]string{"MP_API": env["MP_API"]}[k] }
		code := cli.Run(t.Context(), []string{"login", "--login-hint", "risk-admin@example.com"}, cli.Env{Stdout: &out, Stderr: &errb,
			Getenv: getenv, ConfigDir: cfgDir, OpenBrowser: func(u string) error {
				resp, err := http.Get(u) // the IdP redirects to the client's loopback port
				if err != nil {
					return err
				}
				return resp.Body.Close()
			}})
		if code != 0 || !strings.Contains(errb.String(), "as risk-admin@example.com") {
			t.Fatalf("login: exit %d\n%s%s", code, out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		code = cli.Run(t.Context(), []string{"endpoints", "list"}, cli.Env{Stdout: &out, Stderr: &errb, Getenv: getenv, ConfigDir: cfgDir})
		if code != 0 || !strings.Contains(out.String(), "fraud-scoring") {
			t.Errorf("endpoints list with the login's token: exit %d\n%s%s", code, out.String(), errb.String())
		}
	})
}
