package runtime

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"modelplane/runtime/batch"
	"modelplane/serveapi"
)

// TensorOpener loads a model served with its own tensors (an ONNX graph's
// inputs and outputs, a tokenizer), by the registry's format.
type TensorOpener func(path string) (serveapi.TensorModel, error)

// tensors serves a serveapi.TensorModel: a version whose serving
// configuration names no features. V2 requests carry the model's own
// inputs by name; rows along a dynamic first axis are batched with other
// requests' rows whose other dimensions agree, or of any length along a
// padded input's sequence axis.
type tensors struct {
	model   serveapi.TensorModel
	in, out []serveapi.TensorSpec
	// rowwise: every input and output has a dynamic first axis, so a row
	// of it is one sample (a /predict instance); batched: also the model
	// does not refuse merging (serveapi.BatchAxis), so the queue merges
	// requests along it.
	rowwise, batched bool
	// pad holds, by input position, the value rows of a padded input are
	// padded with to the longest of their batch (serveapi.Padding); nil
	// for inputs that are not, and nil altogether without a declaration.
	pad   []*json.Number
	queue *batch.Queue[tensorRow]
}

// tensorRow is the batcher's row of a tensor model: one sample's slice of
// every input (or output), without the first axis, when the model is
// batched; the whole tensors of one request otherwise.
type tensorRow []serveapi.Tensor

