package busapi

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The binary forms of messages (samples.go, usage.go) share their parts:
// every integer a varint (encoding/binary's), every float64 its IEEE 754
// bits in 8 bytes little-endian, every string its length (a uvarint) and
// its bytes, after a magic of magicLen bytes that names the form.
const magicLen = 4

// batchHead is room for a batch message's fields before its items
// (SampleBody, StatsBody).
const batchHead = 512

// body gathers the encoded items of one batch message of a gateway, up to
// BatchMaxBytes (SampleBody, StatsBody).
type body struct {
	items []byte
	n     int
}

// Len is the number of items gathered.
func (b *body) Len() int { return b.n }

// keep ends an Add whose item was appended after mark: it counts the item
// and reports true, unless b held items already and the message would
// grow past BatchMaxBytes with it, in which case it takes the item out;
// the first item always stays.
func (b *body) keep(mark int) bool {
	if b.n > 0 && batchHead+len(b.items) > BatchMaxBytes {
		b.items = b.items[:mark]
		return false
	}
	b.n++
	return true
}

// message returns the batch of the items gathered, after magic, id and
// gateway, and empties b.
func (b *body) message(magic, id, gateway string) []byte {
	data := make([]byte, 0, len(magic)+len(id)+len(gateway)+3*binary.MaxVarintLen64+len(b.items))
	data = append(data, magic...)
	data = appendString(appendString(data, id), gateway)
	data = binary.AppendUvarint(data, uint64(b.n))
	data = append(data, b.items...)
	b.items, b.n = b.items[:0], 0
	return data
}

// hasMagic reports whether data starts with magic.
func hasMagic(data []byte, magic string) bool {
	return len(data) >= len(magic) && string(data[:len(magic)]) == magic
}

// decoder reads one message's body from b, its strings from s, a copy of
// b made once, so that every string decoded is a part of that copy. The
// first error stops it (every read after returns zero values) and stays in
// err.
type decoder struct {
	b   []byte
	s   string
	i   int
	err error
}

func newDecoder(body []byte) decoder { return decoder{b: body, s: string(body)} }

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s at byte %d: truncated or malformed", what, magicLen+d.i)
	}
}

// uvarint and varint read a number of one byte, the most common, without
// a call.
func (d *decoder) uvarint() uint64 {
	if d.err == nil && d.i < len(d.b) && d.b[d.i] < 0x80 {
		d.i++
		return uint64(d.b[d.i-1])
	}
	return number(d, binary.Uvarint)
}

func (d *decoder) varint() int64 {
	if d.err == nil && d.i < len(d.b) && d.b[d.i] < 0x80 {
		d.i++
		x := int64(d.b[d.i-1])
		return x>>1 ^ -(x & 1) // zig-zag, as binary.Varint
	}
	return number(d, binary.Varint)
}

// number reads one varint with read (binary.Uvarint or binary.Varint).
func number[T uint64 | int64](d *decoder, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	x, n := read(d.b[d.i:])
	if n <= 0 {
		d.fail("a number")
		return 0
	}
	d.i += n
	return x
}

// count reads a count of parts of at least min bytes each, refusing one
// the bytes left cannot hold.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(d.left()/min) {
		d.fail("a count")
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(d.left()) {
		d.fail("a string")
		return ""
	}
	s := d.s[d.i : d.i+int(n)]
	d.i += int(n)
	return s
}

func (d *decoder) float() float64 {
	if d.err != nil || d.left() < 8 {
		d.fail("a float")
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.i:]))
	d.i += 8
	return f
}

// left is the number of bytes not read yet.
func (d *decoder) left() int { return len(d.b) - d.i }

// end fails unless every byte was read.
func (d *decoder) end(after string) error {
	if d.err == nil && d.i != len(d.b) {
		return fmt.Errorf("%d bytes after the last %s", len(d.b)-d.i, after)
	}
	return d.err
}

// arenaChunk is how many elements a new array of a decoder gets (cut).
const arenaChunk = 1024

// cut returns the next n elements of *arena, zero. When it has no room for
// them they come from a new array (the slices cut before stay in the old
// one) of chunk elements, or n if more: callers pass arenaChunk, or fewer
// when the bytes left cannot hold as many.
func cut[T any](arena *[]T, n, chunk int) []T {
	a := *arena
	if cap(a)-len(a) < n {
		a = make([]T, 0, max(n, chunk))
	}
	*arena = a[:len(a)+n]
	return a[len(a) : len(a)+n : len(a)+n]
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}
