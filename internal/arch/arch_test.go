package arch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A pattern names packages: "modelplane/sim/..." is modelplane/sim and every
// package below it, "github.com/jackc/pgx..." every import path starting so
// (pgx/v5, pgx/v5/pgxpool), and anything else exactly one import path.

// ioClients are the packages a pure package must never reach: the
// generated queries and the PostgreSQL, ClickHouse and NATS clients.
var ioClients = []string{
	"modelplane/db/...",
	"github.com/jackc/pgx...",
	"github.com/ClickHouse/clickhouse-go...",
	"github.com/nats-io/nats.go...",
}

// viewNeutral are the modelplane packages web may import besides its own
// and static: they format values for display and know no domain rule.
var viewNeutral = []string{"modelplane/money"}

// httpLayer are the packages of the HTTP layer, which domain packages must
// not import.
var httpLayer = []string{
	"github.com/go-chi/...",
	"github.com/danielgtaylor/huma...",
	"github.com/a-h/templ...",
	"modelplane/handlers/...",
	"modelplane/web/...",
}

// aboveDomain are the packages allowed to sit on top of the domain layer:
// commands, assembly, benchmarks, the HTTP layer and the test harness.
var aboveDomain = []string{
	"modelplane/cmd/...",
	"modelplane/app/...",
	"modelplane/controlplane/...",
	"modelplane/bench/...",
	"modelplane/handlers/...",
	"modelplane/web/...",
	"modelplane/internal/...",
}

// simulator is the simulator proper; its pure leaf sim/profile is not part
// of it, and neither is the engine it runs (package engine).
var simulator = []string{"modelplane/sim", "modelplane/sim/replica/...", "modelplane/sim/scenario/..."}

type rule struct {
	name      string   // what the rule protects, printed with a violation
	importers []string // the packages the rule constrains
	except    []string // importers exempt from it
	forbidden []string // what they must not import
	allowed   []string // exempt from forbidden
	stdOnly   bool     // forbidden is every package outside the standard library
	direct    bool     // only direct imports count, not transitive ones
}

var rules = []rule{{
	name:      "pure packages do no I/O",
	importers: []string{"modelplane/engine", "modelplane/sim/...", "modelplane/judge/...", "modelplane/graph/...", "modelplane/placement/...", "modelplane/autoscale/...", "modelplane/drift/stat/...", "modelplane/readcache/...", "modelplane/money/...", "modelplane/demo/...", "modelplane/gguf/...", "modelplane/llm/..."},
	forbidden: ioClients,
}, {
	name:      "leaf contracts import only the standard library",
	importers: []string{"modelplane/busapi", "modelplane/serveapi", "modelplane/engine", "modelplane/drift/stat", "modelplane/money", "modelplane/sim/profile", "modelplane/gguf"},
	stdOnly:   true,
}, {
	name:      "the data plane never reads the database",
	importers: []string{"modelplane/gateway/...", "modelplane/agent/...", "modelplane/runtime/..."},
	forbidden: []string{"modelplane/db/..."},
}, {
	name:      "web renders typed view structs and knows no domain package",
	importers: []string{"modelplane/web/..."},
	forbidden: []string{"modelplane/..."},
	allowed:   append([]string{"modelplane/web/...", "modelplane/static/..."}, viewNeutral...),
}, {
	name:      "TLS from files is a standard-library leaf every process, data plane included, may use",
	importers: []string{"modelplane/tlscert"},
	stdOnly:   true,
}, {
	name:      "the build's own version is a leaf both sides of the API import",
	importers: []string{"modelplane/buildinfo"},
	stdOnly:   true,
}, {
	// The CLI can do what the API lets a key do, nothing more: a domain
	// rule it imported would be a second copy that drifts from the
	// server's.
	name:      "the command-line client speaks the REST API only, knowing no domain package or the database",
	importers: []string{"modelplane/cli/..."},
	forbidden: []string{"modelplane/..."},
	allowed:   []string{"modelplane/cli/...", "modelplane/buildinfo"},
}, {
	name:      "handlers call domain services, never the queries",
	importers: []string{"modelplane/handlers/..."},
	forbidden: []string{"modelplane/db/..."},
	direct:    true,
}, {
	name:      "domain packages know nothing of HTTP routing or pages",
	importers: []string{"modelplane/..."},
	except:    aboveDomain,
	forbidden: httpLayer,
}, {
	name:      "only the node agent, commands and benchmarks run the simulator; domain packages use sim/profile",
	importers: []string{"modelplane/..."},
	// The built-in runtime serves with package engine, never the simulator.
	except:    append([]string{"modelplane/sim/...", "modelplane/agent/..."}, aboveDomain...),
	forbidden: simulator,
}, {
	name:      "the simulator shares drift's math through drift/stat, not drift",
	importers: []string{"modelplane/sim/..."},
	forbidden: []string{"modelplane/drift"},
}, {
	name:      "the fleet's packages format money with package money, not chargeback",
	importers: fleetPackages,
	forbidden: []string{"modelplane/chargeback/..."},
}, {
	name:      "rollouts write routes through the routes owner, not the fleet's packages",
	importers: []string{"modelplane/rollout/..."},
	forbidden: fleetPackages,
}, {
	name:      "endpoints take their autoscaling policy from autoscale, not the fleet's packages",
	importers: []string{"modelplane/endpoint/..."},
	forbidden: fleetPackages,
}, {
	name:      "what is stored of a replica's reports is a value leaf: no I/O",
	importers: []string{"modelplane/replica/..."},
	forbidden: ioClients,
}}

