package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"modelplane/auth"
	"modelplane/db"
)

// portalNoRedirect is a client that returns redirects instead of following them.
var portalNoRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// portalUser is a signed-in portal session, made as the sign-in callback
// makes one, driven over plain HTTP like a browser without JavaScript.
type portalUser struct {
	t           *testing.T
	e           *testEnv
	email       string
	token, csrf string
}

// portalSignIn starts a session for a demo user (seeded by newTestEnv).
func portalSignIn(t *testing.T, e *testEnv, email string) *portalUser {
	t.Helper()
	ctx := context.Background()
	u, err := db.New(e.pool).UserGetByEmail(ctx, email)
	if err != nil {
		t.Fatalf("user %s: %v", email, err)
	}
	token, csrf, err := e.srv.Sessions.Create(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	return &portalUser{t: t, e: e, email: email, token: token, csrf: csrf}
}

// portalResponse is a response with its body read.
type portalResponse struct {
	*http.Response
	Body []byte
}

// doc parses the body as HTML.
func (r portalResponse) doc(t *testing.T) *goquery.Document {
	t.Helper()
	d, err := goquery.NewDocumentFromReader(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("parse HTML: %v", err)
	}
	return d
}

// cookie returns the response's Set-Cookie of that name, or nil.
func (r portalResponse) cookie(name string) *http.Cookie {
	for _, c := range r.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// portalRequest sends a request with the session cookie (none when token is
// "") and extra cookies; it does not follow redirects. header is name,
// value pairs.
func portalRequest(t *testing.T, e *testEnv, token, method, path, contentType string, body []byte, cookies []*http.Cookie, header ...string) portalResponse {
	t.Helper()
	req, err := http.NewRequest(method, e.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: token})
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := portalNoRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return portalResponse{Response: resp, Body: b}
}

// get loads a page.
func (u *portalUser) get(path string, cookies ...*http.Cookie) portalResponse {
	u.t.Helper()
	return portalRequest(u.t, u.e, u.token, http.MethodGet, path, "", nil, cookies)
}

// page loads a page that must answer 200 and parses it.
func (u *portalUser) page(path string) *goquery.Document {
	u.t.Helper()
	r := u.get(path)
	if r.StatusCode != http.StatusOK {
		u.t.Fatalf("GET %s as %s = %d, want 200\n%s", path, u.email, r.StatusCode, r.Body)
	}
	return r.doc(u.t)
}

// post sends a urlencoded form as is: it adds no CSRF token.
func (u *portalUser) post(path string, form url.Values, header ...string) portalResponse {
	u.t.Helper()
	return portalRequest(u.t, u.e, u.token, http.MethodPost, path, "application/x-www-form-urlencoded", []byte(form.Encode()), nil, header...)
}

// form is a urlencoded form carrying the session's CSRF token.
func (u *portalUser) form(pairs ...string) url.Values {
	v := url.Values{"csrf": {u.csrf}}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Add(pairs[i], pairs[i+1])
	}
	return v
}

// portalPart is one part of a multipart form: a field, or a file when
// filename is set.
type portalPart struct {
	name, filename string
	content        []byte
}

