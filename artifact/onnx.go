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
// and the schemas of the nested messages the walk descends into. A lenient
// schema skips fields it does not list (the walk descends into it only to
// find tensors, not to check its shape).
type protoSchema struct {
	name    string
	fields  map[uint64]int
	nested  map[uint64]*protoSchema
	lenient bool
}

// The messages that can hold a TensorProto, walked to find every tensor
// whose data lives in another file (external data): ONNX Runtime opens
// that file by the path the tensor names, relative to the model's
// directory, whatever it is. The schemas are wired in init (they nest).
var (
	nodeSchema         = &protoSchema{name: "node", lenient: true}
	attributeSchema    = &protoSchema{name: "attribute", lenient: true}
	functionSchema     = &protoSchema{name: "function", lenient: true}
	trainingInfoSchema = &protoSchema{name: "training_info", lenient: true}
	sparseTensorSchema = &protoSchema{name: "sparse_tensor", lenient: true}
	tensorSchema       = &protoSchema{name: "tensor", lenient: true}
	// entrySchema is StringStringEntryProto, a tensor's external_data.
	entrySchema = &protoSchema{name: "external_data", lenient: true}
)

func init() {
	graphSchema.nested = map[uint64]*protoSchema{1: nodeSchema, 5: tensorSchema, 15: sparseTensorSchema}
	modelSchema.nested[20] = trainingInfoSchema
	modelSchema.nested[25] = functionSchema
	nodeSchema.nested = map[uint64]*protoSchema{5: attributeSchema}
	attributeSchema.nested = map[uint64]*protoSchema{5: tensorSchema, 6: graphSchema, 10: tensorSchema,
		11: graphSchema, 22: sparseTensorSchema, 23: sparseTensorSchema}
	functionSchema.nested = map[uint64]*protoSchema{7: nodeSchema}
	trainingInfoSchema.nested = map[uint64]*protoSchema{1: graphSchema, 2: graphSchema}
	sparseTensorSchema.nested = map[uint64]*protoSchema{1: tensorSchema, 2: tensorSchema}
	tensorSchema.nested = map[uint64]*protoSchema{13: entrySchema}
}

// Bounds of the walk: how deep messages may nest (subgraphs of If and Loop
// nodes nest graphs), and the longest external_data key or value read.
const (
	maxONNXDepth    = 48
	maxExternalText = 4096
)

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
	_, err := walkONNX(r, size)
	return err
}

// walkONNX is checkONNX that also returns the external data files the
// model's tensors name (the "location" of their external_data), each once,
// as written in the file. Every node, attribute, subgraph, function and
// training graph is walked to find them; only their tensors' payloads are
// skipped.
func walkONNX(r io.Reader, size int64) ([]string, error) {
	c := &cursor{r: bufio.NewReaderSize(r, 32<<10), seen: map[string]bool{}}
	seen, err := c.walk(modelSchema, size, 0)
	if err != nil {
		return nil, err
	}
	switch {
	case seen.irVersion == 0:
		return nil, errors.New("no ir_version")
	case !seen.fields[7]:
		return nil, errors.New("no graph")
	}
	return c.external, nil
}

// cursor reads a protobuf stream and knows its offset.
type cursor struct {
	r        *bufio.Reader
	off      int64
	external []string // external data locations, in the order first met
	seen     map[string]bool
}

type walked struct {
	fields     map[uint64]bool
	irVersion  uint64
	key, value string // of an external_data entry
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
		if sub := s.nested[field]; s.lenient && sub != nil {
			want, ok = wireBytes, true
		} else if s.lenient && !ok && field != 0 {
			want, ok = wire, true
		}
		if !ok || want != wire {
			return seen, fmt.Errorf("%s: unexpected field %d (wire type %d) at offset %d", s.name, field, wire, at)
		}
		seen.fields[field] = true
		switch wire {
		case wireI64:
			if err := c.skipIn(8, end); err != nil {
				return seen, fmt.Errorf("%s: field %d: %w", s.name, field, err)
			}
		case wireI32:
			if err := c.skipIn(4, end); err != nil {
				return seen, fmt.Errorf("%s: field %d: %w", s.name, field, err)
			}
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
			switch sub := s.nested[field]; {
			case sub != nil:
				if depth >= maxONNXDepth {
					return seen, fmt.Errorf("%s: messages nested more than %d deep", s.name, maxONNXDepth)
				}
				w, err := c.walk(sub, c.off+int64(n), depth+1)
				if err != nil {
					return seen, err
				}
				if sub == entrySchema && w.key == "location" {
					if !c.seen[w.value] {
						c.seen[w.value] = true
						c.external = append(c.external, w.value)
					}
				}
			case s == entrySchema && (field == 1 || field == 2):
				if n > maxExternalText {
					return seen, fmt.Errorf("%s: field %d of %d bytes is too long", s.name, field, n)
				}
				b := make([]byte, n)
				if _, err := io.ReadFull(c.r, b); err != nil {
					return seen, unexpected(err)
				}
				c.off += int64(n)
				if field == 1 {
					seen.key = string(b)
				} else {
					seen.value = string(b)
				}
			default:
				if err := c.skip(int64(n)); err != nil {
					return seen, err
				}
			}
		default:
			if !s.lenient {
				break
			}
			return seen, fmt.Errorf("%s: field %d has wire type %d", s.name, field, wire)
		}
	}
	if c.off != end {
		return seen, fmt.Errorf("%s: runs past its end", s.name)
	}
	return seen, nil
}

// skipIn skips n bytes that must end before end.
func (c *cursor) skipIn(n, end int64) error {
	if end-c.off < n {
		return io.ErrUnexpectedEOF
	}
	return c.skip(n)
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
