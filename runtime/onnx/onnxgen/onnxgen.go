package onnxgen

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Defaults a Model takes for the fields left zero.
const (
	// DefaultIRVersion is ONNX IR version 8 (ONNX 1.10 and later).
	DefaultIRVersion = 8
	// DefaultOpset is the default domain's opset imported when a Model
	// names none.
	DefaultOpset = 17
)

// Element types of onnx.TensorProto.DataType that this package writes.
const (
	Float = 1 // float32
	Int64 = 7
)

// Model is an onnx.ModelProto.
type Model struct {
	// IRVersion is the ONNX IR version; 0 means DefaultIRVersion.
	IRVersion int64
	// Opsets are the operator sets imported; none means the default
	// domain at DefaultOpset.
	Opsets          []Opset
	ProducerName    string
	ProducerVersion string
	DocString       string
	Graph           Graph
	// Metadata is metadata_props, written in order.
	Metadata []Prop
}

// Opset is one onnx.OperatorSetIdProto; Domain "" is the default ai.onnx.
type Opset struct {
	Domain  string
	Version int64
}

// Prop is one metadata_props entry.
type Prop struct {
	Key, Value string
}

// Graph is an onnx.GraphProto.
type Graph struct {
	// Name is the graph's name; empty means "main".
	Name         string
	Nodes        []Node
	Initializers []Tensor
	Inputs       []Value
	Outputs      []Value
}

// Node is an onnx.NodeProto.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string
	Outputs []string
	Attrs   []Attr
}

// Attribute types of onnx.AttributeProto.AttributeType that this package
// writes.
const (
	AttrFloat  = 1
	AttrInt    = 2
	AttrString = 3
	AttrFloats = 6
	AttrInts   = 7
)

// Attr is an onnx.AttributeProto; Type says which value field is set. The
// constructors IntAttr, FloatAttr, StringAttr, IntsAttr and FloatsAttr fill
// it.
type Attr struct {
	Name   string
	Type   int
	I      int64
	F      float32
	S      string
	Ints   []int64
	Floats []float32
}

// IntAttr is an INT attribute.
func IntAttr(name string, v int64) Attr { return Attr{Name: name, Type: AttrInt, I: v} }

// FloatAttr is a FLOAT attribute.
func FloatAttr(name string, v float32) Attr { return Attr{Name: name, Type: AttrFloat, F: v} }

// StringAttr is a STRING attribute.
func StringAttr(name, v string) Attr { return Attr{Name: name, Type: AttrString, S: v} }

// IntsAttr is an INTS attribute.
func IntsAttr(name string, v ...int64) Attr { return Attr{Name: name, Type: AttrInts, Ints: v} }

// FloatsAttr is a FLOATS attribute.
func FloatsAttr(name string, v ...float32) Attr {
	return Attr{Name: name, Type: AttrFloats, Floats: v}
}

// Tensor is an initializer (onnx.TensorProto), written as raw_data. Exactly
// one of Floats, Int64s and Fill gives its values, row-major; their number is
// the product of Dims.
type Tensor struct {
	Name   string
	Dims   []int64
	Floats []float32
	Int64s []int64
	// Fill makes a float tensor's values while it is written: it sets
	// dst to the values at indexes offset .. offset+len(dst)-1. It is
	// called once per chunk, in order, so the values are never all in
	// memory.
	Fill func(dst []float32, offset int)
}

// Value is an onnx.ValueInfoProto of a tensor: a graph input or output.
type Value struct {
	Name string
	// ElemType is a TensorProto.DataType (Float, Int64, 8 for STRING, 9
	// for BOOL, …); 0 means Float.
	ElemType int
	Dims     []Dim
}

// Dim is one dimension of a Value's shape: a fixed size, or a symbolic
// one (Param) such as the batch.
type Dim struct {
	Size  int64
	Param string
}

// Fixed is a dimension of size n.
func Fixed(n int64) Dim { return Dim{Size: n} }

// Symbolic is a dimension named param whose size is known only at run time.
func Symbolic(param string) Dim { return Dim{Param: param} }

// Field numbers of onnx.proto, stable across ONNX versions.
const (
	modelIRVersion       = 1
	modelProducerName    = 2
	modelProducerVersion = 3
	modelDocString       = 6
	modelGraph           = 7
	modelOpsetImport     = 8
	modelMetadataProps   = 14

	opsetDomain  = 1
	opsetVersion = 2

	propKey   = 1
	propValue = 2

	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12

	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	nodeDomain    = 7

	attrName   = 1
	attrF      = 2
	attrI      = 3
	attrS      = 4
	attrFloats = 7
	attrInts   = 8
	attrType   = 20

	tensorDims     = 1
	tensorDataType = 2
	tensorName     = 8
	tensorRawData  = 9

	valueName       = 1
	valueType       = 2
	typeTensor      = 1
	tensorElemType  = 1
	tensorShape     = 2
	shapeDim        = 1
	dimValue        = 1
	dimParam        = 2
	fillChunkValues = 1 << 14
)

// ErrInvalid is wrapped by the errors of a Model that cannot be written.
var ErrInvalid = errors.New("invalid onnx model")

