package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// openAPIDoc is the part of an OpenAPI 3 document the tests read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string                     `json:"operationId"`
	Parameters  []openAPIParam             `json:"parameters"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

type openAPIParam struct {
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// TestOpenAPIDocument checks that the served document is OpenAPI 3 and lists
// exactly the routes the server answers under /api/v1, each with its path
// parameters declared.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)

	// The document is public: no Authorization header.
	r := e.call(t, "", http.MethodGet, "/openapi.json", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/openapi.json = %d %s; want 200", r.status, r)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q; want 3.x", doc.OpenAPI)
	}
	if doc.Info.Title == "" || doc.Info.Version == "" {
		t.Errorf("info = %+v; want a title and a version", doc.Info)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/api/v1" {
		t.Errorf("servers = %+v; want one, /api/v1", doc.Servers)
	}
	if y := e.call(t, "", http.MethodGet, "/openapi.yaml", nil); y.status != http.StatusOK || !strings.Contains(string(y.body), "openapi: 3.") {
		t.Errorf("GET /api/v1/openapi.yaml = %d; want 200 with an openapi: 3.x document", y.status)
	}

	var documented []string
	ids := map[string]string{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(openAPIMethods, method) {
				continue // "parameters", "summary" and the like
			}
			route := strings.ToUpper(method) + " " + path
			documented = append(documented, route)
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Errorf("%s: %v", route, err)
				continue
			}
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", route)
			} else if other, dup := ids[op.OperationID]; dup {
				t.Errorf("%s and %s share operationId %s", route, other, op.OperationID)
			}
			ids[op.OperationID] = route
			if len(op.Responses) == 0 {
				t.Errorf("%s documents no responses", route)
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !slices.Contains(op.Parameters, openAPIParam{Name: m[1], In: "path", Required: true}) {
					t.Errorf("%s does not declare the required path parameter %s", route, m[1])
				}
			}
		}
	}

	served := apiRoutes(t, e.ts.Config.Handler)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in the OpenAPI document", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("operation %s is in the OpenAPI document but not served", r)
		}
	}
	// The endpoint carries its replicas and why it could not be placed; a
	// node its GPUs and their slices.
	for schema, props := range map[string][]string{
		"Endpoint":  {"replicas", "placement_error", "status"},
		"Replica":   {"name", "version", "node", "state", "addr", "reason", "gpu_type", "profile", "slots"},
		"Node":      {"name", "state", "heartbeat_age_seconds", "slices", "slices_used", "gpus"},
		"GPU":       {"type", "memory_mb", "util_pct", "memory_used_mb", "slices"},
		"SliceView": {"profile", "replica", "team", "endpoint", "version", "replica_state"},
	} {
		for _, p := range props {
			if _, ok := doc.Components.Schemas[schema].Properties[p]; !ok {
				t.Errorf("schema %s has no property %s", schema, p)
			}
		}
	}
	if len(served) < 15 {
		t.Errorf("walked only %d API routes %v; the route walk is broken", len(served), served)
	}
}
