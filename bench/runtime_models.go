package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"modelplane/demo/fraud"
	"modelplane/runtime/onnx/onnxgen"
	"modelplane/serveapi"
)

// mlpShape is an MLP's widths: Inputs features, then each hidden layer
// (Relu), then one Sigmoid output, the positive class's probability.
type mlpShape struct {
	Inputs int
	Hidden []int
}

// String is the shape in words, as the result states it.
func (m mlpShape) String() string {
	w := []string{strconv.Itoa(m.Inputs)}
	for _, h := range m.Hidden {
		w = append(w, strconv.Itoa(h))
	}
	return fmt.Sprintf("ONNX MLP %s-1 (MatMul+Add+Relu per hidden layer, Sigmoid output), %d float32 weights",
		strings.Join(w, "-"), m.weights())
}

// weights counts the MLP's parameters.
func (m mlpShape) weights() int64 {
	var n int64
	in := m.Inputs
	for _, h := range append(m.Hidden, 1) {
		n += int64(in)*int64(h) + int64(h)
		in = h
	}
	return n
}

// parseMLP reads "64x2048x2048": the inputs, then the hidden widths.
func parseMLP(s string) (mlpShape, error) {
	var w []int
	for f := range strings.SplitSeq(s, "x") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return mlpShape{}, fmt.Errorf("%q: want INPUTSxHIDDENx... of positive widths", s)
		}
		w = append(w, n)
	}
	if len(w) < 2 {
		return mlpShape{}, fmt.Errorf("%q: want at least the inputs and one hidden layer", s)
	}
	return mlpShape{Inputs: w[0], Hidden: w[1:]}, nil
}

// coldShape is the cold-start MLP: 256 inputs, then hidden layers of 4096
// (64 MiB of weights each) until the weights take at least minBytes.
func coldShape(minBytes int64) mlpShape {
	m := mlpShape{Inputs: 256, Hidden: []int{4096}}
	for m.weights()*4 < minBytes {
		m.Hidden = append(m.Hidden, 4096)
	}
	return m
}

// writeONNX writes an MLP model directory named name in the scratch
// directory.
func (b *runtimeBench) writeONNX(name string, shape mlpShape) (string, *RuntimeModel, error) {
	return b.writeONNXAt(filepath.Join(b.s.dir, name), name, shape)
}

// writeONNXAt writes dir/model.onnx, streamed by onnxgen (weights drawn
// from a fixed seed, never held in memory), and its serving configuration:
// features f0…, a binary classifier's output and four sample inputs.
func (b *runtimeBench) writeONNXAt(dir, name string, shape mlpShape) (string, *RuntimeModel, error) {
	var layers []onnxgen.Layer
	for _, h := range shape.Hidden {
		layers = append(layers, onnxgen.Layer{Units: h, Activation: onnxgen.Relu})
	}
	layers = append(layers, onnxgen.Layer{Units: 1, Activation: onnxgen.Sigmoid})
	m, err := onnxgen.MLP(shape.Inputs, layers, onnxgen.MLPOptions{Seed: 14, ProducerName: "modelplane bench runtime"})
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	f, err := os.Create(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return "", nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	n, err := m.WriteTo(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", nil, fmt.Errorf("write %s: %w", name, err)
	}
	features := make([]serveapi.Feature, shape.Inputs)
	for i := range features {
		features[i] = serveapi.Feature{Name: "f" + strconv.Itoa(i)}
	}
	cfg := serveapi.Config{Model: name, Version: "v1", Format: "onnx", File: "model.onnx", Features: features,
		Output: serveapi.Output{Classes: []string{"legit", "fraud"}}, SampleInputs: sampleInputs(features, 4)}
	if err := writeJSON(filepath.Join(dir, serveapi.ConfigFile), cfg); err != nil {
		return "", nil, err
	}
	return dir, &RuntimeModel{Format: "onnx", Model: shape.String(), FileBytes: n, Features: shape.Inputs}, nil
}

// writeDemo writes the model directory named name of the demo fraud
// model's version (demo/fraud, built from the demo's seed): v23 is the
// XGBoost model, v24 the ONNX logistic regression.
func (b *runtimeBench) writeDemo(name, version string) (string, *RuntimeModel, error) {
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		return "", nil, err
	}
	i := slices.IndexFunc(vs, func(v fraud.Version) bool { return v.Name == version })
	if i < 0 {
		return "", nil, fmt.Errorf("the demo has no fraud model version %s", version)
	}
	v := vs[i]
	dir := filepath.Join(b.s.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, v.File), v.Data, 0o644); err != nil {
		return "", nil, err
	}
	cfg := v.Serving
	cfg.Model, cfg.Version = name, v.Name
	if err := writeJSON(filepath.Join(dir, serveapi.ConfigFile), cfg); err != nil {
		return "", nil, err
	}
	return dir, &RuntimeModel{Format: v.Format, Model: "demo fraud model " + v.Name + ": " + v.Description,
		FileBytes: int64(len(v.Data)), Features: len(cfg.Features)}, nil
}

// demoBodies are n /predict bodies of one demo payment each, keyed by
// feature name as the demo's traffic sends them, from a fixed seed.
func demoBodies(n int) []string {
	g := fraud.NewGenerator(fraud.DefaultSeed + 14)
	out := make([]string, n)
	for i := range out {
		raw, _ := json.Marshal(map[string]any{"instances": []any{g.Next(0).Instance}})
		out[i] = string(raw)
	}
	return out
}

// sampleInputs are n instances keyed by feature name, for warm-up.
func sampleInputs(features []serveapi.Feature, n int) []json.RawMessage {
	var out []json.RawMessage
	for _, body := range predictBodies(features, n) {
		var req struct {
			Instances [][]any `json:"instances"`
		}
		_ = json.Unmarshal([]byte(body), &req)
		obj := map[string]any{}
		for j, f := range features {
			obj[f.Name] = req.Instances[0][j]
		}
		raw, _ := json.Marshal(obj)
		out = append(out, raw)
	}
	return out
}
