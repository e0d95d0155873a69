//go:build cgo

package runtime_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/onnx"
	"modelplane/runtime/onnx/onnxgen"
	"modelplane/serveapi"
)

// rowSums writes a model of one input x FP32 [batch, seq], both axes
// dynamic, and two outputs: sum, x's rows summed ([batch]), and double,
// x times 2 ([batch, seq]).
func rowSums(t *testing.T) string {
	t.Helper()
	m := onnxgen.Model{Graph: onnxgen.Graph{
		Name: "row_sums",
		Nodes: []onnxgen.Node{
			{OpType: "ReduceSum", Inputs: []string{"x"}, Outputs: []string{"sum"}, Attrs: []onnxgen.Attr{onnxgen.IntsAttr("axes", 1), onnxgen.IntAttr("keepdims", 0)}},
			{OpType: "Mul", Inputs: []string{"x", "two"}, Outputs: []string{"double"}},
		},
		Initializers: []onnxgen.Tensor{{Name: "two", Dims: []int64{}, Floats: []float32{2}}},
		Inputs:       []onnxgen.Value{{Name: "x", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("seq")}}},
		Outputs: []onnxgen.Value{
			{Name: "sum", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch")}},
			{Name: "double", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("seq")}},
		},
	}, Opsets: []onnxgen.Opset{{Version: 12}}}
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "row_sums.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gated holds every Run until the test lets it through and records the
// first dimension of each batch the real model was given.
type gated struct {
	serveapi.TensorModel
	gate    chan struct{}
	mu      sync.Mutex
	batches [][]int64
}

func (g *gated) Run(in []serveapi.Tensor) ([]serveapi.Tensor, error) {
	<-g.gate
	g.mu.Lock()
	g.batches = append(g.batches, in[0].Shape)
	g.mu.Unlock()
	return g.TensorModel.Run(in)
}

func (g *gated) seen() [][]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]int64(nil), g.batches...)
}

