//go:build cgo

package runtime_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"modelplane/runtime"
	"modelplane/runtime/onnx"
	"modelplane/serveapi"
)

// nodeTestData is where Debian's libonnx-testdata installs ONNX's own
// operator tests: one directory per case with model.onnx and
// test_data_set_*/{input,output}_*.pb (serialised TensorProtos).
const nodeTestData = "/usr/share/libonnx-testdata/data/node"

// v2NodeTests are ONNX node tests served over V2 by the runtime: FP32,
// FP16, FP64, every integer width signed and unsigned, BOOL, several
// inputs and several outputs (TopK, Split, Unique with its dynamic output
// shapes). Not here: BF16, whose ONNX test inputs are stored as UINT16 and
// whose Cast outputs hold NaN (which V2's JSON cannot carry), and STRING
// (BYTES), whose only node tests (StringNormalizer) need a system locale
// ONNX Runtime cannot find on a bare machine (TestTensorStrings serves a
// graph of strings instead).
var v2NodeTests = []string{
	"test_add", "test_matmul_2d", "test_gemm_default_matrix_bias", // FP32, 2 and 3 inputs
	"test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT16_to_FLOAT", // FP16 out and in
	"test_mod_mixed_sign_int16", "test_mod_uint16", // INT16, UINT16
	"test_cast_FLOAT_to_DOUBLE",                         // FP64
	"test_argmax_default_axis_example", "test_gather_0", // INT64 out, INT64 in
	"test_mod_int64_fmod", "test_min_int64", "test_max_int32", "test_max_int8",
	"test_max_uint8", "test_max_uint32", "test_max_uint64",
	"test_equal", "test_and2d", "test_not_2d", "test_where_example", // BOOL in and out
	"test_top_k", "test_split_equal_parts_1d", "test_unique_not_sorted_without_axis", // several outputs
}

func requireONNX(t *testing.T) {
	t.Helper()
	if _, err := onnx.RuntimeVersion(); err != nil {
		t.Fatalf("onnx runtime: %v (run scripts/install-deps.sh test)", err)
	}
	if _, err := os.Stat(nodeTestData); err != nil {
		t.Fatalf("onnx node test data: %v (run scripts/install-deps.sh test)", err)
	}
}

func tensorOpeners() map[string]runtime.TensorOpener {
	return map[string]runtime.TensorOpener{"onnx": func(path string) (serveapi.TensorModel, error) {
		return onnx.LoadTensors(path, onnx.Options{})
	}}
}

// serveTensors serves the ONNX file at model with its own tensors.
func serveTensors(t *testing.T, model string, b serveapi.Batching, opt runtime.Options) (*runtime.Server, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(model, filepath.Join(dir, "model.onnx")); err != nil {
		t.Fatal(err)
	}
	cfg := serveapi.Config{Model: "m", Version: "v1", Format: "onnx", File: "model.onnx", Batching: b}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	opt.Tensors = tensorOpeners()
	s, err := runtime.Open(dir, nil, opt)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatalf("warm: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s, hs.URL
}

type v2Tensor struct {
	Name     string          `json:"name"`
	Datatype string          `json:"datatype"`
	Shape    []int64         `json:"shape"`
	Data     json.RawMessage `json:"data"`
}

type v2Answer struct {
	ModelName string     `json:"model_name"`
	Outputs   []v2Tensor `json:"outputs"`
	Error     string     `json:"error"`
}

func postV2(t *testing.T, url string, inputs []v2Tensor) (int, v2Answer) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"inputs": inputs})
	resp, err := http.Post(url+"/v2/models/m/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a v2Answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("answer: %v", err)
	}
	return resp.StatusCode, a
}

