package onnx

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/serveapi"
)

// installHint is what a test missing its tools or data tells the reader.
const installHint = "run scripts/install-deps.sh test"

// nodeTestData is where Debian's libonnx-testdata installs ONNX's own
// operator tests: one directory per case with model.onnx and
// test_data_set_*/{input,output}_*.pb (serialised TensorProtos).
const nodeTestData = "/usr/share/libonnx-testdata/data/node"

func TestLibraryPath(t *testing.T) {
	t.Run("environment variable", func(t *testing.T) {
		t.Setenv(LibraryEnv, "/opt/ort/libonnxruntime.so.1")
		if got, err := LibraryPath(); err != nil || got != "/opt/ort/libonnxruntime.so.1" {
			t.Fatalf("LibraryPath() = %q, %v", got, err)
		}
	})
	t.Run("cache default", func(t *testing.T) {
		t.Setenv(LibraryEnv, "")
		t.Setenv("XDG_CACHE_HOME", "/var/cache/u")
		want := "/var/cache/u/modelplane/onnxruntime-1.30.0/libonnxruntime.so.1"
		if got, err := LibraryPath(); err != nil || got != want {
			t.Fatalf("LibraryPath() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("missing names the install command", func(t *testing.T) {
		err := checkLibrary(filepath.Join(t.TempDir(), "libonnxruntime.so.1"))
		if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "scripts/install-deps.sh") {
			t.Fatalf("checkLibrary(absent) = %v, want ErrNoLibrary naming scripts/install-deps.sh", err)
		}
	})
}

func TestOutputKindRules(t *testing.T) {
	g := graph{producers: map[string]node{
		"probs_raw": {opType: "MatMul", inputs: []string{"x", "w"}},
		"sm":        {opType: "Softmax", inputs: []string{"z"}},
		"sm_flat":   {opType: "Reshape", inputs: []string{"sm", "shape"}},
		"sig":       {opType: "Sigmoid", inputs: []string{"z"}},
		"lsm":       {opType: "LogSoftmax", inputs: []string{"z"}},
		"custom":    {opType: "Softmax", domain: "com.example", inputs: []string{"z"}},
		"loop":      {opType: "Identity", inputs: []string{"loop"}},
	}, metadata: map[string]string{}}
	for _, tc := range []struct {
		output, want string
	}{
		{"Output_Probability", serveapi.OutputProbability},
		{"sm", serveapi.OutputProbability},
		{"sm_flat", serveapi.OutputProbability},
		{"sig", serveapi.OutputProbability},
		{"lsm", serveapi.OutputValue},
		{"custom", serveapi.OutputValue},
		{"loop", serveapi.OutputValue},
		{"graph_input", serveapi.OutputValue},
	} {
		if got, err := g.outputKind(tc.output); err != nil || got != tc.want {
			t.Errorf("outputKind(%q) = %q, %v; want %q", tc.output, got, err, tc.want)
		}
	}
	g.metadata[MetadataOutputKind] = serveapi.OutputValue
	if got, _ := g.outputKind("sm"); got != serveapi.OutputValue {
		t.Errorf("outputKind(sm) with metadata value = %q, want value", got)
	}
}
