package onnxgen_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/runtime/onnx/onnxgen"
)

// installHint is what a test missing its tools tells the reader.
const installHint = "run scripts/install-deps.sh test"

// mlpCase is one MLP the tests write, run and compare.
type mlpCase struct {
	name   string
	inputs int
	layers []onnxgen.Layer
	opts   onnxgen.MLPOptions
}

// givenLayers are layers with every weight given by the caller.
func givenLayers(rng *rand.Rand, inputs int, units []int, acts []onnxgen.Activation) []onnxgen.Layer {
	var ls []onnxgen.Layer
	in := inputs
	for i, u := range units {
		l := onnxgen.Layer{Units: u, Activation: acts[i], Weights: make([]float32, in*u), Bias: make([]float32, u)}
		for j := range l.Weights {
			l.Weights[j] = float32(rng.NormFloat64())
		}
		for j := range l.Bias {
			l.Bias[j] = float32(rng.NormFloat64())
		}
		ls = append(ls, l)
		in = u
	}
	return ls
}

func cases() []mlpCase {
	rng := rand.New(rand.NewPCG(7, 8))
	return []mlpCase{
		{
			name: "logistic regression, opset 13", inputs: 9,
			layers: givenLayers(rng, 9, []int{1}, []onnxgen.Activation{onnxgen.Sigmoid}),
			opts:   onnxgen.MLPOptions{Opset: 13, OutputName: "probability"},
		},
		{
			name: "relu relu linear, given weights", inputs: 5,
			layers: givenLayers(rng, 5, []int{16, 8, 3}, []onnxgen.Activation{onnxgen.Relu, onnxgen.Relu, onnxgen.None}),
		},
		{
			name: "drawn weights, sigmoid output", inputs: 32,
			layers: []onnxgen.Layer{
				{Units: 64, Activation: onnxgen.Relu},
				{Units: 64, Activation: onnxgen.Relu},
				{Units: 2, Activation: onnxgen.Sigmoid},
			},
			opts: onnxgen.MLPOptions{Seed: 42, InputName: "features",
				Metadata: []onnxgen.Prop{{Key: "modelplane.output_kind", Value: "probability"}}},
		},
		{
			name: "wide drawn layer streamed in chunks", inputs: 300,
			layers: []onnxgen.Layer{{Units: 700, Activation: onnxgen.Relu}, {Units: 1}},
			opts:   onnxgen.MLPOptions{Seed: 3},
		},
	}
}

// weights returns layer i's weights and bias as the model holds them.
func weights(c mlpCase, i, in int) ([]float32, []float32) {
	l := c.layers[i]
	w, b := l.Weights, l.Bias
	if w == nil {
		w = make([]float32, in*l.Units)
		onnxgen.LayerWeights(c.opts.Seed, i, in, l.Units)(w, 0)
	}
	if b == nil {
		b = make([]float32, l.Units)
		onnxgen.LayerBias(c.opts.Seed, i, in)(b, 0)
	}
	return w, b
}

// forward is the MLP computed in Go, in float64: the reference both ONNX
// Runtime and NumPy are held to.
func forward(c mlpCase, rows [][]float32) [][]float64 {
	out := make([][]float64, len(rows))
	for r, row := range rows {
		x := make([]float64, len(row))
		for j, v := range row {
			x[j] = float64(v)
		}
		in := c.inputs
		for i, l := range c.layers {
			w, b := weights(c, i, in)
			y := make([]float64, l.Units)
			for u := range y {
				s := float64(b[u])
				for k := range x {
					s += x[k] * float64(w[k*l.Units+u])
				}
				switch l.Activation {
				case onnxgen.Relu:
					s = math.Max(s, 0)
				case onnxgen.Sigmoid:
					s = 1 / (1 + math.Exp(-s))
				}
				y[u] = s
			}
			x, in = y, l.Units
		}
		out[r] = x
	}
	return out
}

func randomRows(seed uint64, n, width int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, width)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64())
		}
	}
	return rows
}

// near is the 1e-5 agreement of the issue, relative above 1.
func near(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*math.Max(1, math.Abs(want))
}

// write saves c's model in dir and returns its path.
func write(t *testing.T, dir string, i int, c mlpCase) string {
	t.Helper()
	m, err := onnxgen.MLP(c.inputs, c.layers, c.opts)
	if err != nil {
		t.Fatalf("%s: MLP: %v", c.name, err)
	}
	path := filepath.Join(dir, "model"+string(rune('a'+i))+".onnx")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := m.WriteTo(f)
	if err != nil {
		t.Fatalf("%s: WriteTo: %v", c.name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Size() != n {
		t.Fatalf("%s: WriteTo reported %d bytes, file has %d", c.name, n, st.Size())
	}
	return path
}

func python(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("python3 not found (%s)", installHint)
		}
	}
	if out, err := exec.Command(py, "-c", "import onnx, numpy").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import onnx and numpy: %v: %s (%s)", py, err, out, installHint)
	}
	return py
}

