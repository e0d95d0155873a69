package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"modelplane/auth"
	"modelplane/db"
)

func TestAPISmoke(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	status, body := e.api(e.Keys["risk-admin"], http.MethodGet, "/endpoints", nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"risk-endpoint"`) || strings.Contains(string(body), "search-endpoint") {
		t.Fatalf("GET /endpoints as risk admin = %d %s; want 200 with only risk-endpoint", status, body)
	}
}

// The helpers below are shared by the API and portal tests. Unlike e.api
// they take the calling (sub)test's t, so parallel subtests fail themselves,
// and they return the response headers too.

// payload is a request body that can be sent any number of times.
type payload struct {
	contentType string
	body        []byte
}

func jsonPayload(v any) *payload {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &payload{contentType: "application/json", body: b}
}

func formPayload(v url.Values) *payload {
	return &payload{contentType: "application/x-www-form-urlencoded", body: []byte(v.Encode())}
}

// multipartPayload builds a multipart body from ordered (name, filename,
// content) parts; filename "" makes a plain form field.
func multipartPayload(parts ...[3]string) *payload {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p[1] == "" {
			h.Set("Content-Disposition", `form-data; name="`+p[0]+`"`)
		} else {
			h.Set("Content-Disposition", `form-data; name="`+p[0]+`"; filename="`+p[1]+`"`)
			h.Set("Content-Type", "application/octet-stream")
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			panic(err)
		}
		_, _ = pw.Write([]byte(p[2]))
	}
	_ = w.Close()
	return &payload{contentType: w.FormDataContentType(), body: b.Bytes()}
}

// versionUpload is a multipart version registration of one safetensors file.
func versionUpload(name string) *payload {
	files := map[string][]byte{"model.safetensors": safetensorsFile("upload-" + name)}
	meta, _ := json.Marshal(map[string]any{"name": name, "runtime": "onnxruntime", "resources": map[string]any{"gpu_count": 1, "gpu_memory_mb": 1024}})
	return multipartPayload([3]string{"metadata", "", string(meta)}, [3]string{"manifest", "", string(manifestOf(files))},
		[3]string{"model.safetensors", "model.safetensors", string(files["model.safetensors"])})
}

// versionExternal is a JSON version registration of an artifact kept elsewhere.
func versionExternal(name string) *payload {
	files := map[string][]byte{"model.safetensors": safetensorsFile("external-" + name)}
	return jsonPayload(map[string]any{
		"metadata": map[string]any{"name": name, "runtime": "onnxruntime", "format": "safetensors", "artifact_uri": "s3://bucket/" + name},
		"manifest": json.RawMessage(manifestOf(files)),
	})
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return string(r.body) }

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// send performs one request against the test server; path is absolute.
func (e *testEnv) send(t testing.TB, method, path string, p *payload, mod func(*http.Request)) response {
	t.Helper()
	var rd io.Reader
	if p != nil {
		rd = bytes.NewReader(p.body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if p != nil {
		req.Header.Set("Content-Type", p.contentType)
	}
	if mod != nil {
		mod(req)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// call calls /api/v1 with an API key ("" for none) and extra header pairs.
func (e *testEnv) call(t testing.TB, key, method, path string, p *payload, headers ...string) response {
	t.Helper()
	return e.send(t, method, "/api/v1"+path, p, func(r *http.Request) {
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
	})
}

// getJSON calls the API and decodes a 200 response into v.
func (e *testEnv) getJSON(t testing.TB, key, path string, v any) {
	t.Helper()
	r := e.call(t, key, http.MethodGet, path, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s = %d %s; want 200", path, r.status, r)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, r, err)
	}
}

// session is a signed-in portal user.
type session struct {
	token, csrf string
}

// signIn starts a portal session for a demo user directly in the store, as
// the OIDC callback would.
func (e *testEnv) signIn(t testing.TB, email string) session {
	t.Helper()
	ctx := context.Background()
	u, err := db.New(e.pool).UserGetByEmail(ctx, email)
	if err != nil {
		t.Fatalf("user %s: %v", email, err)
	}
	tok, csrf, err := e.srv.Sessions.Create(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	return session{token: tok, csrf: csrf}
}

// portal calls a portal page with the session cookie. A url-encoded form
// also carries the CSRF token in the X-CSRF-Token header, as htmx sends it
// (hx-headers on <body>); a multipart form carries it as its first part only,
// as the non-boosted upload form does.
func (e *testEnv) portal(t testing.TB, s session, method, path string, p *payload) response {
	t.Helper()
	return e.send(t, method, path, p, func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: s.token})
		if p != nil && p.contentType == "application/x-www-form-urlencoded" {
			r.Header.Set("X-CSRF-Token", s.csrf)
		}
	})
}

// problem checks that r is an application/problem+json error with status
// want and returns it decoded.
func problem(t testing.TB, what string, r response, want int) problemDoc {
	t.Helper()
	var p problemDoc
	if r.status != want {
		t.Errorf("%s = %d %s; want %d", what, r.status, r, want)
		return p
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s Content-Type = %q; want application/problem+json", what, ct)
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Errorf("%s: body %s is not a problem document: %v", what, r, err)
	}
	if p.Status != want {
		t.Errorf("%s: problem status = %d; want %d", what, p.Status, want)
	}
	return p
}

// problemDoc is the RFC 9457 document every API error is.
type problemDoc struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
}

// locations lists the error locations of a problem.
func (p problemDoc) locations() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Location)
	}
	return out
}

// names reports whether a problem has an error at location, or under it
// (location "body.weights" matches "body.weights[0].version").
func (p problemDoc) names(location string) bool {
	for _, e := range p.Errors {
		if e.Location == location || strings.HasPrefix(e.Location, location+".") || strings.HasPrefix(e.Location, location+"[") {
			return true
		}
	}
	return false
}

// routeList walks the chi route tree and returns "METHOD /pattern" for every
// route, sorted.
func routeList(t testing.TB, h http.Handler) []string {
	t.Helper()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("handler %T is not a chi route tree", h)
	}
	var out []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// apiRoutes are the routes under /api/v1, with the prefix cut, except the
// OpenAPI document itself.
func apiRoutes(t testing.TB, h http.Handler) []string {
	t.Helper()
	var out []string
	for _, r := range routeList(t, h) {
		method, path, _ := strings.Cut(r, " ")
		rest, ok := strings.CutPrefix(path, "/api/v1/")
		if !ok || isOpenAPIDoc("/"+rest) {
			continue
		}
		// A trailing wildcard is the route's last parameter, named as the
		// OpenAPI document names it.
		if strings.HasSuffix(rest, "/files/*") {
			rest = strings.TrimSuffix(rest, "*") + "{path}"
		}
		out = append(out, method+" /"+rest)
	}
	return out
}

// portalRouteList are the routes outside /api/v1.
func portalRouteList(t testing.TB, h http.Handler) []string {
	t.Helper()
	var out []string
	for _, r := range routeList(t, h) {
		_, path, _ := strings.Cut(r, " ")
		if !strings.HasPrefix(path, "/api/") {
			out = append(out, r)
		}
	}
	return out
}

func isOpenAPIDoc(path string) bool {
	switch path {
	case "/openapi.json", "/openapi.yaml", "/openapi-3.0.json", "/openapi-3.0.yaml":
		return true
	}
	return false
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// hasParam reports whether a "METHOD /pattern" route takes a path parameter.
func hasParam(route string) bool { return pathParam.MatchString(route) }

// fill substitutes path parameters; a parameter without a value fails the
// test, so a new kind of parameter cannot slip past the matrix.
func fill(t testing.TB, pattern string, values map[string]string) string {
	t.Helper()
	return pathParam.ReplaceAllStringFunc(pattern, func(m string) string {
		name := m[1 : len(m)-1]
		v, ok := values[name]
		if !ok {
			t.Fatalf("%s: no test value for path parameter {%s}; add one", pattern, name)
		}
		return url.PathEscape(v)
	})
}

func isWrite(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete
}