// portalMultipart encodes parts in order and returns the content type.
func portalMultipart(t *testing.T, parts ...portalPart) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p.filename != "" {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.filename))
			h.Set("Content-Type", "application/octet-stream")
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.name))
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(p.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

// portalText is the trimmed text of a selection with runs of space made one.
func portalText(s *goquery.Selection) string {
	return strings.Join(strings.Fields(s.Text()), " ")
}

// portalPages are the pages a signed-in team admin of risk can open.
var portalPages = []string{
	"/endpoints", "/endpoints/new", "/endpoints/risk-endpoint",
	"/models", "/models/new", "/models/risk-model", "/models/risk-model/versions/new", "/models/risk-model/versions/v1",
	"/team", "/audit", "/shared", "/endpoints/risk-endpoint/sharing",
}

// portalCSPDirectives parses a Content-Security-Policy header.
func portalCSPDirectives(policy string) map[string][]string {
	out := map[string][]string{}
	for _, d := range strings.Split(policy, ";") {
		f := strings.Fields(d)
		if len(f) > 0 {
			out[strings.ToLower(f[0])] = f[1:]
		}
	}
	return out
}

// portalCheckCSP fails unless the policy confines scripts to this site: a
// script-src (or default-src) of 'self' only, no 'unsafe-eval' or
// 'unsafe-inline' anywhere, no framing.
func portalCheckCSP(t *testing.T, where, policy string) {
	t.Helper()
	if policy == "" {
		t.Errorf("%s: no Content-Security-Policy header", where)
		return
	}
	d := portalCSPDirectives(policy)
	script, ok := d["script-src"]
	if !ok {
		script = d["default-src"]
	}
	if !slices.Equal(script, []string{"'self'"}) {
		t.Errorf("%s: script-src = %v, want only 'self' (policy %q)", where, script, policy)
	}
	for _, bad := range []string{"'unsafe-eval'", "'unsafe-inline'", "'wasm-unsafe-eval'", "data:", "*"} {
		for name, sources := range d {
			if (name == "script-src" || name == "default-src" || name == "style-src") && slices.Contains(sources, bad) {
				t.Errorf("%s: %s allows %s (policy %q)", where, name, bad, policy)
			}
		}
	}
	if !slices.Equal(d["frame-ancestors"], []string{"'none'"}) {
		t.Errorf("%s: frame-ancestors = %v, want 'none'", where, d["frame-ancestors"])
	}
	if _, ok := d["form-action"]; !ok {
		t.Errorf("%s: no form-action directive", where)
	}
}

// portalCheckMarkup fails on markup the CSP would block, so a page that works
// here works in a browser: inline scripts and styles, event handler
// attributes, javascript: URLs, scripts from elsewhere; and on htmx
// settings that would need eval.
func portalCheckMarkup(t *testing.T, where string, doc *goquery.Document) {
	t.Helper()
	doc.Find("script").Each(func(_ int, s *goquery.Selection) {
		src, ok := s.Attr("src")
		if !ok || !strings.HasPrefix(src, "/static/") {
			t.Errorf("%s: script %q is inline or not from /static/", where, goquery.NodeName(s)+" src="+src)
		}
	})
	if n := doc.Find("style").Length(); n > 0 {
		t.Errorf("%s: %d inline <style> elements; style-src 'self' blocks them", where, n)
	}
	doc.Find("*").Each(func(_ int, s *goquery.Selection) {
		for _, a := range s.Nodes[0].Attr {
			name := strings.ToLower(a.Key)
			switch {
			case name == "style":
				t.Errorf("%s: <%s style=%q>; style-src 'self' blocks inline styles", where, goquery.NodeName(s), a.Val)
			case strings.HasPrefix(name, "on"):
				t.Errorf("%s: <%s %s=...>; inline handlers do not run under the CSP", where, goquery.NodeName(s), a.Key)
			case strings.HasPrefix(strings.TrimSpace(strings.ToLower(a.Val)), "javascript:"):
				t.Errorf("%s: <%s %s=%q>", where, goquery.NodeName(s), a.Key, a.Val)
			case strings.HasPrefix(name, "hx-on"), name == "hx-vars", strings.HasPrefix(name, "data-hx-on"):
				t.Errorf("%s: <%s %s> needs eval", where, goquery.NodeName(s), a.Key)
			case (name == "hx-vals" || name == "hx-headers") && strings.HasPrefix(strings.TrimSpace(a.Val), "js:"),
				(name == "hx-vals" || name == "hx-headers") && strings.HasPrefix(strings.TrimSpace(a.Val), "javascript:"):
				t.Errorf("%s: <%s %s=%q> needs eval", where, goquery.NodeName(s), a.Key, a.Val)
			}
		}
	})
}

// TestPortalCSP checks the headers and the markup of every page: a CSP
// without unsafe-eval or unsafe-inline for scripts, htmx configured with
// allowEval off and selfRequestsOnly on, nothing inline that the CSP would
// block, and every state-changing form carrying the session's CSRF token as
// its first field.
func TestPortalCSP(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")

	// The sign-in page, signed out.
	login := portalRequest(t, e, "", http.MethodGet, "/login", "", nil, nil)
	if login.StatusCode != http.StatusOK {
		t.Fatalf("GET /login = %d", login.StatusCode)
	}
	portalCheckCSP(t, "/login", login.Header.Get("Content-Security-Policy"))
	// Its forms lead to the IdP (POST /login redirects there), so its
	// form-action must allow the IdP's origin; every other page keeps 'self'.
	idp, err := url.Parse(e.idp.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	fa := portalCSPDirectives(login.Header.Get("Content-Security-Policy"))["form-action"]
	if !slices.Contains(fa, "'self'") || !(slices.Contains(fa, idp.Scheme+"://"+idp.Host) || slices.Contains(fa, idp.Scheme+"://"+idp.Hostname()+":*")) {
		t.Errorf("/login: form-action %v does not allow the IdP at %s://%s: sign-in is blocked", fa, idp.Scheme, idp.Host)
	}
	ld := login.doc(t)
	portalCheckMarkup(t, "/login", ld)
	if n := ld.Find("button[data-user]").Length(); n != len(e.idp.Users()) {
		t.Errorf("/login lists %d demo users, want %d", n, len(e.idp.Users()))
	}

	for _, path := range portalPages {
		r := u.get(path)
		if r.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, r.StatusCode)
			continue
		}
		portalCheckCSP(t, path, r.Header.Get("Content-Security-Policy"))
		if fa := portalCSPDirectives(r.Header.Get("Content-Security-Policy"))["form-action"]; !slices.Equal(fa, []string{"'self'"}) {
			t.Errorf("%s: form-action = %v, want 'self'", path, fa)
		}
		if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options = %q, want nosniff", path, got)
		}
		if ct := r.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type = %q", path, ct)
		}
		doc := r.doc(t)
		portalCheckMarkup(t, path, doc)

		// htmx must never eval and only talk to this site.
		raw, ok := doc.Find(`meta[name="htmx-config"]`).Attr("content")
		if !ok {
			t.Errorf("%s: no htmx-config meta", path)
		} else {
			var cfg map[string]any
			if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
				t.Errorf("%s: htmx-config is not JSON: %v", path, err)
			}
			for key, want := range map[string]any{"allowEval": false, "selfRequestsOnly": true, "allowScriptTags": false, "includeIndicatorStyles": false} {
				if got, ok := cfg[key]; !ok || got != want {
					t.Errorf("%s: htmx-config %s = %v, want %v", path, key, got, want)
				}
			}
		}
		if got, _ := doc.Find(`meta[name="csrf-token"]`).Attr("content"); got != u.csrf {
			t.Errorf("%s: csrf-token meta = %q, want the session's token", path, got)
		}
		// htmx requests carry the token in a header, set once on the body.
		var hdr map[string]string
		hv, _ := doc.Find("body").Attr("hx-headers")
		if err := json.Unmarshal([]byte(hv), &hdr); err != nil || hdr["X-CSRF-Token"] != u.csrf || len(hdr) != 1 {
			t.Errorf("%s: body hx-headers = %q, want {\"X-CSRF-Token\": <session token>}", path, hv)
		}
		// A form posted without JavaScript carries it as its first field.
		doc.Find("form").Each(func(_ int, f *goquery.Selection) {
			method, _ := f.Attr("method")
			action, _ := f.Attr("action")
			if !strings.EqualFold(method, "post") {
				if f.AttrOr("hx-post", "") != "" {
					t.Errorf("%s: form %s has hx-post but method %q: without JavaScript it would GET", path, action, method)
				}
				return
			}
			first := f.Find("input, select, textarea, button").First()
			if first.AttrOr("name", "") != "csrf" || first.AttrOr("value", "") != u.csrf {
				t.Errorf("%s: form %s does not start with the session's csrf field", path, action)
			}
			if action == "" || !strings.HasPrefix(action, "/") {
				t.Errorf("%s: post form with action %q, want a path on this site", path, action)
			}
			if hx := f.AttrOr("hx-post", action); hx != action {
				t.Errorf("%s: form posts to %s without JavaScript but to %s with htmx", path, action, hx)
			}
		})
	}
	if t.Failed() {
		return
	}
	// The static assets the pages use are served, with the types the
	// browser needs under nosniff.
	for path, ct := range map[string]string{"/static/htmx.min.js": "text/javascript", "/static/app.css": "text/css"} {
		r := portalRequest(t, e, "", http.MethodGet, path, "", nil, nil)
		if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), ct) {
			t.Errorf("GET %s = %d %q, want 200 %s", path, r.StatusCode, r.Header.Get("Content-Type"), ct)
		}
	}
}

