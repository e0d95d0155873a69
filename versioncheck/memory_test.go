package versioncheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/registry"
	"modelplane/runtime/llmserve"
	"modelplane/versioncheck"
)

// needMB is what validation computes for a GGUF file: llm.MemoryNeed with
// the engine's default K/V cache, in MiB rounded up, worked out here from
// the file on its own.
func needMB(t *testing.T, body []byte) int32 {
	t.Helper()
	return needWith(t, body, llmserve.Settings{})
}

// needWith is needMB with the K/V cache the settings size.
func needWith(t *testing.T, body []byte, set llmserve.Settings) int32 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := llm.ReadConfig(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	need, err := llm.MemoryNeed(path, set.Pages(c.Context)*llmserve.PageTokens)
	if err != nil {
		t.Fatal(err)
	}
	return int32((need + 1<<20 - 1) >> 20)
}

// registerGGUF uploads body as model.gguf, a builtin-llm version of chat
// with the given resources.
func (f *fixture) registerGGUF(t *testing.T, name string, body []byte, res registry.Resources) registry.Version {
	t.Helper()
	return f.registerGGUFServing(t, name, body, res, registry.Serving{})
}

// registerGGUFServing is registerGGUF with the version's serving block.
func (f *fixture) registerGGUFServing(t *testing.T, name string, body []byte, res registry.Resources, serving registry.Serving) registry.Version {
	t.Helper()
	sum := sha256.Sum256(body)
	man := artifact.Manifest{"model.gguf": hex.EncodeToString(sum[:])}
	v, err := f.reg.RegisterVersion(t.Context(), f.eng, "chat", registry.VersionSpec{Name: name, Runtime: registry.BuiltinLLM, Resources: res, Serving: serving},
		man.Canonical(), func(u *artifact.Upload) error {
			return u.Add(context.Background(), "model.gguf", bytes.NewReader(body))
		})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return v
}

// cpuNode registers a ready CPU node of the given memory with the fleet,
// as its agent's first heartbeat does.
func cpuNode(t *testing.T, fl *fleet.Fleet, name string, cores, memoryMB int) {
	t.Helper()
	if _, err := fl.Observe(t.Context(), busapi.NodeStatus{Node: name, BootID: "b1", LeaseSeconds: 15, CPUCores: cores, MemoryMB: memoryMB}); err != nil {
		t.Fatal(err)
	}
}

// desiredReplicas is the replicas of a node's latest desired state.
func (f *fixture) desiredReplicas(t *testing.T, node string) []busapi.ReplicaSpec {
	t.Helper()
	var payload []byte
	if err := f.db.QueryRow(t.Context(), "SELECT payload FROM outbox WHERE subject = $1 ORDER BY id DESC LIMIT 1",
		busapi.KVSubject(busapi.BucketDesired, node)).Scan(&payload); err != nil {
		t.Fatalf("desired of %s: %v", node, err)
	}
	var d busapi.Desired
	if err := json.Unmarshal(payload, &d); err != nil {
		t.Fatal(err)
	}
	return d.Replicas
}

func (f *fixture) createModel(t *testing.T, name, task string) {
	t.Helper()
	if _, err := f.reg.CreateModel(t.Context(), f.eng, registry.ModelSpec{Team: "risk", Name: name, Task: task}); err != nil {
		t.Fatal(err)
	}
}

