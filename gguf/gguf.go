package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
)

// ErrInvalid is wrapped by every error about a malformed file.
var ErrInvalid = errors.New("invalid gguf file")

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the format version this package writes; it reads 2 and 3.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is the type tag of a metadata value.
type ValueType uint32

// The metadata value types of the format.
const (
	Uint8 ValueType = iota
	Int8
	Uint16
	Int16
	Uint32
	Int32
	Float32
	Bool
	String
	Array
	Uint64
	Int64
	Float64
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// TensorType is a ggml tensor element type.
type TensorType uint32

// The ggml tensor types. Only the sizes of those listed in typeInfo are
// known; a file with any other type is refused.
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q4_1 TensorType = 3
	Q5_0 TensorType = 6
	Q5_1 TensorType = 7
	Q8_0 TensorType = 8
	Q8_1 TensorType = 9
	Q2_K TensorType = 10
	Q3_K TensorType = 11
	Q4_K TensorType = 12
	Q5_K TensorType = 13
	Q6_K TensorType = 14
	Q8_K TensorType = 15
	I8   TensorType = 24
	I16  TensorType = 25
	I32  TensorType = 26
	I64  TensorType = 27
	F64  TensorType = 28
	BF16 TensorType = 30
)

type typeInfo struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

var tensorTypes = map[TensorType]typeInfo{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144},
	Q5_K: {"Q5_K", 256, 176}, Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
}

func (t TensorType) String() string {
	if i, ok := tensorTypes[t]; ok {
		return i.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the package knows the type's block layout.
func (t TensorType) Known() bool { _, ok := tensorTypes[t]; return ok }

// RowBytes is the size in bytes of n elements of the type, or an error when
// the type is unknown, n is not a whole number of blocks or the size does
// not fit in 64 bits (a wrapped size once let a tensor of 2^63 elements
// claim 16 bytes).
func (t TensorType) RowBytes(n uint64) (uint64, error) {
	i, ok := tensorTypes[t]
	if !ok {
		return 0, fmt.Errorf("%w: unknown tensor type %d", ErrInvalid, uint32(t))
	}
	if n%uint64(i.blockSize) != 0 {
		return 0, fmt.Errorf("%w: %d elements of %s is not a whole number of %d-element blocks", ErrInvalid, n, i.name, i.blockSize)
	}
	hi, sz := bits.Mul64(n/uint64(i.blockSize), uint64(i.typeSize))
	if hi != 0 {
		return 0, fmt.Errorf("%w: %d elements of %s overflow a 64-bit size", ErrInvalid, n, i.name)
	}
	return sz, nil
}

// KV is one metadata entry. Value holds uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64, float64, or for arrays a
// []T of one of those (or [][]any for nested arrays, rare in practice).
type KV struct {
	Key   string
	Type  ValueType
	Value any
}

// TensorInfo describes one tensor. Dims[0] is the fastest-varying
// dimension (a row's length for a matrix).
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64 // relative to the data section
	Size   uint64 // bytes
}

// MaxElements bounds a tensor's element count: 2^53, so that the count, and
// four bytes for each element, fit in an int64 (and a float64) wherever a
// caller sums or scales it. No real model comes near it.
const MaxElements = 1 << 53

// Elements is the product of the dimensions, or an error wrapping
// ErrInvalid when it passes MaxElements. Multiplying unchecked once let
// dimensions [15790336, 1099510579201] wrap to a size of 16 bytes and a
// negative memory need.
func (t TensorInfo) Elements() (uint64, error) {
	n := uint64(1)
	for _, d := range t.Dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > MaxElements {
			return 0, fmt.Errorf("%w: tensor %q: dimensions %v hold more than 2^53 elements", ErrInvalid, t.Name, t.Dims)
		}
		n = lo
	}
	return n, nil
}

// File is an opened GGUF file: its metadata and tensor table, with the
// tensor bytes read on demand.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute offset of the data section

	kv      map[string]int
	tensors map[string]int
	r       io.ReaderAt
	closer  io.Closer
}

// Open opens and parses the file at path; Close releases it.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	g, err := Read(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g.closer = f
	return g, nil
}

// Close closes the underlying file when Open opened it.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// limits guard against absurd counts in a corrupt header before any
// allocation is made from them. Besides these, nothing is allocated for
// more bytes (or array elements) than are left in the file.
const (
	maxStringLen = 64 << 20 // a whole tokenizer.json fits
	maxCount     = 1 << 28
	maxDims      = 8
	maxAlignment = 1 << 20 // so that aligning an offset cannot wrap
)

type reader struct {
	r    *bufio.Reader
	off  uint64
	size uint64 // of the file: what may still be read is size - off
	err  error
}

