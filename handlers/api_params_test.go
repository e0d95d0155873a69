package handlers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// countingBody counts the bytes a handler reads of a request body.
type countingBody struct {
	r    io.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { return nil }

// TestAPIVersionUploadExtractsModel checks that the API's version upload
// loads {model} before reading its body: a model of another team is the
// same 404 problem as one that does not exist, and not a byte of the
// upload is read for it.
func TestAPIVersionUploadExtractsModel(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	h := e.srv.Handler()
	for _, tc := range []struct {
		name, key, model string
		want             int
	}{
		{"another team's model", "search-admin", "risk-model", http.StatusNotFound},
		{"a model that does not exist", "risk-admin", "nope", http.StatusNotFound},
		{"its own model, with the wrong media type", "risk-admin", "risk-model", http.StatusUnsupportedMediaType},
	} {
		body := &countingBody{r: strings.NewReader(strings.Repeat("x", 1<<16))}
		req := httptest.NewRequest(http.MethodPost, "/api/v1/models/"+tc.model+"/versions", body)
		req.Header.Set("Authorization", "Bearer "+e.Keys[tc.key])
		req.Header.Set("Content-Type", "text/plain")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: status = %d, want %d\n%s", tc.name, rec.Code, tc.want, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type = %q, want application/problem+json", tc.name, ct)
		}
		if body.read != 0 {
			t.Errorf("%s: read %d bytes of the upload, want 0", tc.name, body.read)
		}
	}
}