// Bytes returns the serialised model.
func (m Model) Bytes() ([]byte, error) {
	var buf bytesWriter
	if _, err := m.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.b, nil
}

type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// segment is a run of the graph's bytes: inline bytes, then, for an
// initializer, its raw values streamed.
type segment struct {
	head   []byte
	tensor *Tensor
	count  int // values of tensor
}

// WriteTo writes the serialised model to w, streaming initializers, and
// returns the number of bytes written.
func (m Model) WriteTo(w io.Writer) (int64, error) {
	segs, graphLen, err := m.Graph.segments()
	if err != nil {
		return 0, err
	}
	var head []byte
	ir := m.IRVersion
	if ir == 0 {
		ir = DefaultIRVersion
	}
	head = appendVarintField(head, modelIRVersion, uint64(ir))
	head = appendStringField(head, modelProducerName, m.ProducerName)
	head = appendStringField(head, modelProducerVersion, m.ProducerVersion)
	head = appendStringField(head, modelDocString, m.DocString)
	head = protowire.AppendTag(head, modelGraph, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(graphLen))

	var tail []byte
	opsets := m.Opsets
	if len(opsets) == 0 {
		opsets = []Opset{{Version: DefaultOpset}}
	}
	for _, o := range opsets {
		var b []byte
		b = appendStringField(b, opsetDomain, o.Domain)
		b = appendVarintField(b, opsetVersion, uint64(o.Version))
		tail = appendBytesField(tail, modelOpsetImport, b)
	}
	for _, p := range m.Metadata {
		var b []byte
		b = appendStringField(b, propKey, p.Key)
		b = appendStringField(b, propValue, p.Value)
		tail = appendBytesField(tail, modelMetadataProps, b)
	}

	cw := &countingWriter{w: bufio.NewWriterSize(w, 1<<16)}
	cw.write(head)
	for _, s := range segs {
		cw.write(s.head)
		if s.tensor != nil {
			cw.writeValues(s.tensor, s.count)
		}
	}
	cw.write(tail)
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	if cw.err != nil {
		return cw.n, fmt.Errorf("write onnx model: %w", cw.err)
	}
	return cw.n, nil
}

// segments encodes the graph, all but initializer values, and returns its
// total serialised length.
func (g Graph) segments() ([]segment, int, error) {
	var inline []byte
	for i, n := range g.Nodes {
		b, err := n.encode()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: node %d: %v", ErrInvalid, i, err)
		}
		inline = appendBytesField(inline, graphNode, b)
	}
	name := g.Name
	if name == "" {
		name = "main"
	}
	inline = appendStringField(inline, graphName, name)
	segs := []segment{{head: inline}}
	total := len(inline)
	seen := map[string]bool{}
	for i := range g.Initializers {
		t := &g.Initializers[i]
		if t.Name == "" || seen[t.Name] {
			return nil, 0, fmt.Errorf("%w: initializer %d: name %q empty or repeated", ErrInvalid, i, t.Name)
		}
		seen[t.Name] = true
		head, count, rawLen, err := t.header()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: initializer %q: %v", ErrInvalid, t.Name, err)
		}
		msgLen := len(head) + protowire.SizeTag(tensorRawData) + protowire.SizeBytes(rawLen)
		var b []byte
		b = protowire.AppendTag(b, graphInitializer, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(msgLen))
		b = append(b, head...)
		b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(rawLen))
		segs = append(segs, segment{head: b, tensor: t, count: count})
		total += len(b) + rawLen
	}
	var vals []byte
	for _, v := range g.Inputs {
		b, err := v.encode()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: input: %v", ErrInvalid, err)
		}
		vals = appendBytesField(vals, graphInput, b)
	}
	for _, v := range g.Outputs {
		b, err := v.encode()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: output: %v", ErrInvalid, err)
		}
		vals = appendBytesField(vals, graphOutput, b)
	}
	if len(g.Inputs) == 0 || len(g.Outputs) == 0 {
		return nil, 0, fmt.Errorf("%w: graph has %d inputs and %d outputs, want at least one of each",
			ErrInvalid, len(g.Inputs), len(g.Outputs))
	}
	segs = append(segs, segment{head: vals})
	total += len(vals)
	return segs, total, nil
}

// header encodes a tensor's fields before raw_data and says how many values
// and raw bytes follow.
func (t *Tensor) header() ([]byte, int, int, error) {
	count := 1
	for _, d := range t.Dims {
		if d < 0 {
			return nil, 0, 0, fmt.Errorf("dimension %d is negative", d)
		}
		if d > 0 && count > math.MaxInt/int(d) {
			return nil, 0, 0, fmt.Errorf("dims %v overflow", t.Dims)
		}
		count *= int(d)
	}
	given := 0
	elem, size := Float, 4
	switch {
	case t.Floats != nil:
		given++
		if len(t.Floats) != count {
			return nil, 0, 0, fmt.Errorf("%d floats for dims %v (%d values)", len(t.Floats), t.Dims, count)
		}
	case t.Int64s != nil:
		given++
		elem, size = Int64, 8
		if len(t.Int64s) != count {
			return nil, 0, 0, fmt.Errorf("%d int64s for dims %v (%d values)", len(t.Int64s), t.Dims, count)
		}
	}
	if t.Fill != nil {
		given++
	}
	if given != 1 {
		return nil, 0, 0, errors.New("want exactly one of Floats, Int64s and Fill")
	}
	var b []byte
	if len(t.Dims) > 0 {
		var packed []byte
		for _, d := range t.Dims {
			packed = protowire.AppendVarint(packed, uint64(d))
		}
		b = appendBytesField(b, tensorDims, packed)
	}
	b = appendVarintField(b, tensorDataType, uint64(elem))
	b = appendStringField(b, tensorName, t.Name)
	return b, count, count * size, nil
}

