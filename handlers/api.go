package handlers

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"github.com/go-chi/chi/v5"
)

// newAPI builds the huma API on the /api/v1 sub-router. The OpenAPI document
// is generated from the same registrations that serve the routes.
func (s *Server) newAPI(r chi.Router) huma.API {
	api := newHumaAPI(r)
	s.registerAPI(api)
	documentProblems(api.OpenAPI())
	return api
}

// newHumaAPI is the API with its configuration and middleware, before any
// operation is registered (huma binds an operation's middleware when it is
// registered).
func newHumaAPI(r chi.Router) huma.API {
	cfg := huma.DefaultConfig("modelplane API", "1.0.0")
	cfg.OpenAPIPath = "/openapi"
	cfg.DocsPath = ""
	cfg.SchemasPath = ""
	cfg.CreateHooks = nil
	cfg.Servers = []*huma.Server{{URL: "/api/v1"}}
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API key (mpk_...) or an OIDC access/ID token."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	cfg.Transformers = []huma.Transformer{invalidInputAs400}
	api := humachi.New(r, cfg)
	api.UseMiddleware(withStatusOverride)
	return api
}

// op fills the parts every operation shares.
func (s *Server) op(id, method, path, summary string, tags ...string) huma.Operation {
	o := huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Tags: tags, MaxBodyBytes: s.MaxBodyBytes}
	if method == http.MethodPost {
		o.DefaultStatus = http.StatusCreated
	}
	return o
}

// binaryContent documents a body of raw bytes as application/octet-stream
// with no schema, which is how OpenAPI 3.1 says "any bytes"; huma's 3.0
// downgrade turns it into 3.0's string of format binary. A schema of
// format binary instead would carry 3.1's contentMediaType into the 3.0
// document, where it is not allowed (Redocly's struct rule).
func binaryContent() map[string]*huma.MediaType {
	return map[string]*huma.MediaType{"application/octet-stream": {}}
}

// Page is the cursor-pagination query every list takes.
type Page struct {
	Cursor string `query:"cursor" doc:"Opaque cursor from a previous page's next_cursor."`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Items per page."`
}

// after decodes the cursor into the id to continue after.
func (p Page) after() (int64, error) {
	if p.Cursor == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(p.Cursor)
	if err != nil {
		return 0, huma.Error400BadRequest("bad cursor", &huma.ErrorDetail{Location: "query.cursor", Message: "is not a cursor from this API"})
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || id < 0 {
		return 0, huma.Error400BadRequest("bad cursor", &huma.ErrorDetail{Location: "query.cursor", Message: "is not a cursor from this API"})
	}
	return id, nil
}

// List is one page of items.
type List[T any] struct {
	Body struct {
		Items      []T    `json:"items"`
		NextCursor string `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page."`
	}
}

// page trims a limit+1 result to limit and sets the cursor when there is more.
func page[T any](items []T, limit int, id func(T) int64) *List[T] {
	out := &List[T]{}
	if len(items) > limit {
		items = items[:limit]
		out.Body.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id(items[len(items)-1]), 10)))
	}
	out.Body.Items = items
	return out
}

// One wraps a single object as a response body.
type One[T any] struct {
	Body T
}