// portalFieldError fails unless form shows one error for field, right after
// the field's input, saying want.
func portalFieldError(t *testing.T, form *goquery.Selection, field, want string) {
	t.Helper()
	msg := form.Find(`.err[data-field="` + field + `"]`)
	if msg.Length() != 1 {
		t.Errorf("%d errors shown for %s, want 1", msg.Length(), field)
		return
	}
	if !strings.Contains(portalText(msg), want) || portalText(msg) == "" {
		t.Errorf("error for %s = %q, want it to say %q", field, portalText(msg), want)
	}
	if prev := msg.Prev(); prev.AttrOr("id", "") != field {
		t.Errorf("error for %s follows <%s id=%q>, want the %s field", field, goquery.NodeName(prev), prev.AttrOr("id", ""), field)
	}
}

// TestPortalFormErrors checks that a refused form comes back with 422, the
// message next to its field and what was typed still in the fields.
func TestPortalFormErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")
	before := portalSnapshot(t, e)

	r := u.post("/endpoints", u.form("name", "Bad_Name!", "model", "risk-model", "version", "v1",
		"instance_profile", "mig-2g.20gb", "tier", "batch", "min_replicas", "1", "max_replicas", "3", "sampling_rate", "0.25", "retention_days", "14",
		"max_batch_size", "64"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("create endpoint with a bad name = %d, want 422\n%s", r.StatusCode, r.Body)
	}
	doc := r.doc(t)
	portalFieldError(t, doc.Find("#endpoint-form"), "name", "")
	if n := doc.Find("#endpoint-form .err").Length(); n != 1 {
		t.Errorf("%d field errors shown, want 1 (name): %s", n, portalText(doc.Find("#endpoint-form .err")))
	}
	for id, want := range map[string]string{"name": "Bad_Name!", "version": "v1", "min_replicas": "1", "max_replicas": "3",
		"sampling_rate": "0.25", "retention_days": "14", "max_batch_size": "64"} {
		if got := doc.Find("#endpoint-form input#"+id).AttrOr("value", ""); got != want {
			t.Errorf("field %s kept %q, want %q", id, got, want)
		}
	}
	for id, want := range map[string]string{"model": "risk-model", "instance_profile": "mig-2g.20gb", "tier": "batch"} {
		if got := doc.Find("#endpoint-form select#"+id+" option[selected]").AttrOr("value", ""); got != want {
			t.Errorf("select %s kept %q, want %q", id, got, want)
		}
	}

	// Numbers that are not numbers: each on its field.
	r = u.post("/endpoints", u.form("name", "fine-name", "model", "risk-model", "version", "v1",
		"instance_profile", "mig-2g.20gb", "tier", "batch", "min_replicas", "one", "max_replicas", "lots", "sampling_rate", "half", "retention_days", "14"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("create endpoint with words for numbers = %d, want 422", r.StatusCode)
	}
	doc = r.doc(t)
	for _, f := range []string{"min_replicas", "max_replicas", "sampling_rate"} {
		portalFieldError(t, doc.Find("#endpoint-form"), f, "number")
	}
	if got := doc.Find("#endpoint-form input#max_replicas").AttrOr("value", ""); got != "lots" {
		t.Errorf("max_replicas kept %q, want lots", got)
	}

	// A name that is taken: the error is on the name.
	r = u.post("/endpoints", u.form("name", "risk-endpoint", "model", "risk-model", "version", "v1",
		"instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1", "max_replicas", "2", "sampling_rate", "0", "retention_days", "30"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("create endpoint with a taken name = %d, want 422", r.StatusCode)
	}
	portalFieldError(t, r.doc(t).Find("#endpoint-form"), "name", "already exists")

	// The model form too.
	r = u.post("/models", u.form("team", "risk", "name", "risk-model", "task", "regression", "description", "kept",
		"input_schema", `{"type": "object"}`, "feature_names", "a, b"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("create model with a taken name = %d, want 422", r.StatusCode)
	}
	doc = r.doc(t)
	portalFieldError(t, doc.Find("#model-form"), "name", "already exists")
	if got := doc.Find("#description").AttrOr("value", ""); got != "kept" {
		t.Errorf("model description kept %q, want kept", got)
	}
	if got := doc.Find("#task option[selected]").AttrOr("value", ""); got != "regression" {
		t.Errorf("model task kept %q, want regression", got)
	}

	// Traffic that does not sum to 100, from htmx: the fragment comes back
	// with the error and the weights as typed.
	r = u.post("/endpoints/risk-endpoint/traffic", u.form("w_v1", "60", "w_v2", "30"), "HX-Request", "true")
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("traffic summing to 90 = %d, want 422", r.StatusCode)
	}
	doc = r.doc(t)
	if msg := portalText(doc.Find(`#traffic .err[data-field="weights"]`)); msg == "" {
		t.Errorf("traffic summing to 90: no error shown:\n%s", r.Body)
	}
	for v, want := range map[string]string{"v1": "60", "v2": "30"} {
		if got := doc.Find(`#traffic input[name="w_`+v+`"]`).AttrOr("value", ""); got != want {
			t.Errorf("traffic %s kept %q, want %q", v, got, want)
		}
	}

	if after := portalSnapshot(t, e); after != before {
		t.Errorf("refused forms changed stored state:\nbefore %s\nafter  %s", before, after)
	}
}

// TestPortalViewer checks that a viewer sees no controls that change
// anything and is refused (403, nothing changed) when posting anyway.
func TestPortalViewer(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	v := portalSignIn(t, e, "risk-viewer@example.com")

	doc := v.page("/endpoints/risk-endpoint")
	for _, sel := range []string{"#set-traffic", `#traffic input[name^="w_"]`, `#traffic input[name^="s_"]`, "#delete-form", `form[action$="/delete"]`} {
		if doc.Find(sel).Length() > 0 {
			t.Errorf("viewer sees %s on the endpoint page", sel)
		}
	}
	var cells []string
	doc.Find("#traffic tbody td").Each(func(_ int, s *goquery.Selection) { cells = append(cells, portalText(s)) })
	// Version, weight and shadow percentage (blank: none) per row.
	if got := strings.Join(cells, " "); got != "v1 100  v2 0 " {
		t.Errorf("viewer's traffic table = %q, want the weights as text", got)
	}
	if doc = v.page("/models/risk-model"); doc.Find("#new-version").Length() > 0 {
		t.Errorf("viewer sees Register a version")
	}
	doc = v.page("/team")
	for _, sel := range []string{"#member-form", "#key-form", "#keys", `form[action$="/revoke"]`} {
		if doc.Find(sel).Length() > 0 {
			t.Errorf("viewer sees %s on the team page", sel)
		}
	}
	if r := v.get("/audit"); r.StatusCode != http.StatusForbidden {
		t.Errorf("viewer GET /audit = %d, want 403", r.StatusCode)
	}

	// Every write, with a valid CSRF token, is refused.
	for _, c := range portalWrites(t, e) {
		if c.viewerMay {
			continue
		}
		before := portalSnapshot(t, e)
		ct, body := c.body(0, v.csrf)
		r := portalRequest(t, e, v.token, http.MethodPost, c.path(0), ct, body, nil)
		if r.StatusCode != http.StatusForbidden {
			t.Errorf("viewer POST %s = %d, want 403", c.path(0), r.StatusCode)
		}
		if after := portalSnapshot(t, e); after != before {
			t.Errorf("viewer POST %s changed stored state:\nbefore %s\nafter  %s", c.path(0), before, after)
		}
	}
}

// TestPortalKeyShownOnce checks that a new API key is shown on the page
// that created it and never again.
func TestPortalKeyShownOnce(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")

	r := u.post("/team/keys", u.form("team", "risk", "name", "ci-deploy", "key_role", "engineer", "expires_in_days", "30"))
	if r.StatusCode != http.StatusOK {
		t.Fatalf("create key = %d, want 200\n%s", r.StatusCode, r.Body)
	}
	if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
		t.Errorf("page with the new key has Cache-Control %q, want no-store", cc)
	}
	doc := r.doc(t)
	raw := portalText(doc.Find("#new-key"))
	if !auth.LooksLikeKey(raw) || len(raw) < 30 {
		t.Fatalf("new key shown = %q, want a key", raw)
	}
	row := doc.Find("#keys tr").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(portalText(s), "ci-deploy")
	})
	if row.Length() != 1 {
		t.Fatalf("key ci-deploy is not listed")
	}
	prefix := row.AttrOr("data-key", "")
	if prefix == "" || !strings.HasPrefix(raw, prefix) || prefix == raw {
		t.Errorf("listed prefix %q is not a proper prefix of the key shown", prefix)
	}
	if !strings.Contains(portalText(row), "engineer") {
		t.Errorf("key row = %q, want role engineer", portalText(row))
	}
	// The key works, and says whose it is.
	if status, body := e.api(raw, http.MethodGet, "/me", nil); status != http.StatusOK || !strings.Contains(string(body), `"owner":"risk-admin@example.com"`) {
		t.Errorf("GET /api/v1/me with the new key = %d %s; want 200 naming its owner", status, body)
	}

	// Loaded again, the team page does not show it.
	again := u.get("/team")
	if again.StatusCode != http.StatusOK {
		t.Fatalf("GET /team = %d", again.StatusCode)
	}
	if bytes.Contains(again.Body, []byte(raw)) || again.doc(t).Find("#new-key").Length() > 0 {
		t.Errorf("the key is shown again on a second load of /team")
	}
	if again.doc(t).Find(`#keys tr[data-key="`+prefix+`"]`).Length() != 1 {
		t.Errorf("key %s is no longer listed", prefix)
	}
}