func newTensors(m serveapi.TensorModel) (*tensors, error) {
	t := &tensors{model: m, in: m.Inputs(), out: m.Outputs()}
	if len(t.in) == 0 {
		return nil, errors.New("the model has no inputs")
	}
	seen := map[string]bool{}
	t.batched = true
	for _, s := range slices.Concat(t.in, t.out) {
		if seen[s.Name] && slices.ContainsFunc(t.in, func(x serveapi.TensorSpec) bool { return x.Name == s.Name }) {
			return nil, fmt.Errorf("%q is named twice", s.Name)
		}
		seen[s.Name] = true
		if len(s.Shape) == 0 || s.Shape[0] >= 0 {
			t.batched = false
		}
	}
	t.rowwise = t.batched
	if b, ok := m.(serveapi.BatchAxis); ok && !b.BatchesFirstAxis() {
		t.batched = false
	}
	if p, ok := m.(serveapi.Padding); ok && len(p.PadValues()) > 0 {
		if err := t.padding(p.PadValues()); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// padding checks a model's padding declaration: it pads only a batched
// model whose outputs' rows have a fixed shape, which padding the inputs
// cannot change, and only inputs of one inner axis.
func (t *tensors) padding(values map[string]float64) error {
	if !t.batched {
		return errors.New("the model declares padding but is not batched along a dynamic first axis")
	}
	for _, o := range t.out {
		for _, d := range o.Shape[1:] {
			if d < 0 {
				return fmt.Errorf("the model declares padding, but output %q has shape %s: padding would change its rows", o.Name, shapeText(o.Shape))
			}
		}
	}
	t.pad = make([]*json.Number, len(t.in))
	for j, s := range t.in {
		v, ok := values[s.Name]
		if !ok {
			continue
		}
		if len(s.Shape) != 2 || s.Datatype == serveapi.TypeBytes {
			return fmt.Errorf("padding: input %q is %s %s; only a numeric [batch, sequence] input may be padded", s.Name, s.Datatype, shapeText(s.Shape))
		}
		n := json.Number(strconv.FormatFloat(v, 'g', -1, 64))
		if _, err := appendElement(nil, s.Datatype, n); err != nil {
			return fmt.Errorf("padding: input %q: pad value %v: %w", s.Name, v, err)
		}
		t.pad[j] = &n
	}
	return nil
}

// key is the batching key of a row: the inner shapes of its inputs, but
// for padded ones, whose length does not keep rows apart.
func (t *tensors) key(r tensorRow) string {
	if t.pad == nil {
		return shapeKey(r)
	}
	masked := make(tensorRow, len(r))
	for j, x := range r {
		if t.pad[j] != nil {
			x.Shape = nil
		}
		masked[j] = x
	}
	return shapeKey(masked)
}

// Predict runs a batch of rows: concatenated along a new first axis when
// batched, or the one request's tensors as they are.
func (t *tensors) Predict(rows []tensorRow) ([]tensorRow, error) {
	if !t.batched {
		if len(rows) != 1 {
			return nil, fmt.Errorf("an unbatched model got %d requests at once", len(rows))
		}
		out, err := t.model.Run(rows[0])
		if err != nil {
			return nil, err
		}
		return []tensorRow{out}, nil
	}
	ins := make([]serveapi.Tensor, len(t.in))
	for j, s := range t.in {
		inner := rows[0][j].Shape
		var padding []byte
		if t.pad != nil && t.pad[j] != nil {
			// Rows shorter than the batch's longest get the pad value at
			// their end.
			longest := int64(0)
			for _, r := range rows {
				longest = max(longest, r[j].Shape[0])
			}
			inner = []int64{longest}
			padding, _ = appendElement(nil, s.Datatype, *t.pad[j])
		}
		x := serveapi.Tensor{Name: s.Name, Datatype: s.Datatype, Shape: append([]int64{int64(len(rows))}, inner...)}
		for _, r := range rows {
			x.Data = append(x.Data, r[j].Data...)
			x.Strings = append(x.Strings, r[j].Strings...)
			if padding != nil {
				for range inner[0] - r[j].Shape[0] {
					x.Data = append(x.Data, padding...)
				}
			}
		}
		ins[j] = x
	}
	outs, err := t.model.Run(ins)
	if err != nil {
		return nil, err
	}
	res := make([]tensorRow, len(rows))
	for i := range res {
		res[i] = make(tensorRow, len(outs))
	}
	for j, o := range outs {
		if len(o.Shape) == 0 || o.Shape[0] != int64(len(rows)) {
			return nil, fmt.Errorf("output %q has shape %v for a batch of %d", o.Name, o.Shape, len(rows))
		}
		parts, err := split(o)
		if err != nil {
			return nil, err
		}
		for i := range res {
			res[i][j] = parts[i]
		}
	}
	return res, nil
}

// split cuts a tensor into its rows along the first axis.
func split(x serveapi.Tensor) ([]serveapi.Tensor, error) {
	n := int(x.Shape[0])
	inner := x.Shape[1:]
	per := int(elements(inner))
	out := make([]serveapi.Tensor, n)
	size := serveapi.ElementSize(x.Datatype)
	if x.Datatype == serveapi.TypeBytes {
		if len(x.Strings) != n*per {
			return nil, fmt.Errorf("%q holds %d strings for shape %v", x.Name, len(x.Strings), x.Shape)
		}
	} else if len(x.Data) != n*per*size {
		return nil, fmt.Errorf("%q holds %d bytes for shape %v", x.Name, len(x.Data), x.Shape)
	}
	for i := range out {
		r := serveapi.Tensor{Name: x.Name, Datatype: x.Datatype, Shape: inner}
		if x.Datatype == serveapi.TypeBytes {
			r.Strings = x.Strings[i*per : (i+1)*per : (i+1)*per]
		} else {
			r.Data = x.Data[i*per*size : (i+1)*per*size : (i+1)*per*size]
		}
		out[i] = r
	}
	return out, nil
}

// elements is a shape's element count, saturating rather than
// overflowing on a caller's absurd shape.
func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d > 0 && n > math.MaxInt64/d {
			return math.MaxInt64
		}
		n *= d
	}
	return n
}

// shapeKey names rows' inner shapes: rows of one key batch together.
func shapeKey(r tensorRow) string {
	var b strings.Builder
	for _, x := range r {
		for _, d := range x.Shape {
			b.WriteString(strconv.FormatInt(d, 10))
			b.WriteByte('x')
		}
		b.WriteByte(';')
	}
	return b.String()
}

// loadTensors is Load for a tensor model.
func (s *Server) loadTensors(cfg serveapi.Config, path string, open TensorOpener, start func() float64) error {
	m, err := open(path)
	if err != nil {
		return fmt.Errorf("load %s: %w", pathBase(path), err)
	}
	t, err := newTensors(m)
	if err != nil {
		_ = m.Close()
		return err
	}
	bc := batch.Config{
		MaxBatchSize:        cfg.Batching.MaxBatchSize,
		MaxQueueDelay:       durationUS(cfg.Batching.MaxQueueDelayUS),
		PreferredBatchSizes: cfg.Batching.PreferredBatchSizes,
		QueueTimeout:        durationMS(cfg.Batching.QueueTimeoutMS),
		Clock:               s.clock,
	}
	if !t.batched {
		bc.MaxBatchSize, bc.PreferredBatchSizes = 1, nil
	}
	l := &loaded{cfg: cfg, tensors: t}
	l.metrics = newMetrics(cfg.Model, cfg.Version, func() float64 { return float64(l.queueStats().QueuedRequests) })
	l.metrics.loadSec.Set(start())
	bc.OnBatch = func(e batch.Executed) { s.executed(l, e) }
	if t.queue, err = batch.NewQueue[tensorRow](t, bc); err != nil {
		_ = m.Close()
		return fmt.Errorf("batching: %w", err)
	}
	t.queue.Start()
	s.m.Store(l)
	return nil
}

