package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent/catalog"
	"modelplane/agent/proto"
)

// Triton runs on a model repository the driver writes into the replica's
// directory: the generated config.pbtxt beside a link of version 1 to the
// version's files. A stand-in tritonserver checks the layout and then runs
// the fake runtime on the port it was given.
func TestTritonGetsAGeneratedModelRepository(t *testing.T) {
	bin := t.TempDir()
	script := `#!/bin/sh
for a in "$@"; do
  case "$a" in
    --model-repository=*) repo="${a#--model-repository=}" ;;
    --http-port=*) port="${a#--http-port=}" ;;
  esac
done
grep -q 'max_batch_size: 8' "$repo/fraud/config.pbtxt" || { echo "no generated config.pbtxt in $repo" >&2; exit 3; }
test -f "$repo/fraud/1/model.onnx" || { echo "version 1 is not the version's files" >&2; exit 3; }
exec ` + fakeBin + ` -port "$port" -model-dir "$repo/fraud/1"
`
	if err := os.WriteFile(filepath.Join(bin, "tritonserver"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH")) // not parallel
	models := openDir(t)
	if err := os.WriteFile(filepath.Join(models, "model.onnx"), []byte("onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	d := newDriver(t, state, quartz.NewMock(t), func(c *Config) {
		c.Catalog = map[string]catalog.Entry{catalog.Triton: catalog.Default()[catalog.Triton]}
		c.Resolve = func(context.Context, proto.ReplicaSpec, string) (Launch, error) {
			return Launch{Runtime: catalog.Triton, ModelDir: models}, nil
		}
	})
	s := spec("r-triton")
	s.Settings = []byte(`{"batching":{"max_batch_size":8,"preferred_batch_sizes":[4,8],"max_queue_delay_us":2000}}`)
	r := start(t, d, s, "")
	waitReady(t, r)
	cfg, err := os.ReadFile(filepath.Join(state, "r-triton.d", "repository", "fraud", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`platform: "onnxruntime_onnx"`, "preferred_batch_size: [ 4, 8 ]", "max_queue_delay_microseconds: 2000", "kind: KIND_GPU", "gpus: [ 0 ]"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config.pbtxt lacks %q:\n%s", want, cfg)
		}
	}
}