// left is how many bytes the file holds past the reader's offset.
func (r *reader) left() uint64 {
	if r.off >= r.size {
		return 0
	}
	return r.size - r.off
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.fail("truncated at byte %d reading %s", r.off, what)
		return nil
	}
	r.off += uint64(n)
	return b
}

func (r *reader) u32(what string) uint32 {
	b := r.bytes(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *reader) u64(what string) uint64 {
	b := r.bytes(8, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *reader) str(what string) string {
	n := r.u64(what + " length")
	if r.err != nil {
		return ""
	}
	if n > maxStringLen {
		r.fail("%s length %d is too large", what, n)
		return ""
	}
	if n > r.left() {
		// Refused before allocating: a declared length is believed only
		// as far as the file has bytes to back it.
		r.fail("truncated at byte %d reading %s (%d bytes declared, %d left)", r.off, what, n, r.left())
		return ""
	}
	return string(r.bytes(int(n), what))
}

func (r *reader) value(t ValueType, what string, depth int) any {
	switch t {
	case Uint8:
		b := r.bytes(1, what)
		if b == nil {
			return nil
		}
		return b[0]
	case Int8:
		b := r.bytes(1, what)
		if b == nil {
			return nil
		}
		return int8(b[0])
	case Uint16, Int16:
		b := r.bytes(2, what)
		if b == nil {
			return nil
		}
		v := binary.LittleEndian.Uint16(b)
		if t == Int16 {
			return int16(v)
		}
		return v
	case Uint32:
		return r.u32(what)
	case Int32:
		return int32(r.u32(what))
	case Float32:
		return math.Float32frombits(r.u32(what))
	case Bool:
		b := r.bytes(1, what)
		if b == nil {
			return nil
		}
		if b[0] > 1 {
			r.fail("%s: bool value %d is neither 0 nor 1", what, b[0])
		}
		return b[0] == 1
	case String:
		return r.str(what)
	case Uint64:
		return r.u64(what)
	case Int64:
		return int64(r.u64(what))
	case Float64:
		return math.Float64frombits(r.u64(what))
	case Array:
		et := ValueType(r.u32(what + " element type"))
		n := r.u64(what + " element count")
		if r.err != nil {
			return nil
		}
		if n > maxCount {
			r.fail("%s: array of %d elements is too large", what, n)
			return nil
		}
		if n > r.left() {
			// Every element takes at least a byte.
			r.fail("truncated at byte %d reading %s (%d elements declared, %d bytes left)", r.off, what, n, r.left())
			return nil
		}
		if depth > 4 {
			r.fail("%s: arrays nested too deep", what)
			return nil
		}
		return r.array(et, int(n), what, depth)
	}
	r.fail("%s: unknown value type %d", what, uint32(t))
	return nil
}

func readArr[T any](r *reader, n int, what string, et ValueType, depth int) []T {
	out := make([]T, 0, min(n, 1<<16))
	for i := 0; i < n && r.err == nil; i++ {
		v, _ := r.value(et, what, depth).(T)
		out = append(out, v)
	}
	return out
}

func (r *reader) array(et ValueType, n int, what string, depth int) any {
	switch et {
	case Uint8:
		return readArr[uint8](r, n, what, et, depth)
	case Int8:
		return readArr[int8](r, n, what, et, depth)
	case Uint16:
		return readArr[uint16](r, n, what, et, depth)
	case Int16:
		return readArr[int16](r, n, what, et, depth)
	case Uint32:
		return readArr[uint32](r, n, what, et, depth)
	case Int32:
		return readArr[int32](r, n, what, et, depth)
	case Float32:
		return readArr[float32](r, n, what, et, depth)
	case Bool:
		return readArr[bool](r, n, what, et, depth)
	case String:
		return readArr[string](r, n, what, et, depth)
	case Uint64:
		return readArr[uint64](r, n, what, et, depth)
	case Int64:
		return readArr[int64](r, n, what, et, depth)
	case Float64:
		return readArr[float64](r, n, what, et, depth)
	case Array:
		return readArr[any](r, n, what, et, depth+1)
	}
	r.fail("%s: unknown array element type %d", what, uint32(et))
	return nil
}

// Read parses a GGUF file of the given size from r.
func Read(ra io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size %d", ErrInvalid, size)
	}
	r := &reader{r: bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16), size: uint64(size)}
	magic := r.bytes(4, "magic")
	if r.err != nil {
		return nil, r.err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w: bad magic %q, want %q", ErrInvalid, magic, Magic)
	}
	f := &File{r: ra, kv: map[string]int{}, tensors: map[string]int{}}
	f.Version = r.u32("version")
	if r.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: version %d is not supported (want 2 or 3)", ErrInvalid, f.Version)
	}
	nt := r.u64("tensor count")
	nkv := r.u64("metadata count")
	if r.err != nil {
		return nil, r.err
	}
	if nt > maxCount || nkv > maxCount {
		return nil, fmt.Errorf("%w: %d tensors and %d metadata entries is too many", ErrInvalid, nt, nkv)
	}
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		key := r.str(fmt.Sprintf("metadata key %d", i))
		t := ValueType(r.u32("type of " + key))
		v := r.value(t, key, 0)
		if r.err != nil {
			break
		}
		if _, dup := f.kv[key]; dup {
			return nil, fmt.Errorf("%w: metadata key %q appears twice", ErrInvalid, key)
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Type: t, Value: v})
	}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		var t TensorInfo
		t.Name = r.str(fmt.Sprintf("tensor %d name", i))
		nd := r.u32("dimension count of " + t.Name)
		if r.err != nil {
			break
		}
		if nd == 0 || nd > maxDims {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions", ErrInvalid, t.Name, nd)
		}
		for range nd {
			d := r.u64("dimension of " + t.Name)
			if d == 0 || d > 1<<40 {
				r.fail("tensor %q has dimension %d", t.Name, d)
			}
			t.Dims = append(t.Dims, d)
		}
		t.Type = TensorType(r.u32("type of " + t.Name))
		t.Offset = r.u64("offset of " + t.Name)
		if r.err != nil {
			break
		}
		n, err := t.Elements()
		if err != nil {
			return nil, err
		}
		sz, err := t.Type.RowBytes(n)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		t.Size = sz
		if _, dup := f.tensors[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q appears twice", ErrInvalid, t.Name)
		}
		f.tensors[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if r.err != nil {
		return nil, r.err
	}
	f.Alignment = DefaultAlignment
	if kv, ok := f.Get("general.alignment"); ok {
		a, ok := AsUint(kv.Value)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two", ErrInvalid, kv.Value)
		}
		if a > maxAlignment {
			return nil, fmt.Errorf("%w: general.alignment %d is larger than %d", ErrInvalid, a, maxAlignment)
		}
		f.Alignment = a
	}
	f.DataOffset = alignUp(r.off, f.Alignment)
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q offset %d is not aligned to %d", ErrInvalid, t.Name, t.Offset, f.Alignment)
		}
		if end, ok := addAll(f.DataOffset, t.Offset, t.Size); !ok || end > uint64(size) {
			if !ok {
				return nil, fmt.Errorf("%w: tensor %q at offset %d of %d bytes overflows: truncated", ErrInvalid, t.Name, t.Offset, t.Size)
			}
			return nil, fmt.Errorf("%w: tensor %q ends at byte %d, past the end of the file (%d bytes): truncated", ErrInvalid, t.Name, end, size)
		}
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// addAll is the sum of xs, and false when it does not fit in 64 bits.
func addAll(xs ...uint64) (uint64, bool) {
	var s uint64
	for _, x := range xs {
		var c uint64
		s, c = bits.Add64(s, x, 0)
		if c != 0 {
			return 0, false
		}
	}
	return s, true
}