// request is one V2 request's inputs, checked against the signature, in
// the model's input order.
func (t *tensors) request(inputs []v2Tensor, maxRows int) ([]serveapi.Tensor, error) {
	if len(inputs) == 0 {
		return nil, errors.New("inputs: at least one input is required")
	}
	byName := map[string]*v2Tensor{}
	for i := range inputs {
		in := &inputs[i]
		if !slices.ContainsFunc(t.in, func(s serveapi.TensorSpec) bool { return s.Name == in.Name }) {
			return nil, fmt.Errorf("inputs[%q]: not an input of the model; it takes %s", in.Name, specNames(t.in))
		}
		if byName[in.Name] != nil {
			return nil, fmt.Errorf("inputs[%q]: sent twice", in.Name)
		}
		byName[in.Name] = in
	}
	out := make([]serveapi.Tensor, len(t.in))
	for j, s := range t.in {
		in := byName[s.Name]
		field := fmt.Sprintf("inputs[%q]", s.Name)
		if in == nil {
			return nil, fmt.Errorf("%s: is missing", field)
		}
		if in.Datatype != s.Datatype {
			return nil, fmt.Errorf("%s: datatype %q; the model takes %s", field, in.Datatype, s.Datatype)
		}
		if err := fitShape(in.Shape, s.Shape); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if t.rowwise && in.Shape[0] > int64(maxRows) {
			return nil, fmt.Errorf("%s: at most %d rows per request", field, maxRows)
		}
		x, err := decodeTensor(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		out[j] = x
	}
	if t.rowwise {
		for j := range out {
			if out[j].Shape[0] != out[0].Shape[0] {
				return nil, fmt.Errorf("inputs[%q]: %d rows where %q has %d", out[j].Name, out[j].Shape[0], out[0].Name, out[0].Shape[0])
			}
		}
	}
	return out, nil
}

func specNames(specs []serveapi.TensorSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = strconv.Quote(s.Name)
	}
	return strings.Join(names, ", ")
}

// fitShape checks a sent shape against a declared one (nil: any shape).
func fitShape(got, want []int64) error {
	for _, d := range got {
		if d < 1 {
			return fmt.Errorf("shape %v: every dimension must be at least 1", got)
		}
	}
	if want == nil {
		return nil
	}
	if len(got) != len(want) {
		return fmt.Errorf("shape %v; the model takes %s", got, shapeText(want))
	}
	for i := range want {
		if want[i] >= 0 && got[i] != want[i] {
			return fmt.Errorf("shape %v; the model takes %s", got, shapeText(want))
		}
	}
	return nil
}

// shapeText shows a declared shape with dynamic dimensions as -1.
func shapeText(shape []int64) string {
	b, _ := json.Marshal(shape)
	return string(b)
}

// decodeTensor reads a V2 tensor's JSON data into the model's bytes.
func decodeTensor(in *v2Tensor) (serveapi.Tensor, error) {
	x := serveapi.Tensor{Name: in.Name, Datatype: in.Datatype, Shape: slices.Clone(in.Shape)}
	n := elements(in.Shape)
	if n > 1<<26 {
		return x, fmt.Errorf("shape %v is too large", in.Shape)
	}
	vals, err := flatten(in.Data, in.Datatype == serveapi.TypeBytes)
	if err != nil {
		return x, err
	}
	if int64(len(vals)) != n {
		return x, fmt.Errorf("data has %d values; shape %v needs %d", len(vals), in.Shape, n)
	}
	if in.Datatype == serveapi.TypeBytes {
		x.Strings = make([]string, len(vals))
		for i, v := range vals {
			x.Strings[i] = v.(string)
		}
		return x, nil
	}
	size := serveapi.ElementSize(in.Datatype)
	x.Data = make([]byte, 0, int(n)*size)
	for i, v := range vals {
		x.Data, err = appendElement(x.Data, in.Datatype, v)
		if err != nil {
			return x, fmt.Errorf("data[%d]: %w", i, err)
		}
	}
	return x, nil
}