// TestV2NodeTests serves ONNX's node tests through the runtime over V2,
// each input named and typed as the graph declares it, and compares every
// output with ONNX's expected values: the datatype as Triton names the
// element type, the shape, and the values (exactly for integers, booleans
// and strings).
func TestV2NodeTests(t *testing.T) {
	requireONNX(t)
	for _, name := range v2NodeTests {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(nodeTestData, name)
			_, url := serveTensors(t, filepath.Join(dir, "model.onnx"), serveapi.Batching{}, runtime.Options{})
			meta := metadata(t, url)
			sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
			if len(sets) == 0 {
				t.Fatalf("no test data in %s", dir)
			}
			for _, set := range sets {
				var inputs []v2Tensor
				for i, in := range meta.Inputs {
					tp := readProto(t, filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
					if tp.datatype() != in.Datatype {
						t.Fatalf("input %q: metadata says %s, the test data holds %s", in.Name, in.Datatype, tp.datatype())
					}
					inputs = append(inputs, v2Tensor{Name: in.Name, Datatype: in.Datatype, Shape: tp.dims, Data: tp.json(t)})
				}
				status, a := postV2(t, url, inputs)
				if status != http.StatusOK {
					t.Fatalf("%s: status %d: %s", set, status, a.Error)
				}
				if len(a.Outputs) != len(meta.Outputs) {
					t.Fatalf("%d outputs, want %d", len(a.Outputs), len(meta.Outputs))
				}
				for i, out := range a.Outputs {
					want := readProto(t, filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
					if out.Name != meta.Outputs[i].Name || out.Datatype != want.datatype() {
						t.Errorf("output %d is %s %s, want %s %s", i, out.Name, out.Datatype, meta.Outputs[i].Name, want.datatype())
					}
					if fmt.Sprint(out.Shape) != fmt.Sprint(want.dims) {
						t.Errorf("output %s shape %v, want %v", out.Name, out.Shape, want.dims)
					}
					compare(t, out, want)
				}
			}
		})
	}
}

type modelMeta struct {
	Inputs, Outputs []struct {
		Name     string  `json:"name"`
		Datatype string  `json:"datatype"`
		Shape    []int64 `json:"shape"`
	}
}

func metadata(t *testing.T, url string) modelMeta {
	t.Helper()
	resp, err := http.Get(url + "/v2/models/m")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m modelMeta
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metadata: %d %v", resp.StatusCode, err)
	}
	return m
}

// compare checks an answer's values against ONNX's expected ones.
func compare(t *testing.T, out v2Tensor, want proto) {
	t.Helper()
	wantVals := want.values(t)
	if want.dataType == 8 {
		var got []string
		if err := json.Unmarshal(out.Data, &got); err != nil {
			t.Fatalf("output %s: %v", out.Name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantVals) {
			t.Errorf("output %s = %q, want %q", out.Name, got, wantVals)
		}
		return
	}
	var got []any
	dec := json.NewDecoder(bytes.NewReader(out.Data))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("output %s: %v", out.Name, err)
	}
	if len(got) != len(wantVals) {
		t.Fatalf("output %s has %d values, want %d", out.Name, len(got), len(wantVals))
	}
	for i := range got {
		switch w := wantVals[i].(type) {
		case bool:
			if got[i] != w {
				t.Errorf("output %s[%d] = %v, want %v", out.Name, i, got[i], w)
			}
		case int64, uint64:
			if fmt.Sprint(got[i]) != fmt.Sprint(w) {
				t.Errorf("output %s[%d] = %v, want %v", out.Name, i, got[i], w)
			}
		case float64:
			g, err := got[i].(json.Number).Float64()
			tol := 1e-6 + 1e-5*math.Abs(w)
			if want.dataType == 10 || want.dataType == 16 { // 16-bit floats
				tol = 1e-3 + 1e-2*math.Abs(w)
			}
			if err != nil || math.Abs(g-w) > tol {
				t.Errorf("output %s[%d] = %v, want %v", out.Name, i, got[i], w)
			}
		}
	}
}

// proto is a decoded onnx.TensorProto.
type proto struct {
	dims     []int64
	dataType int
	raw      []byte
	int32s   []int32
	int64s   []int64
	uint64s  []uint64
	floats   []float32
	doubles  []float64
	strings  []string
}

var v2Types = map[int]string{1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
	8: "BYTES", 9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16"}

func (p proto) datatype() string { return v2Types[p.dataType] }

func readProto(t *testing.T, path string) proto {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p proto
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			t.Fatalf("%s: truncated", path)
		}
		data = data[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(data)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(data)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(data)
			x = uint64(u)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			t.Fatalf("%s: truncated", path)
		}
		data = data[n:]
		p.field(num, typ, v, x)
	}
	return p
}

