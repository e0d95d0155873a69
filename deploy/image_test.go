package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readTar returns a tar's regular files by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
		User       string   `json:"User"`
		Env        []string `json:"Env"`
	} `json:"config"`
}

// TestImagesAreReproducibleAndRunWithoutABase builds the image twice the
// way `make images` does and reads the archives with the standard library
// alone, following the OCI image layout spec: the index names one
// manifest, every blob matches its digest, the entrypoint is the binary,
// and the layers hold it, ONNX Runtime and every library they load, which
// (as root) a chroot into the unpacked layers proves by running it.
func TestImagesAreReproducibleAndRunWithoutABase(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, dir := range dirs {
		cmd := exec.Command("../scripts/images.sh", dir)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/images.sh: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"modelplane.oci.tar", "modelplane.docker.tar"} {
		a, err := os.ReadFile(filepath.Join(dirs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dirs[1], name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same tree: the build is not reproducible", name)
		}
	}

	f, err := os.Open(filepath.Join(dirs[0], "modelplane.oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	oci := readTar(t, f)
	if got := string(oci["oci-layout"]); !strings.Contains(got, `"imageLayoutVersion"`) {
		t.Fatalf("oci-layout = %q", got)
	}
	blob := func(d descriptor, wantType string) []byte {
		t.Helper()
		if wantType != "" && d.MediaType != wantType {
			t.Fatalf("blob %s has media type %q, want %q", d.Digest, d.MediaType, wantType)
		}
		data, ok := oci["blobs/"+strings.Replace(d.Digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("blob %s is missing from the layout", d.Digest)
		}
		sum := sha256.Sum256(data)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
			t.Fatalf("blob %s does not match its digest or size", d.Digest)
		}
		return data
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(oci["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || !strings.HasPrefix(index.Manifests[0].Annotations["org.opencontainers.image.ref.name"], "modelplane/modelplane:") {
		t.Fatalf("index.json manifests = %+v, want one named modelplane/modelplane:VERSION", index.Manifests)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0], "application/vnd.oci.image.manifest.v1+json"), &manifest); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(manifest.Config, "application/vnd.oci.image.config.v1+json"), &cfg); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/local/bin/modelplane" {
		t.Errorf("entrypoint = %q, want /usr/local/bin/modelplane", got)
	}
	if cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("config user %q, os %q, created %q; want 65532:65532, linux, SOURCE_DATE_EPOCH", cfg.Config.User, cfg.OS, cfg.Created)
	}
	var ortPath string
	for _, e := range cfg.Config.Env {
		if v, ok := strings.CutPrefix(e, "MP_ONNXRUNTIME_LIB="); ok {
			ortPath = v
		}
	}

	rootfs := t.TempDir()
	var paths []string
	for _, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l, "application/vnd.oci.image.layer.v1.tar+gzip")))
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range readTar(t, zr) {
			paths = append(paths, "/"+name)
			dst := filepath.Join(rootfs, name)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{"/usr/local/bin/modelplane", ortPath, "/lib64/ld-linux-x86-64.so.2", "/etc/passwd"} {
		found := false
		for _, p := range paths {
			found = found || p == want
		}
		if !found {
			t.Errorf("no layer holds %s (MP_ONNXRUNTIME_LIB names the library)", want)
		}
	}

	// The docker archive holds the same image.
	df, err := os.Open(filepath.Join(dirs[0], "modelplane.docker.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	docker := readTar(t, df)
	var dm []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(docker["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	if len(dm) != 1 || len(dm[0].Layers) != len(manifest.Layers) || !bytes.Equal(docker[dm[0].Config], blob(manifest.Config, "")) {
		t.Fatalf("docker archive manifest %+v does not hold the OCI archive's image", dm)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the image's files are not run in a chroot")
		return
	}
	out, err := exec.Command("chroot", rootfs, "/usr/local/bin/modelplane", "version").CombinedOutput()
	if err != nil || !strings.Contains(strings.ToLower(string(out)), "client") {
		t.Errorf("modelplane version in the image's files: %v\n%s", err, out)
	}
	out, err = exec.Command("chroot", rootfs, "/lib64/ld-linux-x86-64.so.2", "--list", ortPath).CombinedOutput()
	if err != nil || strings.Contains(string(out), "not found") {
		t.Errorf("ONNX Runtime's libraries in the image's files: %v\n%s", err, out)
	}
}
