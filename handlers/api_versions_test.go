package handlers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// tarOf builds a gzipped tar; a nil body makes a symlink entry.
func tarOf(t *testing.T, entries []struct {
	name string
	body []byte
}) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.body == nil {
			h = &tar.Header{Name: e.name, Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// uploadVersion posts a multipart registration with the given parts after
// metadata and manifest.
func (e *testEnv) uploadVersion(key, model, version string, manifest []byte, parts map[string][]byte) (int, string) {
	e.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	meta, _ := json.Marshal(map[string]any{"name": version, "runtime": "onnxruntime", "resources": map[string]int{"gpu_count": 1, "gpu_memory_mb": 1024}})
	w, _ := mw.CreateFormField("metadata")
	w.Write(meta)
	w, _ = mw.CreateFormField("manifest")
	w.Write(manifest)
	for name, b := range parts {
		w, _ = mw.CreateFormFile(name, name)
		w.Write(b)
	}
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/api/v1/models/"+model+"/versions", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestVersionUploadArchive(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	key := e.Keys["risk-engineer"]
	weights := safetensorsFile("tar")
	config := []byte(`{"layers": 2}`)
	manifest := manifestOf(map[string][]byte{"model.safetensors": weights, "cfg/config.json": config})
	type entry = struct {
		name string
		body []byte
	}

	status, body := e.uploadVersion(key, "risk-model", "v3", manifest, map[string][]byte{
		"archive": tarOf(t, []entry{{"model.safetensors", weights}, {"cfg/config.json", config}})})
	if status != http.StatusCreated || !strings.Contains(body, `"format":"safetensors"`) {
		t.Fatalf("good archive: %d %s; want 201 with format safetensors", status, body)
	}

	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dot-dot entry", []entry{{"../model.safetensors", weights}, {"cfg/config.json", config}}, ".."},
		{"symlink entry", []entry{{"model.safetensors", weights}, {"cfg/config.json", nil}}, "link"},
	} {
		status, body := e.uploadVersion(key, "risk-model", "v4", manifest, map[string][]byte{"archive": tarOf(t, tc.entries)})
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want 422 naming %q", tc.name, status, body, tc.want)
		}
	}
	if status, _ := e.api(key, http.MethodGet, "/models/risk-model/versions/v4", nil); status != http.StatusNotFound {
		t.Errorf("rejected archive left version v4 behind: GET = %d, want 404", status)
	}
}
