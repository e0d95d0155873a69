package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIEveryOperationDocumentsItsProblems reads the served document:
// no operation lacks a 4xx answer, each 4xx is problem+json, and the ones
// an operation's shape implies are there (404 with a path parameter, 400
// with a body, 401 everywhere, 403 behind a credential).
func TestOpenAPIEveryOperationDocumentsItsProblems(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.call(t, "", http.MethodGet, "/openapi.json", nil)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(openAPIMethods, method) {
				continue
			}
			n++
			var op struct {
				Parameters  []openAPIParam  `json:"parameters"`
				RequestBody json.RawMessage `json:"requestBody"`
				Security    *[]any          `json:"security"`
				Responses   map[string]struct {
					Content map[string]json.RawMessage `json:"content"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			route := strings.ToUpper(method) + " " + path
			var fours []string
			for code, resp := range op.Responses {
				if !strings.HasPrefix(code, "4") {
					continue
				}
				fours = append(fours, code)
				if _, ok := resp.Content["application/problem+json"]; !ok {
					t.Errorf("%s: %s is not documented as application/problem+json", route, code)
				}
			}
			if len(fours) == 0 {
				t.Errorf("%s documents no 4xx answer", route)
				continue
			}
			want := []string{"401"}
			if op.RequestBody != nil {
				want = append(want, "400")
			}
			if op.Security == nil || len(*op.Security) > 0 {
				want = append(want, "403")
			}
			if slices.ContainsFunc(op.Parameters, func(p openAPIParam) bool { return p.In == "path" }) {
				want = append(want, "404")
			}
			for _, w := range want {
				if !slices.Contains(fours, w) {
					t.Errorf("%s documents %v; want %s among them", route, fours, w)
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("read only %d operations; the document walk is broken", n)
	}
}