// fleetPackages are the control plane's fleet, split by what each owns:
// reconcile and intake (fleet), quotas, the autoscaling loop and node
// trust. The pure decision package autoscale is not among them.
var fleetPackages = []string{"modelplane/fleet/...", "modelplane/quota/...", "modelplane/autoscaler/...", "modelplane/trust/..."}

// TestImportDirections loads the package graph of the module (without test
// files: a test may import whatever it needs to set up) and fails on every
// import that points the wrong way, naming the rule and the shortest path
// from the importer to the forbidden package.
func TestImportDirections(t *testing.T) {
	t.Parallel()
	g := load(t)
	for _, r := range rules {
		for _, pat := range r.importers {
			// Every importer pattern must match a package, so a misspelt
			// rule cannot pass by matching nothing.
			if !slices.ContainsFunc(g.local, func(p string) bool { return match(pat, p) }) {
				t.Errorf("rule %q: importer pattern %s matches no package", r.name, pat)
			}
		}
		for _, from := range g.local {
			if !matchAny(r.importers, from) || matchAny(r.except, from) {
				continue
			}
			for _, path := range g.violations(r, from) {
				if len(path) > 2 && matchAny(r.importers, path[1]) && !matchAny(r.except, path[1]) {
					continue // reported from path[1], where the wrong arrow starts
				}
				t.Errorf("wrong-way import %s → %s (%s):\n\t%s", from, path[len(path)-1], r.name, strings.Join(path, " → "))
			}
		}
	}
}

type graph struct {
	local   []string            // the module's packages, sorted
	imports map[string][]string // every package's direct imports
	std     map[string]bool     // standard-library packages
}

// violations returns, for each forbidden package from reaches, the shortest
// import path to it. The search does not go on through a forbidden
// package, so a violation is reported where it enters, not once for each
// package behind it.
func (g graph) violations(r rule, from string) [][]string {
	bad := func(p string) bool {
		if matchAny(r.allowed, p) {
			return false
		}
		if r.stdOnly {
			return !g.std[p]
		}
		return matchAny(r.forbidden, p)
	}
	prev := map[string]string{from: ""}
	queue := []string{from}
	var found [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range g.imports[p] {
			if _, seen := prev[q]; seen {
				continue
			}
			prev[q] = p
			if bad(q) {
				path := []string{q}
				for x := p; x != ""; x = prev[x] {
					path = append([]string{x}, path...)
				}
				found = append(found, path)
				continue
			}
			if !r.direct && !g.std[q] {
				queue = append(queue, q)
			}
		}
	}
	return found
}

// load runs go list over the module and returns its import graph.
func load(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard,Module,Error,DepsErrors", "modelplane/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	g := graph{imports: map[string][]string{}, std: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
			Module     *struct{ Path string }
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			t.Fatalf("go list %s: %s", p.ImportPath, e.Err)
		}
		g.imports[p.ImportPath] = p.Imports
		g.std[p.ImportPath] = p.Standard
		if p.Module != nil && p.Module.Path == "modelplane" {
			g.local = append(g.local, p.ImportPath)
		}
	}
	sort.Strings(g.local)
	if len(g.local) < 10 {
		t.Fatalf("go list found %d modelplane packages; want the whole module", len(g.local))
	}
	return g
}

func match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	if prefix, ok := strings.CutSuffix(pattern, "..."); ok {
		return strings.HasPrefix(path, prefix)
	}
	return path == pattern
}

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, path) })
}
