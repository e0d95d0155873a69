package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Tensor is a tensor to write: its description (Offset and Size are
// computed) and its raw bytes in the type's layout.
type Tensor struct {
	Name string
	Dims []uint64
	Type TensorType
	Data []byte
}

// Write writes a version-3 GGUF file with the metadata in order and the
// tensors in order, each aligned to general.alignment (when given as a
// KV) or DefaultAlignment. Values must have the Go types KV documents.
func Write(w io.Writer, kvs []KV, tensors []Tensor) error {
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := AsUint(kv.Value)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("general.alignment %v is not a power of two", kv.Value)
			}
			align = a
		}
	}
	bw := bufio.NewWriter(w)
	cw := &countWriter{w: bw}
	e := &encoder{w: cw}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Type))
		if err := e.value(kv.Type, kv.Value); err != nil {
			return fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
	}
	var off uint64
	offsets := make([]uint64, len(tensors))
	for i, t := range tensors {
		n, err := TensorInfo{Name: t.Name, Dims: t.Dims}.Elements()
		if err != nil {
			return err
		}
		sz, err := t.Type.RowBytes(n)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if uint64(len(t.Data)) != sz {
			return fmt.Errorf("tensor %q: %d bytes of data, want %d", t.Name, len(t.Data), sz)
		}
		off = alignUp(off, align)
		offsets[i] = off
		off += sz
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(offsets[i])
	}
	e.pad(align)
	start := cw.n
	for i, t := range tensors {
		e.raw(make([]byte, start+offsets[i]-cw.n))
		e.raw(t.Data)
	}
	if e.err != nil {
		return e.err
	}
	if cw.err != nil {
		return cw.err
	}
	return bw.Flush()
}

type countWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += uint64(n)
	c.err = err
	return n, err
}

type encoder struct {
	w   *countWriter
	err error
}

func (e *encoder) raw(b []byte) { e.w.Write(b) }
func (e *encoder) u32(v uint32) { e.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }
func (e *encoder) pad(a uint64) { e.raw(make([]byte, alignUp(e.w.n, a)-e.w.n)) }

func (e *encoder) value(t ValueType, v any) error {
	bad := func() error { return fmt.Errorf("value %T does not match type %s", v, t) }
	switch t {
	case Uint8:
		x, ok := v.(uint8)
		if !ok {
			return bad()
		}
		e.raw([]byte{x})
	case Int8:
		x, ok := v.(int8)
		if !ok {
			return bad()
		}
		e.raw([]byte{byte(x)})
	case Uint16:
		x, ok := v.(uint16)
		if !ok {
			return bad()
		}
		e.raw(binary.LittleEndian.AppendUint16(nil, x))
	case Int16:
		x, ok := v.(int16)
		if !ok {
			return bad()
		}
		e.raw(binary.LittleEndian.AppendUint16(nil, uint16(x)))
	case Uint32:
		x, ok := v.(uint32)
		if !ok {
			return bad()
		}
		e.u32(x)
	case Int32:
		x, ok := v.(int32)
		if !ok {
			return bad()
		}
		e.u32(uint32(x))
	case Float32:
		x, ok := v.(float32)
		if !ok {
			return bad()
		}
		e.u32(math.Float32bits(x))
	case Bool:
		x, ok := v.(bool)
		if !ok {
			return bad()
		}
		b := byte(0)
		if x {
			b = 1
		}
		e.raw([]byte{b})
	case String:
		x, ok := v.(string)
		if !ok {
			return bad()
		}
		e.str(x)
	case Uint64:
		x, ok := v.(uint64)
		if !ok {
			return bad()
		}
		e.u64(x)
	case Int64:
		x, ok := v.(int64)
		if !ok {
			return bad()
		}
		e.u64(uint64(x))
	case Float64:
		x, ok := v.(float64)
		if !ok {
			return bad()
		}
		e.u64(math.Float64bits(x))
	case Array:
		return e.array(v)
	default:
		return fmt.Errorf("unknown value type %d", uint32(t))
	}
	return nil
}

func writeArr[T any](e *encoder, t ValueType, xs []T) error {
	e.u32(uint32(t))
	e.u64(uint64(len(xs)))
	for _, x := range xs {
		if err := e.value(t, x); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) array(v any) error {
	switch xs := v.(type) {
	case []uint8:
		return writeArr(e, Uint8, xs)
	case []int8:
		return writeArr(e, Int8, xs)
	case []uint16:
		return writeArr(e, Uint16, xs)
	case []int16:
		return writeArr(e, Int16, xs)
	case []uint32:
		return writeArr(e, Uint32, xs)
	case []int32:
		return writeArr(e, Int32, xs)
	case []float32:
		return writeArr(e, Float32, xs)
	case []bool:
		return writeArr(e, Bool, xs)
	case []string:
		return writeArr(e, String, xs)
	case []uint64:
		return writeArr(e, Uint64, xs)
	case []int64:
		return writeArr(e, Int64, xs)
	case []float64:
		return writeArr(e, Float64, xs)
	}
	return fmt.Errorf("array value %T is not supported by the writer", v)
}
