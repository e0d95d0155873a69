//go:build cgo

package onnx

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"modelplane/serveapi"
)

// elemTypes maps ONNX's TensorProto.DataType to the V2 datatype Triton's
// ONNX Runtime backend serves it as. The others (complex numbers, the
// float8 and 4-bit types) have no V2 datatype and are refused.
var elemTypes = map[int]string{
	1: serveapi.TypeFP32, 2: serveapi.TypeUint8, 3: serveapi.TypeInt8, 4: serveapi.TypeUint16,
	5: serveapi.TypeInt16, 6: serveapi.TypeInt32, 7: serveapi.TypeInt64, 8: serveapi.TypeBytes,
	9: serveapi.TypeBool, 10: serveapi.TypeFP16, 11: serveapi.TypeFP64, 12: serveapi.TypeUint32,
	13: serveapi.TypeUint64, 16: serveapi.TypeBF16,
}

// onnxType is the element type of a V2 datatype, the inverse of elemTypes.
func onnxType(datatype string) (ort.TensorElementDataType, bool) {
	for k, v := range elemTypes {
		if v == datatype {
			return ort.TensorElementDataType(k), true
		}
	}
	return 0, false
}

// LoadTensors opens the ONNX model at path to be served with its own
// inputs and outputs (see the package documentation): every graph input
// that no initializer fills, and every graph output, each a tensor of an
// element type V2 has a datatype for.
func LoadTensors(path string, opts Options) (serveapi.TensorModel, error) {
	if _, err := environment(); err != nil {
		return nil, err
	}
	threads := max(opts.IntraOpThreads, 1)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(threads); err != nil {
		return nil, fmt.Errorf("onnx: intra-op threads: %w", err)
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: inter-op threads: %w", err)
	}
	g, err := readGraph(data)
	if err != nil {
		if _, _, oerr := ort.GetInputOutputInfoWithOptions(path, so); oerr != nil {
			return nil, refused(path, oerr)
		}
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	m := &tensorModel{}
	for _, vi := range g.inputs {
		m.inParams = append(m.inParams, vi.params)
	}
	for _, vi := range g.outputs {
		m.outParams = append(m.outParams, vi.params)
	}
	if m.inputs, err = specs("input", g.inputs); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	if m.outputs, err = specs("output", g.outputs); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	if len(m.outputs) == 0 {
		return nil, fmt.Errorf("onnx: %s: the graph has no outputs", filepath.Base(path))
	}
	if raw, ok := g.metadata[MetadataPadding]; ok {
		if m.pad, err = padValues(raw, m.inputs); err != nil {
			return nil, fmt.Errorf("onnx: %s: metadata %s: %w", filepath.Base(path), MetadataPadding, err)
		}
	}
	var inNames, outNames []string
	for _, s := range m.inputs {
		inNames = append(inNames, s.Name)
	}
	for _, s := range m.outputs {
		outNames = append(outNames, s.Name)
	}
	if m.sess, err = ort.NewDynamicAdvancedSession(path, inNames, outNames, so); err != nil {
		return nil, refused(path, err)
	}
	return m, nil
}

// specs turns the graph's declared inputs or outputs into the V2
// signature; a value with no declared shape gets nil (any shape).
func specs(what string, vis []valueInfo) ([]serveapi.TensorSpec, error) {
	out := make([]serveapi.TensorSpec, 0, len(vis))
	for _, vi := range vis {
		if !vi.tensor {
			return nil, fmt.Errorf("%s %q is not a tensor (a sequence or map), which V2 cannot carry", what, vi.name)
		}
		dt, ok := elemTypes[vi.elemType]
		if !ok {
			return nil, fmt.Errorf("%s %q holds %s, which has no V2 datatype", what, vi.name, elemTypeName(vi.elemType))
		}
		s := serveapi.TensorSpec{Name: vi.name, Datatype: dt}
		if vi.shaped {
			s.Shape = append([]int64{}, vi.dims...)
		}
		out = append(out, s)
	}
	return out, nil
}

// tensorModel is a serveapi.TensorModel over one ONNX Runtime session.
type tensorModel struct {
	mu              sync.Mutex
	sess            *ort.DynamicAdvancedSession
	inputs, outputs []serveapi.TensorSpec
	// inParams and outParams are the symbolic names of the dimensions.
	inParams, outParams [][]string
	// pad is the metadata's padding declaration (nil: none).
	pad map[string]float64
}

// MetadataPadding is the key of ModelProto.metadata_props that declares
// which inputs may be padded, and with what, so that rows of different
// lengths batch together: a JSON object of input name to pad value, as in
// {"input_ids": 0, "attention_mask": 0}. Each must be a numeric input of
// shape [batch, sequence].
const MetadataPadding = "modelplane.padding"

// padValues reads and checks the padding declaration.
func padValues(raw string, inputs []serveapi.TensorSpec) (map[string]float64, error) {
	var pad map[string]float64
	if err := json.Unmarshal([]byte(raw), &pad); err != nil {
		return nil, errors.New("must be a JSON object of input name to pad value")
	}
	for name := range pad {
		i := slices.IndexFunc(inputs, func(s serveapi.TensorSpec) bool { return s.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%q is not an input", name)
		}
		if s := inputs[i]; len(s.Shape) != 2 || s.Datatype == serveapi.TypeBytes {
			return nil, fmt.Errorf("input %q is %s %v; only a numeric [batch, sequence] input may be padded", name, s.Datatype, s.Shape)
		}
	}
	return pad, nil
}

// PadValues is the model's padding declaration (serveapi.Padding).
func (m *tensorModel) PadValues() map[string]float64 { return m.pad }

func (m *tensorModel) Inputs() []serveapi.TensorSpec  { return m.inputs }
func (m *tensorModel) Outputs() []serveapi.TensorSpec { return m.outputs }

// Run runs the session once on the given tensors.
func (m *tensorModel) Run(inputs []serveapi.Tensor) ([]serveapi.Tensor, error) {
	if len(inputs) != len(m.inputs) {
		return nil, fmt.Errorf("onnx: %d inputs, want %d", len(inputs), len(m.inputs))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil, errors.New("onnx: model is closed")
	}
	vals := make([]ort.Value, len(inputs))
	defer func() {
		for _, v := range vals {
			if v != nil {
				_ = v.Destroy()
			}
		}
	}()
	for i, in := range inputs {
		v, err := inputValue(in)
		if err != nil {
			return nil, fmt.Errorf("onnx: input %q: %w", in.Name, err)
		}
		vals[i] = v
	}
	// onnxruntime_go cannot take a 16-bit float output it allocates
	// itself (it sizes the copy one byte per element), so such outputs
	// are given buffers of the shape the graph declares, dynamic
	// dimensions resolved by the input dimensions of the same name.
	outs := make([]ort.Value, len(m.outputs))
	defer destroyAll(outs)
	for i, o := range m.outputs {
		if o.Datatype != serveapi.TypeFP16 && o.Datatype != serveapi.TypeBF16 {
			continue
		}
		shape, err := m.resolve(i, inputs)
		if err != nil {
			return nil, fmt.Errorf("onnx: output %q: %w", o.Name, err)
		}
		et, _ := onnxType(o.Datatype)
		t, err := ort.NewCustomDataTensor(ort.NewShape(shape...), make([]byte, 2*max(elements(shape), 1)), et)
		if err != nil {
			return nil, fmt.Errorf("onnx: output %q: %w", o.Name, err)
		}
		outs[i] = t
	}
	if err := m.sess.Run(vals, outs); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	res := make([]serveapi.Tensor, len(outs))
	for i, o := range outs {
		t, err := outputTensor(o, m.outputs[i])
		if err != nil {
			return nil, fmt.Errorf("onnx: output %q: %w", m.outputs[i].Name, err)
		}
		res[i] = t
	}
	return res, nil
}

func destroyAll(vs []ort.Value) {
	for _, v := range vs {
		if v != nil {
			_ = v.Destroy()
		}
	}
}

// resolve is output i's shape for these inputs: its fixed dimensions, and
// each dynamic one named like an input's dimension taken from that input.
func (m *tensorModel) resolve(i int, inputs []serveapi.Tensor) ([]int64, error) {
	o := m.outputs[i]
	if o.Shape == nil {
		return nil, errors.New("a 16-bit float output needs a shape declared in the graph")
	}
	shape := make([]int64, len(o.Shape))
	for d, size := range o.Shape {
		shape[d] = size
		if size >= 0 {
			continue
		}
		p := m.outParams[i][d]
		for j, in := range m.inParams {
			for k, q := range in {
				if p != "" && q == p && k < len(inputs[j].Shape) {
					shape[d] = inputs[j].Shape[k]
				}
			}
		}
		if shape[d] < 0 {
			return nil, fmt.Errorf("a 16-bit float output's dimension %d is dynamic and named after no input dimension", d)
		}
	}
	return shape, nil
}

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// inputValue makes the ONNX Runtime value of one input tensor.
func inputValue(in serveapi.Tensor) (ort.Value, error) {
	shape := ort.NewShape(in.Shape...)
	if in.Datatype == serveapi.TypeBytes {
		if len(in.Shape) == 0 {
			return nil, errors.New("a BYTES scalar is not supported; send shape [1]")
		}
		t, err := ort.NewStringTensor(shape)
		if err != nil {
			return nil, err
		}
		if err := t.SetContents(in.Strings); err != nil {
			_ = t.Destroy()
			return nil, err
		}
		return t, nil
	}
	et, ok := onnxType(in.Datatype)
	if !ok {
		return nil, fmt.Errorf("datatype %q is not an ONNX element type", in.Datatype)
	}
	if len(in.Shape) == 0 {
		return scalar(in)
	}
	if len(in.Data) == 0 {
		return nil, errors.New("an empty tensor (a dimension of 0) is not supported")
	}
	return ort.NewCustomDataTensor(shape, in.Data, et)
}

// scalar makes a rank-0 input, which the binding builds only from a Go
// value of the element's type.
func scalar(in serveapi.Tensor) (ort.Value, error) {
	if len(in.Data) != serveapi.ElementSize(in.Datatype) {
		return nil, fmt.Errorf("a scalar needs %d bytes, got %d", serveapi.ElementSize(in.Datatype), len(in.Data))
	}
	p := unsafe.Pointer(&in.Data[0])
	switch in.Datatype {
	case serveapi.TypeFP32:
		return ort.NewScalar(*(*float32)(p))
	case serveapi.TypeFP64:
		return ort.NewScalar(*(*float64)(p))
	case serveapi.TypeInt64:
		return ort.NewScalar(*(*int64)(p))
	case serveapi.TypeInt32:
		return ort.NewScalar(*(*int32)(p))
	case serveapi.TypeInt16:
		return ort.NewScalar(*(*int16)(p))
	case serveapi.TypeInt8:
		return ort.NewScalar(*(*int8)(p))
	case serveapi.TypeUint64:
		return ort.NewScalar(*(*uint64)(p))
	case serveapi.TypeUint32:
		return ort.NewScalar(*(*uint32)(p))
	case serveapi.TypeUint16:
		return ort.NewScalar(*(*uint16)(p))
	case serveapi.TypeUint8:
		return ort.NewScalar(*(*uint8)(p))
	case serveapi.TypeBool:
		return ort.NewScalar(in.Data[0] != 0)
	}
	return nil, fmt.Errorf("a %s scalar is not supported; send shape [1]", in.Datatype)
}

// outputTensor copies an output ONNX Runtime made into a Tensor.
func outputTensor(v ort.Value, spec serveapi.TensorSpec) (serveapi.Tensor, error) {
	t := serveapi.Tensor{Name: spec.Name, Datatype: spec.Datatype, Shape: []int64(v.GetShape().Clone())}
	if t.Shape == nil {
		t.Shape = []int64{}
	}
	var err error
	switch x := v.(type) {
	case *ort.StringTensor:
		t.Strings, err = x.GetContents()
	case *ort.CustomDataTensor:
		t.Data = append([]byte(nil), x.GetData()...)
	case *ort.Tensor[float32]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[float64]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[int64]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[int32]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[int16]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[int8]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[uint64]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[uint32]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[uint16]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[uint8]:
		t.Data = raw(x.GetData())
	case *ort.Tensor[bool]:
		t.Data = raw(x.GetData())
	default:
		return t, fmt.Errorf("ONNX Runtime returned %T, which is not a tensor", v)
	}
	return t, err
}

// raw copies a typed slice's bytes (the machine's byte order, little-endian
// on every platform the runtime is built for).
func raw[T any](data []T) []byte {
	if len(data) == 0 {
		return []byte{}
	}
	n := len(data) * int(unsafe.Sizeof(data[0]))
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), n)...)
}

// Close destroys the session; a second Close does nothing.
func (m *tensorModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil
	}
	err := m.sess.Destroy()
	m.sess = nil
	if err != nil {
		return fmt.Errorf("onnx: close: %w", err)
	}
	return nil
}