// Get returns the metadata entry for key.
func (f *File) Get(key string) (KV, bool) {
	i, ok := f.kv[key]
	if !ok {
		return KV{}, false
	}
	return f.KV[i], true
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorBytes reads the raw bytes of a tensor.
func (f *File) TensorBytes(t TensorInfo) ([]byte, error) {
	b := make([]byte, t.Size)
	if _, err := f.r.ReadAt(b, int64(f.DataOffset+t.Offset)); err != nil {
		return nil, fmt.Errorf("read tensor %q: %w", t.Name, err)
	}
	return b, nil
}

// String returns the string value of key.
func (f *File) String(key string) (string, bool) {
	kv, ok := f.Get(key)
	if !ok {
		return "", false
	}
	s, ok := kv.Value.(string)
	return s, ok
}

// Uint returns an unsigned integer value of key (any integer type that is
// not negative).
func (f *File) Uint(key string) (uint64, bool) {
	kv, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	return AsUint(kv.Value)
}

// Float returns a float value of key (float32 or float64).
func (f *File) Float(key string) (float64, bool) {
	kv, ok := f.Get(key)
	if !ok {
		return 0, false
	}
	switch v := kv.Value.(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// AsUint converts any non-negative integer value to uint64.
func AsUint(v any) (uint64, bool) {
	var n int64
	switch v := v.(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int8:
		n = int64(v)
	case int16:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	default:
		return 0, false
	}
	if n < 0 {
		return 0, false
	}
	return uint64(n), true
}