// TestONNXCheckerAndNumPy has ONNX's checker accept every written model and
// NumPy, from the weights ONNX itself decodes, compute what Go computes.
func TestONNXCheckerAndNumPy(t *testing.T) {
	t.Parallel()
	py := python(t)
	dir := t.TempDir()
	type item struct {
		File   string      `json:"file"`
		Inputs [][]float32 `json:"inputs"`
	}
	cs := cases()
	var items []item
	for i, c := range cs {
		items = append(items, item{File: write(t, dir, i, c), Inputs: randomRows(uint64(i), 16, c.inputs)})
	}
	raw, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "cases.json")
	if err := os.WriteFile(list, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "check.py"), list)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check.py: %v: %s", err, stderr.String())
	}
	var got [][][]float32
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("check.py output: %v", err)
	}
	if len(got) != len(cs) {
		t.Fatalf("check.py answered %d models, want %d", len(got), len(cs))
	}
	for i, c := range cs {
		want := forward(c, items[i].Inputs)
		for r := range want {
			for j := range want[r] {
				if !near(got[i][r][j], want[r][j]) {
					t.Errorf("%s: row %d[%d]: NumPy %v, Go %v", c.name, r, j, got[i][r][j], want[r][j])
				}
			}
		}
	}
}

func TestBytesDeterministic(t *testing.T) {
	t.Parallel()
	for _, c := range cases() {
		m, err := onnxgen.MLP(c.inputs, c.layers, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		a, err := m.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		if _, err := m.WriteTo(&w); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) || !bytes.Equal(a, w.Bytes()) {
			t.Errorf("%s: Bytes and WriteTo differ between calls", c.name)
		}
	}
}

func TestUniformIsCounterBased(t *testing.T) {
	t.Parallel()
	fill := onnxgen.Uniform(9, 4, 0.5)
	whole := make([]float32, 1000)
	fill(whole, 0)
	part := make([]float32, 100)
	fill(part, 450)
	if !slicesEqual(part, whole[450:550]) {
		t.Fatal("a chunk filled at offset 450 differs from the same values filled at once")
	}
	other := make([]float32, 1000)
	onnxgen.Uniform(9, 5, 0.5)(other, 0)
	if slicesEqual(other, whole) {
		t.Fatal("streams 4 and 5 gave the same values")
	}
	lo, hi := float32(1), float32(-1)
	for _, v := range whole {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo < -0.5 || hi >= 0.5 || lo > -0.45 || hi < 0.45 {
		t.Fatalf("values span [%v, %v], want about [-0.5, 0.5)", lo, hi)
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	one := []onnxgen.Layer{{Units: 1}}
	tests := []struct {
		name   string
		inputs int
		layers []onnxgen.Layer
		want   string
	}{
		{"no inputs", 0, one, "0 inputs"},
		{"no layers", 3, nil, "no layers"},
		{"a layer of no units", 3, []onnxgen.Layer{{Units: 0}}, "layer 0 has 0 units"},
		{"an unknown activation", 3, []onnxgen.Layer{{Units: 1, Activation: "Tanh"}}, `activation "Tanh"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := onnxgen.MLP(tt.inputs, tt.layers, onnxgen.MLPOptions{})
			if !errors.Is(err, onnxgen.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("MLP error = %v, want ErrInvalid with %q", err, tt.want)
			}
		})
	}
	t.Run("weights of the wrong size", func(t *testing.T) {
		m, err := onnxgen.MLP(3, []onnxgen.Layer{{Units: 2, Weights: make([]float32, 5)}}, onnxgen.MLPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Bytes()
		if !errors.Is(err, onnxgen.ErrInvalid) || !strings.Contains(err.Error(), "5 floats for dims [3 2]") {
			t.Fatalf("Bytes error = %v, want the size named", err)
		}
	})
	t.Run("a graph with no output", func(t *testing.T) {
		m := onnxgen.Model{Graph: onnxgen.Graph{Inputs: []onnxgen.Value{{Name: "x"}}}}
		if _, err := m.Bytes(); !errors.Is(err, onnxgen.ErrInvalid) {
			t.Fatalf("Bytes error = %v, want ErrInvalid", err)
		}
	})
}