func (n Node) encode() ([]byte, error) {
	if n.OpType == "" {
		return nil, errors.New("no op type")
	}
	var b []byte
	for _, in := range n.Inputs {
		b = protowire.AppendTag(b, nodeInput, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	for _, out := range n.Outputs {
		if out == "" {
			return nil, fmt.Errorf("%s has an empty output name", n.OpType)
		}
		b = protowire.AppendTag(b, nodeOutput, protowire.BytesType)
		b = protowire.AppendString(b, out)
	}
	b = appendStringField(b, nodeName, n.Name)
	b = appendStringField(b, nodeOpType, n.OpType)
	for _, a := range n.Attrs {
		ab, err := a.encode()
		if err != nil {
			return nil, fmt.Errorf("%s attribute %q: %v", n.OpType, a.Name, err)
		}
		b = appendBytesField(b, nodeAttribute, ab)
	}
	b = appendStringField(b, nodeDomain, n.Domain)
	return b, nil
}

func (a Attr) encode() ([]byte, error) {
	if a.Name == "" {
		return nil, errors.New("no name")
	}
	var b []byte
	b = appendStringField(b, attrName, a.Name)
	switch a.Type {
	case AttrFloat:
		b = protowire.AppendTag(b, attrF, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case AttrInt:
		b = protowire.AppendTag(b, attrI, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case AttrString:
		b = protowire.AppendTag(b, attrS, protowire.BytesType)
		b = protowire.AppendString(b, a.S)
	case AttrFloats:
		var packed []byte
		for _, f := range a.Floats {
			packed = protowire.AppendFixed32(packed, math.Float32bits(f))
		}
		b = appendBytesField(b, attrFloats, packed)
	case AttrInts:
		var packed []byte
		for _, i := range a.Ints {
			packed = protowire.AppendVarint(packed, uint64(i))
		}
		b = appendBytesField(b, attrInts, packed)
	default:
		return nil, fmt.Errorf("type %d not supported", a.Type)
	}
	b = appendVarintField(b, attrType, uint64(a.Type))
	return b, nil
}

func (v Value) encode() ([]byte, error) {
	if v.Name == "" {
		return nil, errors.New("value with no name")
	}
	elem := v.ElemType
	if elem == 0 {
		elem = Float
	}
	if elem < 1 || elem > 16 {
		return nil, fmt.Errorf("value %q: element type %d is not a TensorProto.DataType", v.Name, elem)
	}
	var shape []byte
	for _, d := range v.Dims {
		var db []byte
		if d.Param != "" {
			db = appendStringField(db, dimParam, d.Param)
		} else {
			db = protowire.AppendTag(db, dimValue, protowire.VarintType)
			db = protowire.AppendVarint(db, uint64(d.Size))
		}
		shape = appendBytesField(shape, shapeDim, db)
	}
	var tt []byte
	tt = appendVarintField(tt, tensorElemType, uint64(elem))
	tt = protowire.AppendTag(tt, tensorShape, protowire.BytesType)
	tt = protowire.AppendBytes(tt, shape)
	var typ []byte
	typ = appendBytesField(typ, typeTensor, tt)
	var b []byte
	b = appendStringField(b, valueName, v.Name)
	b = appendBytesField(b, valueType, typ)
	return b, nil
}

// countingWriter keeps the first error and the bytes written.
type countingWriter struct {
	w   *bufio.Writer
	n   int64
	err error
	buf []byte
	f32 []float32
}

func (c *countingWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

// writeValues streams a tensor's raw little-endian values in chunks.
func (c *countingWriter) writeValues(t *Tensor, count int) {
	if t.Int64s != nil {
		b := make([]byte, 8*len(t.Int64s))
		for i, v := range t.Int64s {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		}
		c.write(b)
		return
	}
	if c.buf == nil {
		c.buf = make([]byte, 4*fillChunkValues)
		c.f32 = make([]float32, fillChunkValues)
	}
	for off := 0; off < count && c.err == nil; off += fillChunkValues {
		n := min(fillChunkValues, count-off)
		vals := c.f32[:n]
		if t.Floats != nil {
			vals = t.Floats[off : off+n]
		} else {
			t.Fill(vals, off)
		}
		for i, v := range vals {
			binary.LittleEndian.PutUint32(c.buf[4*i:], math.Float32bits(v))
		}
		c.write(c.buf[:4*n])
	}
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendStringField writes a string field unless it is empty (proto3's
// default, which readers take for absent).
func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
