package onnxgen

import (
	"fmt"
	"math"
)

// Activation is what a layer applies after its affine map: None, Relu or
// Sigmoid (the ONNX operator names).
type Activation string

// Activations an MLP layer can apply.
const (
	None    Activation = ""
	Relu    Activation = "Relu"
	Sigmoid Activation = "Sigmoid"
)

// Layer is one dense layer of an MLP.
type Layer struct {
	// Units is the layer's output width.
	Units      int
	Activation Activation
	// Weights is the [in, Units] matrix, row-major (in is the previous
	// layer's width). Nil means drawn by LayerWeights.
	Weights []float32
	// Bias is the [Units] vector. Nil means drawn by LayerBias.
	Bias []float32
}

// MLPOptions name an MLP's tensors and seed its drawn weights.
type MLPOptions struct {
	// Seed seeds the weights and biases the layers do not give.
	Seed uint64
	// InputName and OutputName name the graph's input and output;
	// empty means "input" and "output".
	InputName, OutputName string
	// Opset is the default domain's opset; 0 means DefaultOpset. MatMul,
	// Add, Relu and Sigmoid are the same from opset 13 on.
	Opset int64
	// Metadata is written as the model's metadata_props.
	Metadata     []Prop
	ProducerName string
}

// MLP is the Model of a multi-layer perceptron over a [batch, inputs] float
// input: per layer MatMul, Add and the activation. The batch dimension is
// symbolic ("batch"), so any batch size runs.
func MLP(inputs int, layers []Layer, opts MLPOptions) (Model, error) {
	if inputs <= 0 {
		return Model{}, fmt.Errorf("%w: mlp with %d inputs", ErrInvalid, inputs)
	}
	if len(layers) == 0 {
		return Model{}, fmt.Errorf("%w: mlp with no layers", ErrInvalid)
	}
	inName, outName := opts.InputName, opts.OutputName
	if inName == "" {
		inName = "input"
	}
	if outName == "" {
		outName = "output"
	}
	opset := opts.Opset
	if opset == 0 {
		opset = DefaultOpset
	}
	g := Graph{Name: "mlp"}
	prev, width := inName, inputs
	for i, l := range layers {
		if l.Units <= 0 {
			return Model{}, fmt.Errorf("%w: layer %d has %d units", ErrInvalid, i, l.Units)
		}
		if l.Activation != None && l.Activation != Relu && l.Activation != Sigmoid {
			return Model{}, fmt.Errorf("%w: layer %d activation %q, want none, Relu or Sigmoid", ErrInvalid, i, l.Activation)
		}
		w := Tensor{Name: fmt.Sprintf("layer%d.weight", i), Dims: []int64{int64(width), int64(l.Units)}}
		if l.Weights != nil {
			w.Floats = l.Weights
		} else {
			w.Fill = LayerWeights(opts.Seed, i, width, l.Units)
		}
		b := Tensor{Name: fmt.Sprintf("layer%d.bias", i), Dims: []int64{int64(l.Units)}}
		if l.Bias != nil {
			b.Floats = l.Bias
		} else {
			b.Fill = LayerBias(opts.Seed, i, width)
		}
		g.Initializers = append(g.Initializers, w, b)
		last := i == len(layers)-1
		name := func(stage string, final bool) string {
			if final {
				return outName
			}
			return fmt.Sprintf("layer%d.%s", i, stage)
		}
		mm := name("matmul", false)
		add := name("add", last && l.Activation == None)
		g.Nodes = append(g.Nodes,
			Node{Name: mm, OpType: "MatMul", Inputs: []string{prev, w.Name}, Outputs: []string{mm}},
			Node{Name: fmt.Sprintf("layer%d.add", i), OpType: "Add", Inputs: []string{mm, b.Name}, Outputs: []string{add}})
		prev = add
		if l.Activation != None {
			act := name(string(l.Activation), last)
			g.Nodes = append(g.Nodes, Node{
				Name: fmt.Sprintf("layer%d.%s", i, l.Activation), OpType: string(l.Activation),
				Inputs: []string{add}, Outputs: []string{act},
			})
			prev = act
		}
		width = l.Units
	}
	g.Inputs = []Value{{Name: inName, Dims: []Dim{Symbolic("batch"), Fixed(int64(inputs))}}}
	g.Outputs = []Value{{Name: outName, Dims: []Dim{Symbolic("batch"), Fixed(int64(width))}}}
	return Model{
		Opsets:       []Opset{{Version: opset}},
		ProducerName: opts.ProducerName,
		Graph:        g,
		Metadata:     opts.Metadata,
	}, nil
}

// LayerWeights is the fill of layer i's [in, units] weights when the layer
// gives none: Glorot-uniform values, Uniform over ±sqrt(6/(in+units)).
func LayerWeights(seed uint64, i, in, units int) func(dst []float32, offset int) {
	return Uniform(seed, uint64(2*i), float32(math.Sqrt(6/float64(in+units))))
}

// LayerBias is the fill of layer i's bias when the layer gives none:
// Uniform over ±1/sqrt(in).
func LayerBias(seed uint64, i, in int) func(dst []float32, offset int) {
	return Uniform(seed, uint64(2*i+1), float32(1/math.Sqrt(float64(in))))
}

// Uniform is a counter-based generator of values uniform in [-limit, limit):
// the value at index k depends only on seed, stream and k, so a tensor can
// be filled chunk by chunk, in any order, and recomputed later.
func Uniform(seed, stream uint64, limit float32) func(dst []float32, offset int) {
	key := mix(seed ^ mix(stream+0x632be59bd9b4e019))
	return func(dst []float32, offset int) {
		for j := range dst {
			u := mix(key + uint64(offset+j)*0x9e3779b97f4a7c15)
			// 24 random bits: exact in float32.
			f := float32(u>>40) / (1 << 24)
			dst[j] = (2*f - 1) * limit
		}
	}
}

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
