package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/agent/catalog"
	"modelplane/artifact"
	"modelplane/controlplane"
	"modelplane/handlers"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// TestFetchLaysOutTritonRepository runs `modelplane fetch --triton-model`
// against a real control plane: the version's files are fetched into the
// volume and Triton's model repository beside them holds the config.pbtxt
// the process driver generates for the same version, with version 1
// linking to the files.
func TestFetchLaysOutTritonRepository(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cp, err := controlplane.New(controlplane.Stores{Pool: pgtest.New(t)}, controlplane.Config{ArtifactDir: t.TempDir(), MaxUploadBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const token = "agent-token-for-the-fetch-test"
	api := httptest.NewServer(handlers.New(handlers.Deps{Set: &cp.Set, AgentToken: token, MaxBodyBytes: handlers.DefaultMaxBodyBytes}).Handler())
	t.Cleanup(api.Close)
	if _, err := cp.Tenant.CreateTeam(ctx, system, "risk", "risk"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification}); err != nil {
		t.Fatal(err)
	}
	model := reluONNX()
	sum := sha256.Sum256(model)
	manifest, _ := json.Marshal(map[string]string{"model.onnx": hex.EncodeToString(sum[:])})
	v, err := cp.Registry.RegisterVersion(ctx, system, "fraud", registry.VersionSpec{Name: "v1", Runtime: "onnxruntime"}, manifest,
		func(u *artifact.Upload) error {
			return u.Add(context.Background(), "model.onnx", bytes.NewReader(model))
		})
	if err != nil {
		t.Fatal(err)
	}
	digest, ok := artifact.ManifestDigest(v.ArtifactURI)
	if !ok {
		t.Fatalf("artifact uri %s names no manifest", v.ArtifactURI)
	}

	dir := t.TempDir()
	settings := `{"batching":{"max_batch_size":8,"max_queue_delay_us":500,"preferred_batch_sizes":[4,8]}}`
	if err := RunFetch(ctx, FetchConfig{ControlPlaneURL: api.URL, Token: token, Manifest: digest, Replica: "fraud-v1-r1", Dir: dir,
		Settings: settings, TritonModel: "fraud", GPUs: 2, EgressAllowLoopback: true, LogLevel: "error"}); err != nil {
		t.Fatal(err)
	}

	modelDir := filepath.Join(dir, "model")
	cfgs, links, err := catalog.TritonRepository(catalog.Vars{Model: "fraud", ModelDir: modelDir}, []string{"model.onnx"}, json.RawMessage(settings), 2)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "repository")
	for rel, want := range cfgs {
		got, err := os.ReadFile(filepath.Join(repo, rel))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s =\n%s\nwant the process driver's\n%s", rel, got, want)
		}
	}
	for _, want := range []string{`platform: "onnxruntime_onnx"`, "max_batch_size: 8", "preferred_batch_size: [ 4, 8 ]", "gpus: [ 0, 1 ]"} {
		if !strings.Contains(cfgs["fraud/config.pbtxt"], want) {
			t.Errorf("config.pbtxt lacks %q:\n%s", want, cfgs["fraud/config.pbtxt"])
		}
	}
	for rel, target := range links {
		got, err := os.Readlink(filepath.Join(repo, rel))
		if err != nil || got != target {
			t.Errorf("link %s -> %q (%v), want %q", rel, got, err, target)
		}
	}
	got, err := os.ReadFile(filepath.Join(repo, "fraud", "1", "model.onnx"))
	if err != nil || !bytes.Equal(got, model) {
		t.Errorf("repository's version 1 model.onnx = %q (%v), want the version's file", got, err)
	}
	entries, err := os.ReadDir(repo)
	if err != nil || len(entries) != 1 || entries[0].Name() != "fraud" {
		t.Errorf("repository holds %v (%v), want the one model", entries, err)
	}
}

// reluONNX is an ONNX ModelProto of one Relu node, hand-encoded in
// protobuf's wire format: the control plane accepts only a real model.
func reluONNX() []byte {
	field := func(n int, b []byte) []byte {
		out := binary.AppendUvarint(nil, uint64(n)<<3|2)
		return append(binary.AppendUvarint(out, uint64(len(b))), b...)
	}
	varint := func(n int, v uint64) []byte { return binary.AppendUvarint(binary.AppendUvarint(nil, uint64(n)<<3), v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	node := cat(field(1, []byte("X")), field(2, []byte("Y")), field(3, []byte("relu0")), field(4, []byte("Relu")))
	graph := cat(field(1, node), field(2, []byte("main_graph")), field(11, field(1, []byte("X"))), field(12, field(1, []byte("Y"))))
	opset := cat(field(1, nil), varint(2, 17))
	return cat(varint(1, 8), field(2, []byte("pytorch")), field(3, []byte("2.1.0")), field(7, graph), field(8, opset))
}