// appendElement appends one JSON value (json.Number or bool) as an
// element of datatype, refusing what the type cannot hold.
func appendElement(b []byte, datatype string, v any) ([]byte, error) {
	if flag, ok := v.(bool); ok {
		if datatype != serveapi.TypeBool {
			return nil, fmt.Errorf("a boolean where %s numbers are due", datatype)
		}
		if flag {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	}
	num := string(v.(json.Number))
	le := binary.LittleEndian
	switch datatype {
	case serveapi.TypeBool:
		switch num {
		case "0":
			return append(b, 0), nil
		case "1":
			return append(b, 1), nil
		}
		return nil, errors.New("must be true or false")
	case serveapi.TypeFP32, serveapi.TypeFP16, serveapi.TypeBF16, serveapi.TypeFP64:
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return nil, errors.New("must be a number")
		}
		switch datatype {
		case serveapi.TypeFP64:
			return le.AppendUint64(b, math.Float64bits(f)), nil
		case serveapi.TypeFP16:
			return le.AppendUint16(b, float16Bits(float32(f))), nil
		case serveapi.TypeBF16:
			return le.AppendUint16(b, bfloat16Bits(float32(f))), nil
		}
		if math.Abs(f) > math.MaxFloat32 {
			return nil, errors.New("is out of the range of FP32")
		}
		return le.AppendUint32(b, math.Float32bits(float32(f))), nil
	}
	bits := map[string]int{serveapi.TypeInt8: 8, serveapi.TypeInt16: 16, serveapi.TypeInt32: 32, serveapi.TypeInt64: 64,
		serveapi.TypeUint8: 8, serveapi.TypeUint16: 16, serveapi.TypeUint32: 32, serveapi.TypeUint64: 64}[datatype]
	if bits == 0 {
		return nil, fmt.Errorf("datatype %q is not supported", datatype)
	}
	var u uint64
	if strings.HasPrefix(datatype, "UINT") {
		x, err := strconv.ParseUint(num, 10, bits)
		if err != nil {
			return nil, fmt.Errorf("must be an integer that fits %s", datatype)
		}
		u = x
	} else {
		x, err := strconv.ParseInt(num, 10, bits)
		if err != nil {
			return nil, fmt.Errorf("must be an integer that fits %s", datatype)
		}
		u = uint64(x)
	}
	switch bits {
	case 8:
		return append(b, byte(u)), nil
	case 16:
		return le.AppendUint16(b, uint16(u)), nil
	case 32:
		return le.AppendUint32(b, uint32(u)), nil
	}
	return le.AppendUint64(b, u), nil
}

// values turns a tensor's bytes into JSON values for an answer: numbers
// (16-bit floats widened), booleans for BOOL, strings for BYTES. A NaN or
// an infinity, which JSON cannot carry, is an error.
func values(x serveapi.Tensor) (any, error) {
	if x.Datatype == serveapi.TypeBytes {
		if x.Strings == nil {
			return []string{}, nil
		}
		return x.Strings, nil
	}
	size := serveapi.ElementSize(x.Datatype)
	if size == 0 || len(x.Data)%size != 0 {
		return nil, fmt.Errorf("output %q: %d bytes of %s", x.Name, len(x.Data), x.Datatype)
	}
	n := len(x.Data) / size
	le := binary.LittleEndian
	d := x.Data
	finite := func(fs []float64) (any, error) {
		for _, f := range fs {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("output %q holds NaN or infinity, which JSON cannot carry", x.Name)
			}
		}
		return fs, nil
	}
	switch x.Datatype {
	case serveapi.TypeBool:
		out := make([]bool, n)
		for i := range out {
			out[i] = d[i] != 0
		}
		return out, nil
	case serveapi.TypeFP32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(d[4*i:]))
			if f := float64(out[i]); math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("output %q holds NaN or infinity, which JSON cannot carry", x.Name)
			}
		}
		return out, nil
	case serveapi.TypeFP64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(d[8*i:]))
		}
		return finite(out)
	case serveapi.TypeFP16, serveapi.TypeBF16:
		out := make([]float64, n)
		for i := range out {
			h := le.Uint16(d[2*i:])
			if x.Datatype == serveapi.TypeFP16 {
				out[i] = float64(float16Value(h))
			} else {
				out[i] = float64(math.Float32frombits(uint32(h) << 16))
			}
		}
		return finite(out)
	case serveapi.TypeUint8, serveapi.TypeUint16, serveapi.TypeUint32, serveapi.TypeUint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = readUint(d[i*size:], size)
		}
		return out, nil
	default:
		out := make([]int64, n)
		for i := range out {
			u := readUint(d[i*size:], size)
			shift := 64 - 8*size
			out[i] = int64(u<<shift) >> shift
		}
		return out, nil
	}
}

