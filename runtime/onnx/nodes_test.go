//go:build cgo

package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
)

// mlpOperators are the operators an MLP or tabular model is built from,
// each with the names of ONNX's node test directories that exercise it.
// Every pattern must match at least one directory, so a missing operator
// fails rather than shrinking the test.
var mlpOperators = []struct {
	op      string
	pattern string
}{
	{"Gemm", `^test_gemm_`},
	{"MatMul", `^test_matmul_[234]d$`},
	{"Add", `^test_add(_bcast)?$`},
	{"Sub", `^test_sub(_bcast|_example)?$`},
	{"Mul", `^test_mul(_bcast|_example)?$`},
	{"Div", `^test_div(_bcast|_example)?$`},
	{"Sum", `^test_sum_`},
	{"Max", `^test_max_(example|float32|one_input|two_inputs)$`},
	{"Min", `^test_min_(example|float32|one_input|two_inputs)$`},
	{"Pow", `^test_pow(_bcast_array|_bcast_scalar|_example)?$`},
	{"Relu", `^test_relu$`},
	{"LeakyRelu", `^test_leakyrelu`},
	{"Elu", `^test_elu`},
	{"Selu", `^test_selu`},
	{"Softplus", `^test_softplus`},
	{"Sigmoid", `^test_sigmoid`},
	{"HardSigmoid", `^test_hardsigmoid`},
	{"Tanh", `^test_tanh`},
	{"Softmax", `^test_softmax_`},
	{"LogSoftmax", `^test_logsoftmax_`},
	{"Exp", `^test_exp(_example)?$`},
	{"Log", `^test_log(_example)?$`},
	{"Sqrt", `^test_sqrt`},
	{"Abs", `^test_abs$`},
	{"Neg", `^test_neg`},
	{"Clip", `^test_clip(_default_(inbounds|max|min)|_example|_inbounds|_outbounds|_splitbounds)?$`},
	{"BatchNormalization", `^test_batchnorm_(epsilon|example)$`},
	{"Flatten", `^test_flatten_`},
	{"Reshape", `^test_reshape_`},
	{"Squeeze", `^test_squeeze`},
	{"Unsqueeze", `^test_unsqueeze_`},
	{"Concat", `^test_concat_`},
	{"Transpose", `^test_transpose_`},
	{"Identity", `^test_identity$`},
	{"Cast", `^test_cast_(FLOAT_to_DOUBLE|DOUBLE_to_FLOAT)$`},
	{"ArgMax", `^test_argmax_`},
}