// TestPortalAudit checks the audit page's filters and its team scope.
func TestPortalAudit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := portalSignIn(t, e, "risk-admin@example.com")
	if r := admin.post("/endpoints", admin.form("name", "audited", "model", "risk-model", "version", "v2",
		"instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1", "max_replicas", "1", "sampling_rate", "0", "retention_days", "7")); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("create endpoint = %d\n%s", r.StatusCode, r.Body)
	}

	type row struct{ team, who, action, object string }
	rows := func(path string) ([]row, *goquery.Document) {
		t.Helper()
		doc := admin.page(path)
		var out []row
		doc.Find("#audit tbody tr").Each(func(_ int, s *goquery.Selection) {
			td := s.Find("td")
			out = append(out, row{team: portalText(td.Eq(1)), who: portalText(td.Eq(2)), action: portalText(td.Eq(3)), object: portalText(td.Eq(4))})
		})
		return out, doc
	}

	all, _ := rows("/audit")
	actions := map[string]bool{}
	for _, r := range all {
		if r.team != "risk" {
			t.Errorf("risk admin sees an audit row of team %q: %+v", r.team, r)
		}
		actions[r.action] = true
	}
	for _, a := range []string{"model.create", "version.register", "endpoint.create", "api_key.create"} {
		if !actions[a] {
			t.Errorf("unfiltered audit has no %s row (has %v)", a, actions)
		}
	}

	got, doc := rows("/audit?action=endpoint.create")
	if len(got) != 2 {
		t.Errorf("action=endpoint.create gave %d rows, want 2 (risk-endpoint, audited): %+v", len(got), got)
	}
	for _, r := range got {
		if r.action != "endpoint.create" {
			t.Errorf("action=endpoint.create shows %+v", r)
		}
	}
	if v := doc.Find("#audit-filter #action").AttrOr("value", ""); v != "endpoint.create" {
		t.Errorf("the filter form forgot the action: %q", v)
	}

	got, _ = rows("/audit?actor=" + url.QueryEscape("risk-admin@example.com"))
	if len(got) != 1 || got[0].object != "endpoint audited" || !strings.HasPrefix(got[0].who, "risk-admin@example.com") || !strings.Contains(got[0].who, "session") {
		t.Errorf("actor=risk-admin@example.com gave %+v, want the one endpoint it created, via session", got)
	}

	got, _ = rows("/audit?object_type=model_version&action=version.register")
	if len(got) != 2 {
		t.Errorf("object_type=model_version gave %d rows, want 2: %+v", len(got), got)
	}
	for _, r := range got {
		if !strings.HasPrefix(r.object, "model_version ") {
			t.Errorf("object_type=model_version shows %+v", r)
		}
	}

	if got, _ = rows("/audit?action=no.such"); len(got) != 0 {
		t.Errorf("action=no.such gave %+v", got)
	}
}