// field reads one TensorProto field, packed or not.
func (p *proto) field(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
	each := func(fn func(uint64)) {
		if typ != protowire.BytesType {
			fn(x)
			return
		}
		for len(v) > 0 {
			var u uint64
			var n int
			switch num {
			case 4:
				var w uint32
				w, n = protowire.ConsumeFixed32(v)
				u = uint64(w)
			case 10:
				u, n = protowire.ConsumeFixed64(v)
			default:
				u, n = protowire.ConsumeVarint(v)
			}
			if n < 0 {
				return
			}
			v = v[n:]
			fn(u)
		}
	}
	switch num {
	case 1:
		each(func(u uint64) { p.dims = append(p.dims, int64(u)) })
	case 2:
		p.dataType = int(x)
	case 4:
		each(func(u uint64) { p.floats = append(p.floats, math.Float32frombits(uint32(u))) })
	case 5:
		each(func(u uint64) { p.int32s = append(p.int32s, int32(u)) })
	case 6:
		p.strings = append(p.strings, string(v))
	case 7:
		each(func(u uint64) { p.int64s = append(p.int64s, int64(u)) })
	case 9:
		p.raw = append([]byte(nil), v...)
	case 10:
		each(func(u uint64) { p.doubles = append(p.doubles, math.Float64frombits(u)) })
	case 11:
		each(func(u uint64) { p.uint64s = append(p.uint64s, u) })
	}
}

// values are the tensor's elements: float64 for floating types, int64 or
// uint64 for integers, bool and string.
func (p proto) values(t *testing.T) []any {
	t.Helper()
	count := 1
	for _, d := range p.dims {
		count *= int(d)
	}
	var out []any
	le := binary.LittleEndian
	size := map[int]int{1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}[p.dataType]
	for i := range count {
		switch {
		case p.dataType == 8:
			out = append(out, p.strings[i])
		case p.raw != nil:
			b := p.raw[i*size:]
			switch p.dataType {
			case 1:
				out = append(out, float64(math.Float32frombits(le.Uint32(b))))
			case 11:
				out = append(out, math.Float64frombits(le.Uint64(b)))
			case 10:
				out = append(out, half(le.Uint16(b)))
			case 16:
				out = append(out, float64(math.Float32frombits(uint32(le.Uint16(b))<<16)))
			case 9:
				out = append(out, b[0] != 0)
			case 2:
				out = append(out, uint64(b[0]))
			case 4:
				out = append(out, uint64(le.Uint16(b)))
			case 12:
				out = append(out, uint64(le.Uint32(b)))
			case 13:
				out = append(out, le.Uint64(b))
			case 3:
				out = append(out, int64(int8(b[0])))
			case 5:
				out = append(out, int64(int16(le.Uint16(b))))
			case 6:
				out = append(out, int64(int32(le.Uint32(b))))
			case 7:
				out = append(out, int64(le.Uint64(b)))
			}
		case p.dataType == 1:
			out = append(out, float64(p.floats[i]))
		case p.dataType == 11:
			out = append(out, p.doubles[i])
		case p.dataType == 7:
			out = append(out, p.int64s[i])
		case p.dataType == 12 || p.dataType == 13:
			out = append(out, p.uint64s[i])
		case p.dataType == 9:
			out = append(out, p.int32s[i] != 0)
		case p.dataType == 10:
			out = append(out, half(uint16(p.int32s[i])))
		case p.dataType == 16:
			out = append(out, float64(math.Float32frombits(uint32(uint16(p.int32s[i]))<<16)))
		case p.dataType == 2 || p.dataType == 4:
			out = append(out, uint64(uint32(p.int32s[i])))
		default:
			out = append(out, int64(p.int32s[i]))
		}
	}
	return out
}

// json is the tensor's data as a V2 request carries it.
func (p proto) json(t *testing.T) json.RawMessage {
	t.Helper()
	vals := p.values(t)
	if p.dataType == 10 || p.dataType == 16 {
		// A 16-bit float sent as its exact decimal value round-trips.
		for i, v := range vals {
			vals[i] = v.(float64)
		}
	}
	b, err := json.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// half widens IEEE half precision bits.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * mant / 1024 * math.Pow(2, -14)
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + mant/1024) * math.Pow(2, float64(exp-15))
}