// TestNodeOperators runs ONNX's node tests of the MLP operators through
// ONNX Runtime directly (a node test may have several inputs, which Load
// does not accept) and compares every output with ONNX's reference values.
func TestNodeOperators(t *testing.T) {
	requireRuntime(t)
	entries, err := os.ReadDir(nodeTestData)
	if err != nil {
		t.Fatalf("onnx node test data: %v (%s)", err, installHint)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	so, err := ort.NewSessionOptions()
	if err != nil {
		t.Fatal(err)
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(1); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, o := range mlpOperators {
		re := regexp.MustCompile(o.pattern)
		var dirs []string
		for _, n := range names {
			if re.MatchString(n) {
				dirs = append(dirs, n)
			}
		}
		if len(dirs) == 0 {
			t.Errorf("%s: no node test directory matches %s", o.op, o.pattern)
		}
		total += len(dirs)
		t.Run(o.op, func(t *testing.T) {
			for _, d := range dirs {
				t.Run(d, func(t *testing.T) {
					runNodeTest(t, filepath.Join(nodeTestData, d), so)
				})
			}
		})
	}
	t.Logf("%d node tests of %d operators", total, len(mlpOperators))
}

func runNodeTest(t *testing.T, dir string, so *ort.SessionOptions) {
	t.Helper()
	modelPath := filepath.Join(dir, "model.onnx")
	ins, outs, err := ort.GetInputOutputInfoWithOptions(modelPath, so)
	if err != nil {
		t.Fatalf("onnx runtime refused %s: %v", modelPath, err)
	}
	inNames := make([]string, len(ins))
	for i, in := range ins {
		inNames[i] = in.Name
	}
	outNames := make([]string, len(outs))
	for i, out := range outs {
		outNames[i] = out.Name
	}
	sess, err := ort.NewDynamicAdvancedSession(modelPath, inNames, outNames, so)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Destroy()
	sets, err := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if err != nil || len(sets) == 0 {
		t.Fatalf("no test_data_set_* in %s (%v)", dir, err)
	}
	for _, set := range sets {
		inputs := make([]ort.Value, len(ins))
		for i := range ins {
			tp := readTensorFile(t, filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
			v, err := tp.value()
			if err != nil {
				t.Fatalf("%s input %d: %v", set, i, err)
			}
			defer v.Destroy()
			inputs[i] = v
		}
		outputs := make([]ort.Value, len(outs))
		if err := sess.Run(inputs, outputs); err != nil {
			t.Fatalf("%s: run: %v", set, err)
		}
		for i, out := range outputs {
			defer out.Destroy()
			want := readTensorFile(t, filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
			got, shape, err := valueFloats(out)
			if err != nil {
				t.Fatalf("%s output %d: %v", set, i, err)
			}
			if !shape.Equals(ort.Shape(want.dims)) {
				t.Fatalf("%s output %d shape %v, want %v", set, i, shape, want.dims)
			}
			bad := 0
			for j := range want.values {
				if !closeNode(got[j], want.values[j]) {
					if bad < 5 {
						t.Errorf("%s output %d[%d] = %v, want %v", set, i, j, got[j], want.values[j])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s output %d: %d of %d values differ", set, i, bad, len(want.values))
			}
		}
	}
}

// closeNode is 1e-5 relative agreement with an absolute floor for values
// near zero, tighter than ONNX's own backend runner (rtol 1e-3, atol 1e-7).
func closeNode(got, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	if math.IsInf(want, 0) {
		return got == want
	}
	return math.Abs(got-want) <= 1e-6+1e-5*math.Abs(want)
}

// TensorProto.data_type values this test reads.
const (
	tpFloat  = 1
	tpInt32  = 6
	tpInt64  = 7
	tpDouble = 11
)

// tensorProto is a decoded onnx.TensorProto: dims, element type and the
// values as float64 (exact for every type read here in these tests' ranges)
// with the typed originals kept for building inputs.
type tensorProto struct {
	dims     []int64
	dataType int
	raw      []byte
	floats   []float32
	doubles  []float64
	ints     []int64 // int32_data and int64_data
	values   []float64
}

func readTensorFile(t *testing.T, path string) tensorProto {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := parseTensorProto(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tp
}

// Field numbers of onnx.TensorProto.
const (
	tensorDims       = 1
	tensorDataType   = 2
	tensorFloatData  = 4
	tensorInt32Data  = 5
	tensorInt64Data  = 7
	tensorRawData    = 9
	tensorDoubleData = 10
)

func parseTensorProto(data []byte) (tensorProto, error) {
	var tp tensorProto
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return tp, errTruncated
		}
		data = data[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return tp, errTruncated
			}
			data = data[n:]
			switch num {
			case tensorDims:
				tp.dims = append(tp.dims, int64(v))
			case tensorDataType:
				tp.dataType = int(v)
			case tensorInt32Data:
				tp.ints = append(tp.ints, int64(int32(v)))
			case tensorInt64Data:
				tp.ints = append(tp.ints, int64(v))
			}
		case typ == protowire.Fixed32Type && num == tensorFloatData:
			v, n := protowire.ConsumeFixed32(data)
			if n < 0 {
				return tp, errTruncated
			}
			data = data[n:]
			tp.floats = append(tp.floats, math.Float32frombits(v))
		case typ == protowire.Fixed64Type && num == tensorDoubleData:
			v, n := protowire.ConsumeFixed64(data)
			if n < 0 {
				return tp, errTruncated
			}
			data = data[n:]
			tp.doubles = append(tp.doubles, math.Float64frombits(v))
		case typ == protowire.BytesType:
			b, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return tp, errTruncated
			}
			data = data[n:]
			if err := tp.packed(num, b); err != nil {
				return tp, err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return tp, errTruncated
			}
			data = data[n:]
		}
	}
	return tp, tp.decode()
}

// packed reads a length-delimited field: raw_data or a packed repeated one.
func (tp *tensorProto) packed(num protowire.Number, b []byte) error {
	for len(b) > 0 {
		var n int
		switch num {
		case tensorRawData:
			tp.raw = append([]byte(nil), b...)
			return nil
		case tensorDims, tensorInt32Data, tensorInt64Data:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			switch num {
			case tensorDims:
				tp.dims = append(tp.dims, int64(v))
			case tensorInt32Data:
				tp.ints = append(tp.ints, int64(int32(v)))
			default:
				tp.ints = append(tp.ints, int64(v))
			}
		case tensorFloatData:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			tp.floats = append(tp.floats, math.Float32frombits(v))
		case tensorDoubleData:
			var v uint64
			v, n = protowire.ConsumeFixed64(b)
			tp.doubles = append(tp.doubles, math.Float64frombits(v))
		default:
			return nil
		}
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
	}
	return nil
}

// decode moves raw_data into the typed slice and fills values.
func (tp *tensorProto) decode() error {
	count := 1
	for _, d := range tp.dims {
		count *= int(d)
	}
	if tp.raw != nil {
		size := map[int]int{tpFloat: 4, tpInt32: 4, tpInt64: 8, tpDouble: 8}[tp.dataType]
		if size == 0 {
			return fmt.Errorf("data type %d not read by this test", tp.dataType)
		}
		if len(tp.raw) != count*size {
			return fmt.Errorf("raw_data has %d bytes for %d elements of %d", len(tp.raw), count, size)
		}
		for i := 0; i < count; i++ {
			b := tp.raw[i*size:]
			switch tp.dataType {
			case tpFloat:
				tp.floats = append(tp.floats, math.Float32frombits(binary.LittleEndian.Uint32(b)))
			case tpInt32:
				tp.ints = append(tp.ints, int64(int32(binary.LittleEndian.Uint32(b))))
			case tpInt64:
				tp.ints = append(tp.ints, int64(binary.LittleEndian.Uint64(b)))
			case tpDouble:
				tp.doubles = append(tp.doubles, math.Float64frombits(binary.LittleEndian.Uint64(b)))
			}
		}
	}
	switch tp.dataType {
	case tpFloat:
		for _, v := range tp.floats {
			tp.values = append(tp.values, float64(v))
		}
	case tpDouble:
		tp.values = append(tp.values, tp.doubles...)
	case tpInt32, tpInt64:
		for _, v := range tp.ints {
			tp.values = append(tp.values, float64(v))
		}
	default:
		return fmt.Errorf("data type %d not read by this test", tp.dataType)
	}
	if len(tp.values) != count {
		return fmt.Errorf("%d values for shape %v", len(tp.values), tp.dims)
	}
	return nil
}

// value builds the ONNX Runtime input for the tensor; a scalar (no dims)
// needs the binding's Scalar type.
func (tp tensorProto) value() (ort.Value, error) {
	shape := ort.NewShape(tp.dims...)
	switch tp.dataType {
	case tpFloat:
		if len(tp.dims) == 0 {
			return ort.NewScalar(tp.floats[0])
		}
		return ort.NewTensor(shape, tp.floats)
	case tpDouble:
		if len(tp.dims) == 0 {
			return ort.NewScalar(tp.doubles[0])
		}
		return ort.NewTensor(shape, tp.doubles)
	case tpInt64:
		if len(tp.dims) == 0 {
			return ort.NewScalar(tp.ints[0])
		}
		return ort.NewTensor(shape, tp.ints)
	case tpInt32:
		ints := make([]int32, len(tp.ints))
		for i, v := range tp.ints {
			ints[i] = int32(v)
		}
		if len(tp.dims) == 0 {
			return ort.NewScalar(ints[0])
		}
		return ort.NewTensor(shape, ints)
	}
	return nil, fmt.Errorf("data type %d not read by this test", tp.dataType)
}

// valueFloats reads an output ONNX Runtime allocated.
func valueFloats(v ort.Value) ([]float64, ort.Shape, error) {
	var out []float64
	switch t := v.(type) {
	case *ort.Tensor[float32]:
		for _, x := range t.GetData() {
			out = append(out, float64(x))
		}
	case *ort.Tensor[float64]:
		out = append(out, t.GetData()...)
	case *ort.Tensor[int64]:
		for _, x := range t.GetData() {
			out = append(out, float64(x))
		}
	case *ort.Tensor[int32]:
		for _, x := range t.GetData() {
			out = append(out, float64(x))
		}
	default:
		return nil, nil, errors.New("output type not read by this test")
	}
	return out, v.GetShape(), nil
}