func readUint(b []byte, size int) uint64 {
	le := binary.LittleEndian
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(le.Uint16(b))
	case 4:
		return uint64(le.Uint32(b))
	}
	return le.Uint64(b)
}

// float16Bits rounds f to IEEE half precision (to nearest even).
func float16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp - 127 + 15)
		m := mant >> 13
		rest := mant & 0x1fff
		h := uint32(sign) | e<<10 | m
		if rest > 0x1000 || rest == 0x1000 && m&1 == 1 {
			h++ // may carry into the exponent, which is right
		}
		return uint16(h)
	case exp-127 >= -25: // subnormal
		mant |= 0x800000
		shift := uint32(-14 - (exp - 127) + 13)
		m := mant >> shift
		rest := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && m&1 == 1 {
			m++
		}
		return sign | uint16(m)
	}
	return sign
}

// float16Value widens IEEE half precision bits to float32.
func float16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// bfloat16Bits rounds f to bfloat16 (to nearest even).
func bfloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// run sends one request's tensors through the queue and returns the
// outputs, whole.
func (t *tensors) run(ctx context.Context, ins []serveapi.Tensor) ([]serveapi.Tensor, batch.Answer[tensorRow], error) {
	if !t.batched {
		res, err := t.queue.Do(ctx, []tensorRow{ins})
		if err != nil {
			return nil, res, err
		}
		return res.Outputs[0], res, nil
	}
	n := int(ins[0].Shape[0])
	if n == 0 {
		return nil, batch.Answer[tensorRow]{}, errors.New("a request needs at least one row")
	}
	rows := make([]tensorRow, n)
	for i := range rows {
		rows[i] = make(tensorRow, len(ins))
	}
	for j, x := range ins {
		parts, err := split(x)
		if err != nil {
			return nil, batch.Answer[tensorRow]{}, err
		}
		for i := range rows {
			rows[i][j] = parts[i]
		}
	}
	res, err := t.queue.DoKeyed(ctx, t.key(rows[0]), rows)
	if err != nil {
		return nil, res, err
	}
	return joinRows(res.Outputs), res, nil
}

// joinRows stacks output rows back into whole tensors.
func joinRows(rows []tensorRow) []serveapi.Tensor {
	out := make([]serveapi.Tensor, len(rows[0]))
	for j, first := range rows[0] {
		x := serveapi.Tensor{Name: first.Name, Datatype: first.Datatype, Shape: append([]int64{int64(len(rows))}, first.Shape...)}
		for _, r := range rows {
			x.Data = append(x.Data, r[j].Data...)
			x.Strings = append(x.Strings, r[j].Strings...)
		}
		out[j] = x
	}
	return out
}

// inferTensors answers V2 infer for a tensor model.
func (s *Server) inferTensors(w http.ResponseWriter, r *http.Request, l *loaded, req v2Request) {
	t := l.tensors
	ins, err := t.request(req.Inputs, s.opt.MaxInstances)
	if err == nil {
		err = checkRows(t, ins)
	}
	if err != nil {
		l.metrics.failed(reasonOther)
		v2Error(w, http.StatusBadRequest, err.Error())
		return
	}
	want, err := requestedOutputs(req.Outputs, t.out)
	if err != nil {
		l.metrics.failed(reasonOther)
		v2Error(w, http.StatusBadRequest, err.Error())
		return
	}
	start := s.clock.Now("runtime", "infer")
	outs, res, err := t.run(r.Context(), ins)
	if f := s.account(r.Context(), l, start, rowsOf(t, ins), res.Queue, res.Compute, res.BatchRows, err); f != nil {
		s.answerFailure(w, f, v2Error)
		return
	}
	resp := v2Response{ModelName: l.cfg.Model, ModelVersion: l.cfg.Version, ID: req.ID}
	for _, o := range outs {
		if want != nil && !want[o.Name] {
			continue
		}
		data, err := values(o)
		if err != nil {
			v2Error(w, http.StatusInternalServerError, err.Error())
			return
		}
		resp.Outputs = append(resp.Outputs, v2Output{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Data: data})
	}
	writeJSON(w, http.StatusOK, resp)
}