// TestValidationGGUFMemoryNeed: a builtin-llm version that declares no
// memory is registered with memory_mb 0; validation computes its need from
// the file and records it on the version, and placement sizes its replicas
// by it, so a node holds as many as its memory allows. A version that
// declares at least the need keeps its declared size. With no CPU node
// registered at validation the version is validated, and placement says
// it cannot place it until a node joins.
func TestValidationGGUFMemoryNeed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.createModel(t, "chat", registry.TaskLLM)
	demo := demoGGUF(t)
	need := needMB(t, demo)
	t.Logf("the demo model needs %d MiB", need)

	auto := f.registerGGUF(t, "auto", demo, registry.Resources{})
	if auto.Resources.MemoryMB != 0 || auto.Resources.CPUCores != registry.DefaultCPUCores || auto.MemoryNeedMB != 0 {
		t.Fatalf("registered auto = %+v need %d; want memory_mb 0 (computed at validation), the default cores, no need yet", auto.Resources, auto.MemoryNeedMB)
	}
	declared := f.registerGGUF(t, "declared", demo, registry.Resources{CPUCores: 1, MemoryMB: need + 100})
	if declared.Resources.MemoryMB != need+100 {
		t.Fatalf("registered declared memory_mb = %d, want %d as declared", declared.Resources.MemoryMB, need+100)
	}
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for name, mem := range map[string]int32{"auto": 0, "declared": need + 100} {
		v := f.version(t, "chat", name)
		if v.Status != registry.StatusValidated || v.MemoryNeedMB != need || v.Resources.MemoryMB != mem {
			t.Errorf("%s = %q need %d memory_mb %d (%+v); want validated, need %d, memory_mb %d", name, v.Status, v.MemoryNeedMB,
				v.Resources.MemoryMB, v.Validation, need, mem)
		}
	}

	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	mock := quartz.NewMock(t)
	mock.Set(clock)
	fl := fleet.New(f.db, fleet.Options{Clock: mock, Log: slog.New(slog.DiscardHandler)})
	for _, e := range []struct {
		name, version string
		replicas      int32
	}{{"auto-ep", "auto", 3}, {"declared-ep", "declared", 1}} {
		if _, err := f.eps.Create(ctx, f.eng, endpoint.Spec{Name: e.name, Model: "chat", Version: e.version,
			Settings: endpoint.Settings{MinReplicas: e.replicas, MaxReplicas: e.replicas, Tier: "standard", RetentionDays: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	// No CPU node yet: validated, but nowhere to go.
	if p, err := fl.Reconcile(ctx, clock); err != nil || p.Placed != 0 || p.Unplaced != 4 {
		t.Fatalf("pass without nodes = %+v, %v; want the 4 replicas unplaced", p, err)
	}
	want := fmt.Sprintf("%d MiB of free memory", need)
	if e, err := f.eps.Get(ctx, f.eng, "auto-ep"); err != nil || !strings.Contains(e.PlacementError, want) {
		t.Fatalf("auto-ep placement error = %q, %v; want one naming %q", e.PlacementError, err, want)
	}

	// A node whose memory holds two replicas of the need, not three, nor
	// the declared one beside them: the node's memory is accounted by the
	// need.
	cpuNode(t, fl, "cpu-a", 8, 2*int(need)+int(need)/2)
	if p, err := fl.Reconcile(ctx, clock); err != nil || p.Placed != 2 || p.Unplaced != 2 {
		t.Fatalf("pass = %+v, %v; want 2 placed (two of the need) and 2 unplaced", p, err)
	}
	if rs := f.desiredReplicas(t, "cpu-a"); len(rs) != 2 || rs[0].Endpoint != "auto-ep" || rs[0].MemoryMB != int(need) || rs[1].MemoryMB != int(need) {
		t.Errorf("cpu-a replicas = %+v; want 2 of auto-ep with %d MiB (the need) each", rs, need)
	}
	if e, err := f.eps.Get(ctx, f.eng, "auto-ep"); err != nil || !strings.Contains(e.PlacementError, want) {
		t.Errorf("auto-ep placement error = %q, %v; want the third replica's, naming %q", e.PlacementError, err, want)
	}

	// A large node takes the rest: the third of the need and the declared
	// one at its declared size.
	cpuNode(t, fl, "cpu-b", 8, 4096)
	if p, err := fl.Reconcile(ctx, clock); err != nil || p.Placed != 2 || p.Unplaced != 0 {
		t.Fatalf("pass = %+v, %v; want the 2 left placed", p, err)
	}
	got := map[string][]int{}
	for _, r := range f.desiredReplicas(t, "cpu-b") {
		got[r.Endpoint] = append(got[r.Endpoint], r.MemoryMB)
	}
	if a, d := got["auto-ep"], got["declared-ep"]; len(a) != 1 || a[0] != int(need) || len(d) != 1 || d[0] != int(need+100) {
		t.Errorf("cpu-b replicas' memory = %v; want auto-ep 1 × %d (the need) and declared-ep 1 × %d (as declared)", got, need, need+100)
	}
}

// TestValidationGGUFNeedAboveLargestNode: a GGUF model that needs more
// memory than the largest registered CPU node is invalid with both numbers
// in the reason, whether it declares no memory or more than the need; its
// need is recorded all the same. A GPU node's memory does not count.
func TestValidationGGUFNeedAboveLargestNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.createModel(t, "chat", registry.TaskLLM)
	demo := demoGGUF(t)
	need := needMB(t, demo)
	fl := fleet.New(f.db, fleet.Options{Clock: quartz.NewReal(), Log: slog.New(slog.DiscardHandler)})
	largest := int(need) - 1
	cpuNode(t, fl, "cpu-small", 4, largest/2)
	cpuNode(t, fl, "cpu-large", 4, largest)
	if _, err := fl.Observe(ctx, busapi.NodeStatus{Node: "gpu-a", BootID: "b1", LeaseSeconds: 15,
		GPUs: []busapi.GPU{{Index: 0, Type: "A100-80GB", MemoryMB: 81920, Slices: []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}}}}); err != nil {
		t.Fatal(err)
	}
	f.registerGGUF(t, "auto", demo, registry.Resources{})
	f.registerGGUF(t, "declared", demo, registry.Resources{MemoryMB: need + 100})
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	says := fmt.Sprintf("the model needs %d MiB (weights as float32 and the K/V cache, computed from the GGUF file) but the largest CPU node has %d MiB", need, largest)
	for _, name := range []string{"auto", "declared"} {
		v := f.version(t, "chat", name)
		if v.Status != registry.StatusInvalid || v.Validation == nil || v.Validation.Reason != says || v.MemoryNeedMB != need {
			t.Errorf("%s = %q need %d %+v; want invalid with the reason %q and need %d", name, v.Status, v.MemoryNeedMB, v.Validation, says, need)
		}
	}

	// Once a node that holds it has joined, the same file validates.
	cpuNode(t, fl, "cpu-huge", 4, int(need))
	f.registerGGUF(t, "later", demo, registry.Resources{})
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if v := f.version(t, "chat", "later"); v.Status != registry.StatusValidated || v.MemoryNeedMB != need {
		t.Errorf("later = %q need %d %+v; want validated with need %d", v.Status, v.MemoryNeedMB, v.Validation, need)
	}
}

// bigKV is a consistent llama GGUF (zero weights, F16) whose default K/V
// cache is large: 18 layers of 256-wide K and V over 65,536 positions,
// 2.25 GiB, while the file is about 11 MB.
func bigKV(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.gguf")
	if err := os.WriteFile(path, demoGGUF(t), 0o644); err != nil {
		t.Fatal(err)
	}
	demo, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer demo.Close()
	const layers, dim, heads, ffn, vocab, context = 18, 256, 4, 64, 259, 4096
	set := map[string]uint32{"llama.block_count": layers, "llama.embedding_length": dim, "llama.feed_forward_length": ffn,
		"llama.attention.head_count": heads, "llama.attention.head_count_kv": heads, "llama.rope.dimension_count": dim / heads,
		"llama.context_length": context}
	var kvs []gguf.KV
	for _, kv := range demo.KV {
		if v, ok := set[kv.Key]; ok {
			kv.Value = v
		}
		kvs = append(kvs, kv)
	}
	var tensors []gguf.Tensor
	add := func(name string, rows, cols int) {
		tt := gguf.Tensor{Name: name, Dims: []uint64{uint64(cols)}, Type: gguf.F32, Data: make([]byte, 4*cols)}
		if rows > 1 {
			tt.Dims, tt.Type, tt.Data = append(tt.Dims, uint64(rows)), gguf.F16, make([]byte, 2*rows*cols)
		}
		tensors = append(tensors, tt)
	}
	add("token_embd.weight", vocab, dim)
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", 1, dim)
		for _, m := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			add(p+m+".weight", dim, dim)
		}
		add(p+"ffn_norm.weight", 1, dim)
		add(p+"ffn_gate.weight", ffn, dim)
		add(p+"ffn_up.weight", ffn, dim)
		add(p+"ffn_down.weight", dim, ffn)
	}
	add("output_norm.weight", 1, dim)
	add("output.weight", vocab, dim)
	var b bytes.Buffer
	if err := gguf.Write(&b, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestValidationGGUFNeedAboveValidationLimit: a model whose need is above
// the memory a validation child may take is not loaded by the control
// plane (the load could only crash the child): its need is recorded, it
// is skipped with the reason and left to its replicas' warm-up.
func TestValidationGGUFNeedAboveValidationLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	// The least a Go child starts under (at 1 GiB of address space its
	// runtime cannot allocate its first arena).
	const limit = 2048
	f.validator = versioncheck.New(versioncheck.Config{Pool: f.db, Store: f.store, Binary: binary, WorkDir: t.TempDir(), MemoryMB: limit})
	f.createModel(t, "chat", registry.TaskLLM)
	body := bigKV(t)
	need := needMB(t, body)
	if need <= limit {
		t.Fatalf("the big-K/V model needs %d MiB; the test wants more than %d", need, limit)
	}
	f.registerGGUF(t, "big", body, registry.Resources{})
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	v := f.version(t, "chat", "big")
	says := fmt.Sprintf("the model needs %d MiB, more than a validation may take here (%d MiB", need, limit)
	if v.Status != registry.StatusRegistered || v.MemoryNeedMB != need || v.Validation == nil || v.Validation.State != "skipped" ||
		!strings.HasPrefix(v.Validation.Reason, says) {
		t.Fatalf("big = %q need %d %+v; want registered, need %d, skipped with a reason starting %q", v.Status, v.MemoryNeedMB, v.Validation, need, says)
	}
	t.Logf("big: %s", v.Validation.Reason)
	if v.Validation.LoadMS != nil {
		t.Errorf("load_ms = %v; want none, the model was not loaded", *v.Validation.LoadMS)
	}
}

// TestValidationGGUFNeedFollowsServingSizes: the K/V cache in a GGUF
// version's need is the one its replicas' engine will hold, sized by the
// version's serving.llm (one sequence here, against the default batch).
func TestValidationGGUFNeedFollowsServingSizes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.createModel(t, "chat", registry.TaskLLM)
	demo := demoGGUF(t)
	one := llmserve.Settings{MaxNumSeqs: 1}
	want, dflt := needWith(t, demo, one), needMB(t, demo)
	if want >= dflt {
		t.Fatalf("need with one sequence %d MiB, default %d MiB: the fixture must tell them apart", want, dflt)
	}
	f.registerGGUFServing(t, "one-seq", demo, registry.Resources{}, registry.Serving{LLM: &registry.ServingLLM{MaxNumSeqs: 1}})
	if _, err := f.validator.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v := f.version(t, "chat", "one-seq"); v.Status != registry.StatusValidated || v.MemoryNeedMB != want {
		t.Fatalf("one-seq = %q need %d (%+v); want validated with need %d MiB (default batch: %d)", v.Status, v.MemoryNeedMB, v.Validation, want, dflt)
	}
}