// TestPortalWithoutJavaScript drives the endpoint pages as a browser without
// JavaScript does: plain form posts, redirects, full pages.
func TestPortalWithoutJavaScript(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")

	// The create form is a plain form that posts to /endpoints.
	doc := u.page("/endpoints/new")
	f := doc.Find("form#endpoint-form")
	if f.AttrOr("method", "") != "post" || f.AttrOr("action", "") != "/endpoints" {
		t.Fatalf("endpoint form posts %q to %q", f.AttrOr("method", ""), f.AttrOr("action", ""))
	}
	form := url.Values{}
	f.Find("input, select").Each(func(_ int, s *goquery.Selection) {
		name := s.AttrOr("name", "")
		switch goquery.NodeName(s) {
		case "select":
			opt := s.Find("option[selected]")
			if opt.Length() == 0 {
				opt = s.Find("option").First()
			}
			form.Set(name, opt.AttrOr("value", ""))
		default:
			form.Set(name, s.AttrOr("value", ""))
		}
	})
	form.Set("name", "plain-form")
	form.Set("model", "risk-model")
	form.Set("version", "v1")
	r := u.post("/endpoints", form)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/endpoints/plain-form" {
		t.Fatalf("plain create = %d to %q, want 303 to /endpoints/plain-form\n%s", r.StatusCode, r.Header.Get("Location"), r.Body)
	}
	flash := r.cookie(FlashCookie)
	if flash == nil {
		t.Fatalf("no flash cookie after create")
	}
	page := u.get("/endpoints/plain-form", flash)
	if page.StatusCode != http.StatusOK {
		t.Fatalf("GET /endpoints/plain-form = %d", page.StatusCode)
	}
	doc = page.doc(t)
	if got := portalText(doc.Find(".flash")); got != "Endpoint plain-form created." {
		t.Errorf("flash = %q, want the endpoint created", got)
	}
	if c := page.cookie(FlashCookie); c == nil || c.MaxAge >= 0 {
		t.Errorf("the flash is not cleared after it is shown")
	}
	if got := u.page("/endpoints/plain-form").Find(".flash").Length(); got != 0 {
		t.Errorf("the flash shows again without its cookie")
	}
	listed := u.page("/endpoints").Find(`#endpoints tr[data-endpoint="plain-form"]`)
	if !strings.Contains(portalText(listed), "v1 100%") {
		t.Errorf("endpoint list row = %q, want v1 100%%", portalText(listed))
	}

	// The traffic form also works as a plain post: the whole page comes back.
	r = u.post("/endpoints/plain-form/traffic", u.form("w_v1", "25", "w_v2", "75"))
	if r.StatusCode != http.StatusOK {
		t.Fatalf("plain traffic post = %d\n%s", r.StatusCode, r.Body)
	}
	doc = r.doc(t)
	if doc.Find("html header nav").Length() == 0 || doc.Find("#traffic").Length() != 1 {
		t.Errorf("plain traffic post did not return the whole page")
	}
	if got := portalText(doc.Find(".flash")); got != "Traffic updated." {
		t.Errorf("flash = %q, want Traffic updated.", got)
	}
	if got := doc.Find(`input[name="w_v2"]`).AttrOr("value", ""); got != "75" {
		t.Errorf("v2 weight shown = %q, want 75", got)
	}
	// From htmx, only the traffic section comes back, to swap in place.
	r = u.post("/endpoints/plain-form/traffic", u.form("w_v1", "100", "w_v2", "0"), "HX-Request", "true", "HX-Target", "traffic")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("htmx traffic post = %d\n%s", r.StatusCode, r.Body)
	}
	if nodes, err := html.ParseFragment(bytes.NewReader(r.Body), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body}); err != nil ||
		len(nodes) != 1 || nodes[0].Data != "section" || !slices.Contains(nodes[0].Attr, html.Attribute{Key: "id", Val: "traffic"}) {
		t.Errorf("htmx traffic post did not return just section#traffic:\n%s", r.Body)
	}
	ep, err := e.srv.Endpoints.Get(context.Background(), system, "plain-form")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ep.Traffic); got != "[{v1 100 0}]" {
		t.Errorf("stored traffic = %s, want v1 100", got)
	}

	// Delete asks for the name; then the endpoint is gone.
	r = u.post("/endpoints/plain-form/delete", u.form("confirm", "plain"))
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("delete with a wrong confirmation = %d, want 422", r.StatusCode)
	}
	portalFieldError(t, r.doc(t).Find("#delete-form"), "confirm", "plain-form")
	r = u.post("/endpoints/plain-form/delete", u.form("confirm", "plain-form"))
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/endpoints" {
		t.Fatalf("delete = %d to %q, want 303 to /endpoints", r.StatusCode, r.Header.Get("Location"))
	}
	if got := u.get("/endpoints/plain-form"); got.StatusCode != http.StatusNotFound {
		t.Errorf("GET a deleted endpoint = %d, want 404", got.StatusCode)
	}

	// Signed out, a page sends the browser to sign in and back.
	r = portalRequest(t, e, "", http.MethodGet, "/models/risk-model?x=1", "", nil, nil)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login?return_to="+url.QueryEscape("/models/risk-model?x=1") {
		t.Errorf("signed-out GET = %d to %q, want 303 to /login with return_to", r.StatusCode, r.Header.Get("Location"))
	}
	r = portalRequest(t, e, "", http.MethodGet, "/models", "", nil, nil, "HX-Request", "true")
	if r.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(r.Header.Get("HX-Redirect"), "/login") {
		t.Errorf("signed-out htmx GET = %d HX-Redirect %q, want 401 with HX-Redirect to /login", r.StatusCode, r.Header.Get("HX-Redirect"))
	}
	// A fragment's poll comes back to its page after sign-in, never to the
	// bare fragment; a page of another site is not a place to return to.
	for current, want := range map[string]string{e.URL + "/endpoints/plain?tab=2": "/endpoints/plain?tab=2", "https://evil.example/x": "/"} {
		r = portalRequest(t, e, "", http.MethodGet, "/endpoints/plain/replicas", "", nil, nil, "HX-Request", "true", "HX-Current-URL", current)
		if got := r.Header.Get("HX-Redirect"); r.StatusCode != http.StatusUnauthorized || got != "/login?return_to="+url.QueryEscape(want) {
			t.Errorf("signed-out poll from %s = %d HX-Redirect %q, want 401 back to %s", current, r.StatusCode, got, want)
		}
	}
}