// checkRows refuses a batched request without rows.
func checkRows(t *tensors, ins []serveapi.Tensor) error {
	if t.batched && ins[0].Shape[0] < 1 {
		return fmt.Errorf("inputs[%q]: at least one row is required", ins[0].Name)
	}
	return nil
}

func rowsOf(t *tensors, ins []serveapi.Tensor) int {
	if t.batched {
		return int(ins[0].Shape[0])
	}
	return 1
}

// requestedOutputs reads V2's optional outputs list: nil for all.
func requestedOutputs(raw json.RawMessage, specs []serveapi.TensorSpec) (map[string]bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("outputs must be an array of {\"name\": ...}")
	}
	want := map[string]bool{}
	for _, o := range list {
		if !slices.ContainsFunc(specs, func(s serveapi.TensorSpec) bool { return s.Name == o.Name }) {
			return nil, fmt.Errorf("outputs: %q is not an output of the model; it has %s", o.Name, specNames(specs))
		}
		want[o.Name] = true
	}
	return want, nil
}

// predictTensors answers /predict for a tensor model: each instance is an
// object keyed by input name holding one row (the input without its first
// axis; a model whose first axis is fixed takes whole tensors), and each
// prediction an object keyed by output name. Instances whose shapes differ run as
// separate requests, so ragged rows never share a tensor.
func (s *Server) predictTensors(ctx context.Context, l *loaded, instances []json.RawMessage) ([]map[string]any, *failure, error) {
	t := l.tensors
	type group struct {
		at   []int
		rows []tensorRow
	}
	groups := map[string]*group{}
	var order []string
	for i, raw := range instances {
		row, err := t.instance(raw, fmt.Sprintf("instances[%d]", i))
		if err != nil {
			return nil, nil, err
		}
		key := t.key(row)
		if !t.batched {
			key = strconv.Itoa(i)
		}
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.at = append(g.at, i)
		g.rows = append(g.rows, row)
	}
	out := make([]map[string]any, len(instances))
	var mu sync.Mutex
	var fail *failure
	var wg sync.WaitGroup
	for _, key := range order {
		g := groups[key]
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := s.clock.Now("runtime", "infer")
			outs, err := t.runRows(ctx, key, g.rows)
			f := s.account(ctx, l, start, len(g.rows), outs.Queue, outs.Compute, outs.BatchRows, err)
			mu.Lock()
			defer mu.Unlock()
			if f != nil {
				if fail == nil {
					fail = f
				}
				return
			}
			for k, row := range outs.Outputs {
				p, err := prediction(row)
				if err != nil {
					if fail == nil {
						fail = &failure{http.StatusInternalServerError, err.Error(), reasonBackend}
					}
					return
				}
				out[g.at[k]] = p
			}
		}()
	}
	wg.Wait()
	if fail != nil {
		return nil, fail, nil
	}
	return out, nil, nil
}

// runRows runs /predict rows of one key: merged by the queue when the
// model is batched; otherwise the one row, as a request of one row when
// the model is row-wise or as whole tensors.
func (t *tensors) runRows(ctx context.Context, key string, rows []tensorRow) (batch.Answer[tensorRow], error) {
	if t.batched {
		return t.queue.DoKeyed(ctx, key, rows)
	}
	whole := rows[0]
	if t.rowwise {
		whole = make(tensorRow, len(rows[0]))
		for j, x := range rows[0] {
			x.Shape = append([]int64{1}, x.Shape...)
			whole[j] = x
		}
	}
	res, err := t.queue.Do(ctx, []tensorRow{whole})
	if err != nil || !t.rowwise {
		return res, err
	}
	out := make(tensorRow, len(res.Outputs[0]))
	for j, x := range res.Outputs[0] {
		if len(x.Shape) == 0 || x.Shape[0] != 1 {
			return res, fmt.Errorf("output %q has shape %v for one row", x.Name, x.Shape)
		}
		parts, err := split(x)
		if err != nil {
			return res, err
		}
		out[j] = parts[0]
	}
	res.Outputs = []tensorRow{out}
	return res, nil
}

