package handlers

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/registry"
)

const testAgentToken = "agent-token-for-tests"

// rawGet sends a GET with the given Authorization and extra headers and
// returns the status, the headers and the body.
func (e *testEnv) rawGet(t *testing.T, path, authz string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestInternalArtifacts: node agents fetch a version's manifest and files
// by digest with the agent token, in ranges; without the token they get 401,
// and a digest no version references is 404 even with it.
func TestInternalArtifacts(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.AgentToken = testAgentToken }})
	v, err := e.srv.Registry.Version(t.Context(), system, "risk-model", "v1")
	if err != nil {
		t.Fatal(err)
	}
	manDigest, ok := artifact.ManifestDigest(v.ArtifactURI)
	if !ok {
		t.Fatalf("artifact uri %s names no stored manifest", v.ArtifactURI)
	}
	file := safetensorsFile("riskv1")
	fileDigest := v.Manifest["model.safetensors"]
	bearer := "Bearer " + testAgentToken

	for _, c := range []struct {
		name  string
		authz string
	}{{"no credentials", ""}, {"wrong token", "Bearer not-the-token"}, {"an API key", "Bearer " + e.Keys["platform-admin"]}, {"basic", "Basic " + testAgentToken}} {
		if st, _, b := e.rawGet(t, "/internal/artifacts/"+fileDigest, c.authz); st != http.StatusUnauthorized {
			t.Errorf("%s: GET file = %d %s; want 401", c.name, st, b)
		}
	}

	st, _, b := e.rawGet(t, "/internal/artifacts/"+manDigest, bearer)
	if st != http.StatusOK || hexSum(b) != manDigest {
		t.Fatalf("GET manifest = %d %s; want 200 with content hashing to %s", st, b, manDigest)
	}
	man, err := artifact.ParseManifest(b)
	if err != nil || man["model.safetensors"] != fileDigest {
		t.Fatalf("manifest %s = %v, %v; want model.safetensors → %s", b, man, err, fileDigest)
	}

	st, h, b := e.rawGet(t, "/internal/artifacts/"+fileDigest, bearer)
	if st != http.StatusOK || string(b) != string(file) || h.Get("Accept-Ranges") != "bytes" || h.Get("ETag") != `"`+fileDigest+`"` {
		t.Fatalf("GET file = %d (%d bytes, Accept-Ranges %q, ETag %q); want 200 with the file, ranges and its digest as ETag",
			st, len(b), h.Get("Accept-Ranges"), h.Get("ETag"))
	}
	st, h, b = e.rawGet(t, "/internal/artifacts/"+fileDigest, bearer, "Range", "bytes=10-", "If-Range", `"`+fileDigest+`"`)
	if st != http.StatusPartialContent || string(b) != string(file[10:]) {
		t.Fatalf("GET file from byte 10 = %d %q; want 206 with the rest", st, b)
	}
	if want := "bytes 10-" + strconv.Itoa(len(file)-1) + "/" + strconv.Itoa(len(file)); h.Get("Content-Range") != want {
		t.Errorf("Content-Range = %q; want %q", h.Get("Content-Range"), want)
	}

	for name, d := range map[string]string{"unreferenced": hexSum([]byte("no version has this")), "not a digest": "abc"} {
		if st, _, b := e.rawGet(t, "/internal/artifacts/"+d, bearer); st != http.StatusNotFound {
			t.Errorf("%s: GET = %d %s; want 404", name, st, b)
		}
	}
}

// TestAgentsRefusedWithoutConfiguredToken: a server with no agent token
// lets no one fetch, however the request is dressed.
func TestAgentsRefusedWithoutConfiguredToken(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	v, err := e.srv.Registry.Version(t.Context(), system, "risk-model", "v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, authz := range []string{"", "Bearer ", "Bearer " + testAgentToken} {
		if st, _, _ := e.rawGet(t, "/internal/artifacts/"+v.Manifest["model.safetensors"], authz); st != http.StatusUnauthorized {
			t.Errorf("Authorization %q: GET = %d; want 401", authz, st)
		}
	}
}

// TestVersionFileDownload: a team member downloads their version's files,
// nested paths included, whole or in ranges; another team, an unknown path
// and an anonymous caller get nothing.
func TestVersionFileDownload(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	files := map[string][]byte{"model.safetensors": safetensorsFile("riskv3"), "tokenizer/config.json": []byte(`{"vocab": 3}`)}
	if _, err := e.srv.Registry.RegisterVersion(t.Context(), system, "risk-model", registry.VersionSpec{Name: "v3", Runtime: "onnxruntime",
		Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 1024}}, manifestOf(files), filesOf(files)); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/models/risk-model/versions/v3/files/"
	viewer := "Bearer " + e.Keys["risk-viewer"]
	for path, want := range files {
		st, h, b := e.rawGet(t, base+path, viewer)
		if st != http.StatusOK || string(b) != string(want) || h.Get("ETag") != `"`+hexSum(want)+`"` {
			t.Errorf("risk viewer GET %s = %d %q (ETag %q); want 200 with the file", path, st, b, h.Get("ETag"))
		}
	}
	st, _, b := e.rawGet(t, base+"tokenizer/config.json", viewer, "Range", "bytes=1-4")
	if st != http.StatusPartialContent || string(b) != `"voc` {
		t.Errorf("GET bytes 1-4 = %d %q; want 206 %q", st, b, `"voc`)
	}
	for _, c := range []struct {
		name, path, authz string
		want              int
	}{
		{"other team", base + "model.safetensors", "Bearer " + e.Keys["search-admin"], http.StatusNotFound},
		{"other team, missing version", "/api/v1/models/risk-model/versions/v9/files/model.safetensors", "Bearer " + e.Keys["search-admin"], http.StatusNotFound},
		{"unlisted path", base + "tokenizer", viewer, http.StatusNotFound},
		{"traversal", base + "../v1/files/model.safetensors", viewer, http.StatusNotFound},
		{"anonymous", base + "model.safetensors", "", http.StatusUnauthorized},
		{"agent token", base + "model.safetensors", "Bearer " + testAgentToken, http.StatusUnauthorized},
	} {
		if st, _, b := e.rawGet(t, c.path, c.authz); st != c.want {
			t.Errorf("%s: GET %s = %d %s; want %d", c.name, c.path, st, b, c.want)
		}
	}
}