// TestPortalVersionUpload checks the browser upload form's refusals: the
// reason shown on the form, the metadata kept, nothing stored.
func TestPortalVersionUpload(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")
	before := portalSnapshot(t, e)
	meta := `{"name": "v9", "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 1024}}`

	// A pickle named .safetensors is refused by content.
	pickle := []byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")
	ct, body := portalMultipart(t, portalPart{name: "csrf", content: []byte(u.csrf)}, portalPart{name: "metadata", content: []byte(meta)},
		portalPart{name: "files", filename: "model.safetensors", content: pickle})
	r := portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil)
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("pickle upload = %d, want 422\n%s", r.StatusCode, r.Body)
	}
	doc := r.doc(t)
	if msg := portalText(doc.Find("#version-form #version-error")); !strings.Contains(strings.ToLower(msg), "pickle") {
		t.Errorf("pickle upload error = %q, want it to say pickle", msg)
	}
	if got := doc.Find("#version-form textarea#metadata").Text(); got != meta {
		t.Errorf("metadata kept as %q, want %q", got, meta)
	}

	// Metadata that is not JSON: the error is on the metadata field.
	ct, body = portalMultipart(t, portalPart{name: "csrf", content: []byte(u.csrf)}, portalPart{name: "metadata", content: []byte(`{"name": "v9",`)},
		portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile("x")})
	r = portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil)
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("bad metadata = %d, want 422", r.StatusCode)
	}
	portalFieldError(t, r.doc(t).Find("#version-form"), "metadata", "not valid version metadata")

	// Over the upload limit (2 MiB in the test server): 413.
	big := bytes.Repeat([]byte{0}, 3<<20)
	ct, body = portalMultipart(t, portalPart{name: "csrf", content: []byte(u.csrf)}, portalPart{name: "metadata", content: []byte(meta)},
		portalPart{name: "files", filename: "model.safetensors", content: big})
	r = portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil)
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("3 MiB upload = %d, want 413\n%.300s", r.StatusCode, r.Body)
	}

	// The bound covers the whole body, not only the files the handler keeps.
	ct, body = portalMultipart(t, portalPart{name: "csrf", content: []byte(u.csrf)}, portalPart{name: "metadata", content: []byte(meta)},
		portalPart{name: "padding", content: big}, portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile("v9")})
	r = portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil)
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("upload with a 3 MiB extra field = %d, want 413\n%.300s", r.StatusCode, r.Body)
	}

	if after := portalSnapshot(t, e); after != before {
		t.Errorf("refused uploads changed stored state:\nbefore %s\nafter  %s", before, after)
	}

	// With the token in the header, as htmx sends it, the upload works too.
	ct, body = portalMultipart(t, portalPart{name: "metadata", content: []byte(meta)},
		portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile("v9")})
	r = portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil, "X-CSRF-Token", u.csrf)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/models/risk-model/versions/v9" {
		t.Fatalf("upload with the header token = %d to %q\n%s", r.StatusCode, r.Header.Get("Location"), r.Body)
	}
	doc = u.page("/models/risk-model/versions/v9")
	if got := portalText(doc.Find("main h1")); got != "risk-model / v9" {
		t.Errorf("version page heading = %q", got)
	}
}