// TestTensorBatching holds the model on one request while three more
// queue: the two whose rows have the same length run as one batch, merged
// along the first axis, and the one of another length runs alone (the
// model declares no padding), each request getting its own rows back.
func TestTensorBatching(t *testing.T) {
	requireONNX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := rowSums(t)
	g := &gated{gate: make(chan struct{})}
	dir := t.TempDir()
	if err := os.Symlink(model, filepath.Join(dir, "model.onnx")); err != nil {
		t.Fatal(err)
	}
	cfg := serveapi.Config{Model: "m", Version: "v1", Format: "onnx", File: "model.onnx", Batching: serveapi.Batching{MaxBatchSize: 8}}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open(dir, nil, runtime.Options{Tensors: map[string]runtime.TensorOpener{"onnx": func(path string) (serveapi.TensorModel, error) {
		m, err := onnx.LoadTensors(path, onnx.Options{})
		g.TensorModel = m
		return g, err
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close(context.Background())

	meta := metadata(t, hs.URL)
	if len(meta.Inputs) != 1 || meta.Inputs[0].Name != "x" || meta.Inputs[0].Datatype != "FP32" || len(meta.Inputs[0].Shape) != 2 ||
		meta.Inputs[0].Shape[0] != -1 || len(meta.Outputs) != 2 || meta.Outputs[0].Name != "sum" {
		t.Fatalf("metadata %+v", meta)
	}
	type result struct {
		status int
		a      v2Answer
	}
	send := func(shape []int64, data string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			st, a := postV2(t, hs.URL, []v2Tensor{{Name: "x", Datatype: "FP32", Shape: shape, Data: json.RawMessage(data)}})
			ch <- result{st, a}
		}()
		return ch
	}
	queued := func() float64 {
		return decode[map[string]any](t, do(t, "GET", hs.URL+"/v2/stats", ""))["queue_depth"].(float64)
	}
	first := send([]int64{1, 2}, `[[1, 2]]`)
	wait.Eventually(t, 10*time.Second, func() bool {
		return decode[map[string]any](t, do(t, "GET", hs.URL+"/v2/stats", ""))["in_flight"] == 1.0 && queued() == 0
	}, "first request not executing")
	b := send([]int64{2, 3}, `[[1, 2, 3], [4, 5, 6]]`)
	wait.Eventually(t, 10*time.Second, func() bool { return queued() == 1 }, "second request not queued")
	ragged := send([]int64{1, 4}, `[[1, 1, 1, 1]]`)
	wait.Eventually(t, 10*time.Second, func() bool { return queued() == 2 }, "third request not queued")
	c := send([]int64{1, 3}, `[[10, 20, 30]]`)
	wait.Eventually(t, 10*time.Second, func() bool { return queued() == 3 }, "fourth request not queued")
	for range 3 {
		g.gate <- struct{}{}
	}
	want := map[<-chan result]string{first: "[3]", b: "[6,15]", c: "[60]", ragged: "[4]"}
	for ch, sum := range want {
		r := <-ch
		if r.status != http.StatusOK || string(r.a.Outputs[0].Data) != sum {
			t.Errorf("answer %d %+v; want sum %s", r.status, r.a, sum)
		}
	}
	got := g.seen()
	if len(got) != 3 || got[0][0] != 1 || got[1][0] != 3 || got[1][1] != 3 || got[2][0] != 1 || got[2][1] != 4 {
		t.Fatalf("batches of shapes %v; want [1 2], then the two rows-of-3 requests merged [3 3], then the row of 4 alone [1 4]", got)
	}
}

// A tensor model takes /predict instances keyed by input name, each one
// row, ragged ones too (they run as separate batches), and answers its
// outputs by name; a V2 request that does not fit the graph is a 400
// naming the input.
func TestTensorPredictAndRefusals(t *testing.T) {
	requireONNX(t)
	_, url := serveTensors(t, rowSums(t), serveapi.Batching{MaxBatchSize: 8}, runtime.Options{})
	r := do(t, "POST", url+"/predict", `{"instances": [{"x": [1, 2]}, {"x": [1, 2, 3]}, {"x": [5, 5]}]}`)
	want := `{"predictions":[{"double":[2,4],"sum":3},{"double":[2,4,6],"sum":6},{"double":[10,10],"sum":10}],"model_version":"v1"}` + "\n"
	if r.status != http.StatusOK || string(r.body) != want {
		t.Fatalf("predict: %d %s; want %s", r.status, r.body, want)
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"wrong datatype", `{"inputs":[{"name":"x","datatype":"INT64","shape":[1,2],"data":[1,2]}]}`, `inputs[\"x\"]: datatype \"INT64\"; the model takes FP32`},
		{"wrong rank", `{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1,2]}]}`, `shape [2]; the model takes [-1,-1]`},
		{"unknown input", `{"inputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`, `not an input of the model; it takes \"x\"`},
		{"data short of the shape", `{"inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[1,2]}]}`, `data has 2 values; shape [2 2] needs 4`},
		{"unknown output asked for", `{"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[1]}],"outputs":[{"name":"z"}]}`, `outputs: \"z\" is not an output`},
	} {
		r := do(t, "POST", url+"/v2/models/m/infer", tc.body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s: %d %s; want 400 with %s", tc.name, r.status, r.body, tc.want)
		}
	}
	r = do(t, "POST", url+"/v2/models/m/infer", `{"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],"data":[[1,2]]}],"outputs":[{"name":"sum"}]}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"outputs":[{"name":"sum","datatype":"FP32","shape":[1],"data":[3]}]`) {
		t.Errorf("asking for one output: %d %s", r.status, r.body)
	}
}

// paddedSums writes a model of x FP32 [batch, seq] → sum [batch] that
// declares x paddable with 0 (metadata modelplane.padding), which leaves a
// row's sum as it is.
func paddedSums(t *testing.T) string {
	t.Helper()
	m := onnxgen.Model{Graph: onnxgen.Graph{
		Name: "padded_sums",
		Nodes: []onnxgen.Node{
			{OpType: "ReduceSum", Inputs: []string{"x"}, Outputs: []string{"sum"}, Attrs: []onnxgen.Attr{onnxgen.IntsAttr("axes", 1), onnxgen.IntAttr("keepdims", 0)}},
		},
		Inputs:  []onnxgen.Value{{Name: "x", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("seq")}}},
		Outputs: []onnxgen.Value{{Name: "sum", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch")}}},
	}, Opsets: []onnxgen.Opset{{Version: 12}}, Metadata: []onnxgen.Prop{{Key: onnx.MetadataPadding, Value: `{"x": 0}`}}}
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "padded_sums.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// paddedGate is gated for a model that declares padding.
type paddedGate struct{ *gated }

func (p paddedGate) PadValues() map[string]float64 {
	return p.TensorModel.(serveapi.Padding).PadValues()
}

// TestTensorPadding: a model that declares its input paddable batches
// rows of different lengths together, each padded with the declared value
// to the longest, and every request gets its own answer.
func TestTensorPadding(t *testing.T) {
	requireONNX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := &gated{gate: make(chan struct{})}
	dir := t.TempDir()
	if err := os.Symlink(paddedSums(t), filepath.Join(dir, "model.onnx")); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(serveapi.Config{Model: "m", Version: "v1", Format: "onnx", File: "model.onnx", Batching: serveapi.Batching{MaxBatchSize: 8}})
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open(dir, nil, runtime.Options{Tensors: map[string]runtime.TensorOpener{"onnx": func(path string) (serveapi.TensorModel, error) {
		m, err := onnx.LoadTensors(path, onnx.Options{})
		g.TensorModel = m
		return paddedGate{g}, err
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close(context.Background())
	type result struct {
		status int
		a      v2Answer
	}
	send := func(shape []int64, data string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			st, a := postV2(t, hs.URL, []v2Tensor{{Name: "x", Datatype: "FP32", Shape: shape, Data: json.RawMessage(data)}})
			ch <- result{st, a}
		}()
		return ch
	}
	queued := func() float64 {
		return decode[map[string]any](t, do(t, "GET", hs.URL+"/v2/stats", ""))["queue_depth"].(float64)
	}
	first := send([]int64{1, 1}, `[[7]]`)
	wait.Eventually(t, 10*time.Second, func() bool {
		return decode[map[string]any](t, do(t, "GET", hs.URL+"/v2/stats", ""))["in_flight"] == 1.0 && queued() == 0
	}, "first request not executing")
	short := send([]int64{1, 2}, `[[1, 2]]`)
	wait.Eventually(t, 10*time.Second, func() bool { return queued() == 1 }, "second request not queued")
	long := send([]int64{2, 4}, `[[1, 1, 1, 1], [2, 2, 2, 2]]`)
	wait.Eventually(t, 10*time.Second, func() bool { return queued() == 2 }, "third request not queued")
	g.gate <- struct{}{}
	g.gate <- struct{}{}
	for ch, sum := range map[<-chan result]string{first: "[7]", short: "[3]", long: "[4,8]"} {
		if r := <-ch; r.status != http.StatusOK || string(r.a.Outputs[0].Data) != sum {
			t.Errorf("answer %d %+v; want sum %s", r.status, r.a, sum)
		}
	}
	if got := g.seen(); len(got) != 2 || got[1][0] != 3 || got[1][1] != 4 {
		t.Fatalf("batches of shapes %v; want [1 1], then the rows of 2 and of 4 padded together [3 4]", got)
	}
}

// Padding declared on a model whose output rows have a dynamic length
// (padding would change them) is refused at load, naming the output.
func TestTensorPaddingRefused(t *testing.T) {
	requireONNX(t)
	m := onnxgen.Model{Graph: onnxgen.Graph{
		Name:         "doubles",
		Nodes:        []onnxgen.Node{{OpType: "Mul", Inputs: []string{"x", "two"}, Outputs: []string{"double"}}},
		Initializers: []onnxgen.Tensor{{Name: "two", Dims: []int64{}, Floats: []float32{2}}},
		Inputs:       []onnxgen.Value{{Name: "x", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("seq")}}},
		Outputs:      []onnxgen.Value{{Name: "double", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("seq")}}},
	}, Opsets: []onnxgen.Opset{{Version: 12}}, Metadata: []onnxgen.Prop{{Key: onnx.MetadataPadding, Value: `{"x": 0}`}}}
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(serveapi.Config{Model: "m", Format: "onnx", File: "model.onnx", Batching: serveapi.Batching{MaxBatchSize: 8}})
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Open(dir, nil, runtime.Options{Tensors: tensorOpeners()})
	if err == nil || !strings.Contains(err.Error(), `output "double" has shape [-1,-1]: padding would change its rows`) {
		t.Fatalf("open = %v; want a refusal naming the output", err)
	}
}

// BYTES in and out: a graph of string tensors (Identity, and Equal
// against a string constant, BOOL) served over V2 and /predict.
func TestTensorStrings(t *testing.T) {
	requireONNX(t)
	const onnxString, onnxBool = 8, 9
	m := onnxgen.Model{Graph: onnxgen.Graph{
		Name: "strings",
		Nodes: []onnxgen.Node{
			{OpType: "Identity", Inputs: []string{"s"}, Outputs: []string{"same"}},
			{OpType: "Equal", Inputs: []string{"s", "s"}, Outputs: []string{"equal"}},
		},
		Inputs: []onnxgen.Value{{Name: "s", ElemType: onnxString, Dims: []onnxgen.Dim{onnxgen.Symbolic("batch")}}},
		Outputs: []onnxgen.Value{
			{Name: "same", ElemType: onnxString, Dims: []onnxgen.Dim{onnxgen.Symbolic("batch")}},
			{Name: "equal", ElemType: onnxBool, Dims: []onnxgen.Dim{onnxgen.Symbolic("batch")}},
		},
	}, Opsets: []onnxgen.Opset{{Version: 19}}}
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "strings.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, url := serveTensors(t, path, serveapi.Batching{MaxBatchSize: 4}, runtime.Options{})
	meta := metadata(t, url)
	if meta.Inputs[0].Datatype != "BYTES" || meta.Outputs[0].Datatype != "BYTES" || meta.Outputs[1].Datatype != "BOOL" {
		t.Fatalf("metadata %+v; want BYTES in, BYTES and BOOL out", meta)
	}
	st, a := postV2(t, url, []v2Tensor{{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: json.RawMessage(`["héllo", "wörld"]`)}})
	if st != http.StatusOK || string(a.Outputs[0].Data) != `["héllo","wörld"]` || string(a.Outputs[1].Data) != `[true,true]` {
		t.Fatalf("infer: %d %+v", st, a)
	}
	r := do(t, "POST", url+"/predict", `{"instances": [{"s": "a"}, {"s": "b"}]}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `{"equal":true,"same":"a"}`) {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
}