// instance reads one /predict instance into a row.
func (t *tensors) instance(raw json.RawMessage, where string) (tensorRow, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, &fieldError{where, "must be a JSON object keyed by the model's inputs (" + specNames(t.in) + ")"}
	}
	row := make(tensorRow, len(t.in))
	for j, s := range t.in {
		v, ok := obj[s.Name]
		if !ok {
			return nil, &fieldError{where + "." + s.Name, "is missing"}
		}
		shape, err := nestedShape(v)
		if err != nil {
			return nil, &fieldError{where + "." + s.Name, err.Error()}
		}
		want := s.Shape
		if t.rowwise {
			want = want[1:]
		}
		if err := fitShape(shape, want); err != nil {
			return nil, &fieldError{where + "." + s.Name, err.Error()}
		}
		data := v
		if len(shape) == 0 {
			data = json.RawMessage("[" + string(v) + "]")
		}
		x, err := decodeTensor(&v2Tensor{Name: s.Name, Datatype: s.Datatype, Shape: shape, Data: data})
		if err != nil {
			return nil, &fieldError{where + "." + s.Name, err.Error()}
		}
		row[j] = x
	}
	return row, nil
}

// nestedShape is the shape of a nested JSON array (a scalar's is empty);
// ragged nesting is an error.
func nestedShape(raw json.RawMessage) ([]int64, error) {
	var root any
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, errors.New("must be a value or a nested array")
	}
	v := root
	var shape []int64
	for {
		a, ok := v.([]any)
		if !ok {
			break
		}
		shape = append(shape, int64(len(a)))
		if len(a) == 0 {
			break
		}
		v = a[0]
	}
	if shape == nil {
		return []int64{}, nil
	}
	var check func(v any, d int) bool
	check = func(v any, d int) bool {
		if d == len(shape) {
			_, isArr := v.([]any)
			return !isArr
		}
		a, ok := v.([]any)
		if !ok || int64(len(a)) != shape[d] {
			return false
		}
		for _, e := range a {
			if !check(e, d+1) {
				return false
			}
		}
		return true
	}
	if !check(root, 0) {
		return nil, errors.New("is a ragged array: every row of a dimension must have the same length")
	}
	return shape, nil
}

// prediction is one output row as /predict answers it: each output by
// name, nested to its shape.
func prediction(row tensorRow) (map[string]any, error) {
	p := make(map[string]any, len(row))
	for _, x := range row {
		flat, err := values(x)
		if err != nil {
			return nil, err
		}
		p[x.Name] = nest(flat, x.Shape)
	}
	return p, nil
}

// nest reshapes a flat slice (as values returns) to shape.
func nest(flat any, shape []int64) any {
	b, _ := json.Marshal(flat)
	var items []json.RawMessage
	_ = json.Unmarshal(b, &items)
	if len(shape) == 0 {
		if len(items) == 1 {
			return items[0]
		}
		return items
	}
	var build func(items []json.RawMessage, shape []int64) any
	build = func(items []json.RawMessage, shape []int64) any {
		if len(shape) == 1 {
			return items
		}
		n := int(shape[0])
		per := len(items) / max(n, 1)
		out := make([]any, n)
		for i := range out {
			out[i] = build(items[i*per:(i+1)*per], shape[1:])
		}
		return out
	}
	return build(items, shape)
}

// metadataTensors is /v2/models/{m} for a tensor model: the signature
// from the graph, a dynamic or unknown dimension as -1.
func metadataTensors(md *v2ModelMetadata, t *tensors) {
	conv := func(specs []serveapi.TensorSpec) []v2TensorMeta {
		out := make([]v2TensorMeta, len(specs))
		for i, s := range specs {
			shape := slices.Clone(s.Shape)
			if shape == nil {
				shape = []int64{}
			}
			for k := range shape {
				if shape[k] < 0 {
					shape[k] = -1
				}
			}
			out[i] = v2TensorMeta{Name: s.Name, Datatype: s.Datatype, Shape: shape}
		}
		return out
	}
	md.Inputs, md.Outputs = conv(t.in), conv(t.out)
}
