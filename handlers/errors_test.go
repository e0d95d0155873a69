package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
)

// TestInvalidInputIs400 checks the API's own hooks without a database:
// huma's validation failures leave as 400 problems with huma's body
// otherwise unchanged, a 422 of ours stays 422, and huma's package-level
// constructor is left as huma ships it.
func TestInvalidInputIs400(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	api := newHumaAPI(r)
	type in struct {
		Body struct {
			Name  string `json:"name" maxLength:"3"`
			Count int    `json:"count"`
		}
	}
	huma.Register(api, huma.Operation{OperationID: "make", Method: http.MethodPost, Path: "/things"},
		func(ctx context.Context, in *in) (*struct{}, error) {
			if in.Body.Name == "bad" {
				return nil, huma.Error422UnprocessableEntity("file rejected")
			}
			return nil, nil
		})
	tests := []struct {
		name   string
		body   string
		status int
		want   string // the whole problem document, as huma.NewError(400, ...) wrote it under the old global override
	}{
		{"wrong type", `{"name": "a", "count": "two"}`, 400,
			`{"title":"Bad Request","status":400,"detail":"validation failed","errors":[{"message":"expected integer","location":"body.count","value":"two"}]}`},
		{"too long", `{"name": "abcd", "count": 1}`, 400,
			`{"title":"Bad Request","status":400,"detail":"validation failed","errors":[{"message":"expected length <= 3","location":"body.name","value":"abcd"}]}`},
		{"unknown field", `{"name": "a", "count": 1, "x": 1}`, 400,
			`{"title":"Bad Request","status":400,"detail":"validation failed","errors":[{"message":"unexpected property","location":"body.x","value":{"count":1,"name":"a","x":1}}]}`},
		{"malformed json", `{"name":`, 400, ""},
		{"our own 422", `{"name": "bad", "count": 1}`, 422,
			`{"title":"Unprocessable Entity","status":422,"detail":"file rejected"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/things", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			r.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
			var doc huma.ErrorModel
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatalf("body %s: %v", rec.Body, err)
			}
			if doc.Status != tt.status || doc.Title != http.StatusText(tt.status) {
				t.Errorf("status, title in body = %d, %q; want %d, %q", doc.Status, doc.Title, tt.status, http.StatusText(tt.status))
			}
			if got := strings.TrimSpace(rec.Body.String()); tt.want != "" && got != tt.want {
				t.Errorf("body = %s\nwant   %s", got, tt.want)
			}
		})
	}
	if got := huma.NewError(http.StatusUnprocessableEntity, "validation failed").GetStatus(); got != http.StatusUnprocessableEntity {
		t.Errorf("huma.NewError(422, ...) = %d: the package variable was overwritten", got)
	}
}
