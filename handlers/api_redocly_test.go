package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// redoclyVersion is the npm @redocly/cli package the lint runs, installed by
// scripts/install-deps.sh test into the cache directory outside the clone.
const redoclyVersion = "2.77.0"

// redoclyCLI is the installed CLI's entry script: under $MP_REDOCLY_CLI_DIR
// (a node_modules parent) or the cache install-deps.sh fills.
func redoclyCLI(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MP_REDOCLY_CLI_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "modelplane", "redocly-cli-"+redoclyVersion)
	}
	cli := filepath.Join(dir, "node_modules", "@redocly", "cli", "bin", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the npm @redocly/cli package %s is not installed at %s (run scripts/install-deps.sh test): %v", redoclyVersion, dir, err)
	}
	return cli
}

// redoclyProblem is one finding of `redocly lint --format json`.
type redoclyProblem struct {
	RuleID   string `json:"ruleId"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Location []struct {
		Pointer string `json:"pointer"`
	} `json:"location"`
}

// redoclyLint runs `redocly lint` with handlers/redocly.yaml and args on api
// (a URL or a file) and returns its findings.
func redoclyLint(t *testing.T, node, cli, api string, args ...string) []redoclyProblem {
	t.Helper()
	args = append([]string{cli, "lint", "--config", "redocly.yaml", "--lint-config", "error",
		"--format", "json", "--max-problems", "10000"}, args...)
	cmd := exec.CommandContext(t.Context(), node, append(args, api)...)
	// No usage report and no update notice: the test reaches nothing but the
	// served document.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_NOTIFICATIONS=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run() // exits 1 when it finds an error; the report says which
	var report struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
		} `json:"totals"`
		Version  string           `json:"version"`
		Problems []redoclyProblem `json:"problems"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &report); jerr != nil {
		t.Fatalf("redocly lint %s: %v; no JSON report (%v): %s\n%s", api, err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	if report.Version != redoclyVersion {
		t.Fatalf("redocly lint ran version %q; want %s", report.Version, redoclyVersion)
	}
	if n := report.Totals.Errors + report.Totals.Warnings; n != len(report.Problems) {
		t.Fatalf("redocly lint %s: totals %+v but %d problems listed", api, report.Totals, len(report.Problems))
	}
	return report.Problems
}

// TestOpenAPIRedoclyLint runs Redocly's CLI, with the rules of
// handlers/redocly.yaml, on the documents the API serves (OpenAPI 3.1 and
// 3.0): no error and no warning, so that every operation documents its 4xx
// answers as problem+json and a rule that does not fit is switched off in
// the config with its reason, never left to warn. The same lint of a copy with one
// operation's 4xx answers removed, and another's problem+json turned into
// plain JSON, must fail on exactly those, so a config the CLI stops reading
// cannot pass for a clean document.
func TestOpenAPIRedoclyLint(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH (scripts/install-deps.sh test installs it): %v", err)
	}
	cli := redoclyCLI(t)
	e := newTestEnv(t)

	var clean []string
	// Both versions the API serves. The 3.0 one is huma's downgrade of the
	// 3.1 one, which keeps a property's description beside its $ref: 3.1
	// allows it, 3.0 tools ignore it (the property loses its description
	// there, nothing else), so spec-ref-siblings is skipped for 3.0 alone.
	for doc, args := range map[string][]string{
		"/openapi.json":     nil,
		"/openapi-3.0.json": {"--skip-rule", "spec-ref-siblings"},
	} {
		for _, p := range redoclyLint(t, node, cli, e.ts.URL+"/api/v1"+doc, args...) {
			where := ""
			if len(p.Location) > 0 {
				where = p.Location[0].Pointer
			}
			t.Errorf("%s: %s %s at %s: %s", doc, p.Severity, p.RuleID, where, p.Message)
			if doc == "/openapi.json" {
				clean = append(clean, p.Severity+" "+p.RuleID)
			}
		}
	}

	r := e.call(t, "", http.MethodGet, "/openapi.json", nil)
	var doc map[string]any
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	op := func(path, method string) map[string]any {
		t.Helper()
		o, ok := doc["paths"].(map[string]any)[path].(map[string]any)[method].(map[string]any)
		if !ok {
			t.Fatalf("the document has no %s %s", method, path)
		}
		return o["responses"].(map[string]any)
	}
	list := op("/endpoints", "get")
	for code := range list {
		if code[0] == '4' {
			delete(list, code)
		}
	}
	get := op("/endpoints/{endpoint}", "get")["404"].(map[string]any)
	content := get["content"].(map[string]any)
	content["application/json"] = content["application/problem+json"]
	delete(content, "application/problem+json")
	broken, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range redoclyLint(t, node, cli, file) {
		got = append(got, p.Severity+" "+p.RuleID)
	}
	// What the served document had (reported above) and the two breaks.
	want := append(clean, "error operation-4xx-response", "error operation-4xx-problem-details-rfc7807")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("lint of the document with GET /endpoints' 4xx removed and GET /endpoints/{endpoint}'s 404 as plain JSON found %v; want %v (the served document's findings and one of each rule)", got, want)
	}
}
