package artifact

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Protobuf wire types used by ONNX messages.
const (
	wireVarint = 0
	wireI64    = 1
	wireBytes  = 2
	wireI32    = 5
)

// A protoSchema lists the fields a message may have, with their wire types,
// and the schemas of the nested messages the walk descends into.
type protoSchema struct {
	name   string
	fields map[uint64]int
	nested map[uint64]*protoSchema
}

// operatorSetIDSchema is onnx.OperatorSetIdProto.
var operatorSetIDSchema = &protoSchema{
	name:   "opset_import",
	fields: map[uint64]int{1: wireBytes, 2: wireVarint},
}

// graphSchema is onnx.GraphProto; its nodes and tensors are skipped.
var graphSchema = &protoSchema{
	name: "graph",
	fields: map[uint64]int{
		1: wireBytes, 2: wireBytes, 5: wireBytes, 10: wireBytes, 11: wireBytes,
		12: wireBytes, 13: wireBytes, 14: wireBytes, 15: wireBytes, 16: wireBytes,
	},
}

// modelSchema is onnx.ModelProto as of IR version 11.
var modelSchema = &protoSchema{
	name: "model",
	fields: map[uint64]int{
		1: wireVarint, 2: wireBytes, 3: wireBytes, 4: wireBytes, 5: wireVarint,
		6: wireBytes, 7: wireBytes, 8: wireBytes, 14: wireBytes, 20: wireBytes,
		25: wireBytes, 26: wireBytes,
	},
	nested: map[uint64]*protoSchema{7: graphSchema, 8: operatorSetIDSchema},
}

// maxIRVersion is well above today's ONNX IR version (11) and rules out
// a random varint.
const maxIRVersion = 100

// checkONNX reads an ONNX ModelProto of size bytes from r: every top-level
// field must be one ModelProto has, with its wire type and a length that fits;
// ir_version and graph must be present; the fields of the graph and of each
// opset_import are checked the same way. Large payloads (nodes, initializers)
// are skipped, never held.
func checkONNX(r io.Reader, size int64) error {
	c := &cursor{r: bufio.NewReaderSize(r, 32<<10)}
	seen, err := c.walk(modelSchema, size, 0)
	if err != nil {
		return err
	}
	switch {
	case seen.irVersion == 0:
		return errors.New("no ir_version")
	case !seen.fields[7]:
		return errors.New("no graph")
	}
	return nil
}

// cursor reads a protobuf stream and knows its offset.
type cursor struct {
	r   *bufio.Reader
	off int64
}

type walked struct {
	fields    map[uint64]bool
	irVersion uint64
}

// walk checks the fields of one message that ends at offset end.
func (c *cursor) walk(s *protoSchema, end int64, depth int) (walked, error) {
	seen := walked{fields: map[uint64]bool{}}
	for c.off < end {
		at := c.off
		tag, err := c.varint(end)
		if err != nil {
			return seen, fmt.Errorf("%s: field tag at offset %d: %w", s.name, at, err)
		}
		field, wire := tag>>3, int(tag&7)
		want, ok := s.fields[field]
		if !ok || want != wire {
			return seen, fmt.Errorf("%s: unexpected field %d (wire type %d) at offset %d", s.name, field, wire, at)
		}
		seen.fields[field] = true
		switch wire {
		case wireVarint:
			v, err := c.varint(end)
			if err != nil {
				return seen, fmt.Errorf("%s: field %d: %w", s.name, field, err)
			}
			if s == modelSchema && field == 1 {
				if v == 0 || v > maxIRVersion {
					return seen, fmt.Errorf("ir_version %d out of range", v)
				}
				seen.irVersion = v
			}
		case wireBytes:
			n, err := c.varint(end)
			if err != nil {
				return seen, fmt.Errorf("%s: field %d length: %w", s.name, field, err)
			}
			if n > uint64(end-c.off) {
				return seen, fmt.Errorf("%s: field %d length %d runs past the end", s.name, field, n)
			}
			if sub := s.nested[field]; sub != nil && depth < 1 {
				if _, err := c.walk(sub, c.off+int64(n), depth+1); err != nil {
					return seen, err
				}
			} else if err := c.skip(int64(n)); err != nil {
				return seen, err
			}
		}
	}
	if c.off != end {
		return seen, fmt.Errorf("%s: runs past its end", s.name)
	}
	return seen, nil
}

var errVarint = errors.New("malformed varint")

// varint reads a base-128 varint that must end before end.
func (c *cursor) varint(end int64) (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if c.off >= end {
			return 0, io.ErrUnexpectedEOF
		}
		b, err := c.r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		c.off++
		if i == 9 && b > 1 {
			return 0, errVarint
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errVarint
}

func (c *cursor) skip(n int64) error {
	for n > 0 {
		k, err := c.r.Discard(int(min(n, 1<<30)))
		c.off += int64(k)
		n -= int64(k)
		if err != nil {
			return unexpected(err)
		}
	}
	return nil
}
