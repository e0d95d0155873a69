package handlers

import (
	"net/http"
	"reflect"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// documentProblems adds to every operation of doc the problem+json answers
// it can give, so that generated clients get typed errors: 400 for bad
// input (a body or a query), 401 for a missing or bad credential, 403 for a
// role that may not (operations behind a credential), 404 for an object
// that is not there or not the caller's (path parameters), 409 for a write
// that conflicts, 413 for a body over the limit and 422 for an
// Idempotency-Key reused with another body (POST). An answer an operation
// already documents is kept. The API has no rate limit of its own (the
// gateway's 429 is on the inference path), so no operation lists 429.
func documentProblems(doc *huma.OpenAPI) {
	schema := huma.Registry(doc.Components.Schemas).Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")
	for _, item := range doc.Paths {
		for method, op := range map[string]*huma.Operation{
			http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
			http.MethodPatch: item.Patch, http.MethodDelete: item.Delete,
		} {
			if op == nil {
				continue
			}
			for _, code := range problemStatuses(doc, method, op) {
				key := strconv.Itoa(code)
				if _, ok := op.Responses[key]; ok {
					continue
				}
				if op.Responses == nil {
					op.Responses = map[string]*huma.Response{}
				}
				op.Responses[key] = &huma.Response{Description: http.StatusText(code),
					Content: map[string]*huma.MediaType{"application/problem+json": {Schema: schema}}}
			}
		}
	}
}

// problemStatuses are the 4xx answers op, called with method, can give.
func problemStatuses(doc *huma.OpenAPI, method string, op *huma.Operation) []int {
	var query, path bool
	for _, p := range op.Parameters {
		switch p.In {
		case "query":
			query = true
		case "path":
			path = true
		}
	}
	body := op.RequestBody != nil
	write := method != http.MethodGet
	secured := op.Security == nil && len(doc.Security) > 0 || len(op.Security) > 0
	out := []int{http.StatusUnauthorized}
	if body || query {
		out = append(out, http.StatusBadRequest)
	}
	if secured {
		out = append(out, http.StatusForbidden)
	}
	if path {
		out = append(out, http.StatusNotFound)
	}
	if write {
		out = append(out, http.StatusConflict)
	}
	if body {
		out = append(out, http.StatusRequestEntityTooLarge)
	}
	if method == http.MethodPost {
		out = append(out, http.StatusUnprocessableEntity)
	}
	return out
}
