package onnx

import (
	"errors"
	"fmt"
	"strings"

	"modelplane/serveapi"

	"google.golang.org/protobuf/encoding/protowire"
)

// graph is what Load reads from the model file itself, beyond what ONNX
// Runtime reports: the node producing each value and the model's metadata.
// ONNX Runtime's C API does not expose the graph's nodes, so the file's
// protobuf is walked here; only the few fields needed are decoded and the
// rest (weights included) are skipped.
type graph struct {
	// producers maps a value's name to the node that outputs it.
	producers map[string]node
	// metadata is ModelProto.metadata_props.
	metadata map[string]string
	// inputs are the graph's inputs that no initializer fills, and outputs
	// its outputs, as declared in the file: what ONNX Runtime reports of a
	// session, read without loading the model a second time.
	inputs, outputs []valueInfo
}

// valueInfo is a graph input's or output's declared type: tensor is false
// for a sequence, map or other non-tensor value; elemType is
// TensorProto.DataType (1 is float); a dimension without a fixed size is -1.
type valueInfo struct {
	name     string
	tensor   bool
	elemType int
	dims     []int64
	// shaped is false when the file declares no shape at all (any rank),
	// as opposed to a scalar's empty one.
	shaped bool
	// params are the symbolic names of dynamic dimensions ("batch"),
	// "" for a fixed or unnamed one, one per dimension.
	params []string
}

// node is the part of a NodeProto the output kind needs.
type node struct {
	opType string
	domain string
	inputs []string
}

// Field numbers of onnx.proto (ModelProto, GraphProto, NodeProto,
// StringStringEntryProto), which are stable across ONNX versions.
const (
	modelGraph         = 7
	modelMetadataProps = 14
	graphNode          = 1
	graphInitializer   = 5
	graphInput         = 11
	graphOutput        = 12
	tensorName         = 8
	valueInfoName      = 1
	valueInfoType      = 2
	typeTensor         = 1
	tensorElemType     = 1
	tensorShape        = 2
	shapeDim           = 1
	dimValue           = 1
	dimParam           = 2
	nodeInput          = 1
	nodeOutput         = 2
	nodeOpType         = 4
	nodeDomain         = 7
	entryKey           = 1
	entryValue         = 2
)

var errTruncated = errors.New("truncated protobuf")

// readGraph decodes the node list and metadata of a serialised ModelProto.
func readGraph(data []byte) (graph, error) {
	g := graph{producers: map[string]node{}, metadata: map[string]string{}}
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == modelGraph && typ == protowire.BytesType:
			var inputs []valueInfo
			initialized := map[string]bool{}
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if typ != protowire.BytesType {
					return nil
				}
				switch num {
				case graphNode:
					n, outputs, err := readNode(v)
					if err != nil {
						return fmt.Errorf("node: %w", err)
					}
					for _, o := range outputs {
						g.producers[o] = n
					}
				case graphInitializer:
					return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
						if num == tensorName && typ == protowire.BytesType {
							initialized[string(v)] = true
						}
						return nil
					})
				case graphInput, graphOutput:
					vi, err := readValueInfo(v)
					if err != nil {
						return fmt.Errorf("value info: %w", err)
					}
					if num == graphInput {
						inputs = append(inputs, vi)
					} else {
						g.outputs = append(g.outputs, vi)
					}
				}
				return nil
			})
			for _, in := range inputs {
				if !initialized[in.name] {
					g.inputs = append(g.inputs, in)
				}
			}
			return err
		case num == modelMetadataProps && typ == protowire.BytesType:
			var key, value string
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if typ == protowire.BytesType && num == entryKey {
					key = string(v)
				} else if typ == protowire.BytesType && num == entryValue {
					value = string(v)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("metadata_props: %w", err)
			}
			g.metadata[key] = value
		}
		return nil
	})
	if err != nil {
		return graph{}, fmt.Errorf("read onnx model: %w", err)
	}
	return g, nil
}

func readNode(data []byte) (node, []string, error) {
	var n node
	var outputs []string
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case nodeInput:
			n.inputs = append(n.inputs, string(v))
		case nodeOutput:
			outputs = append(outputs, string(v))
		case nodeOpType:
			n.opType = string(v)
		case nodeDomain:
			n.domain = string(v)
		}
		return nil
	})
	return n, outputs, err
}

// elemFloat is TensorProto.DataType FLOAT, the only element type a row of
// features or an answer may have.
const elemFloat = 1

// elemTypeNames are onnx.proto's names of TensorProto.DataType values.
var elemTypeNames = []string{"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
	"BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"}

func elemTypeName(t int) string {
	if t >= 0 && t < len(elemTypeNames) {
		return elemTypeNames[t]
	}
	return fmt.Sprintf("element type %d", t)
}

// readValueInfo decodes a ValueInfoProto's name and tensor type.
func readValueInfo(data []byte) (valueInfo, error) {
	var vi valueInfo
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == valueInfoName && typ == protowire.BytesType:
			vi.name = string(v)
		case num == valueInfoType && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if num != typeTensor || typ != protowire.BytesType {
					return nil
				}
				vi.tensor = true
				return readTensorType(v, &vi)
			})
		}
		return nil
	})
	return vi, err
}

// readTensorType decodes TypeProto.Tensor: the element type and the shape.
func readTensorType(data []byte, vi *valueInfo) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == tensorElemType && typ == protowire.VarintType:
			vi.elemType = int(x)
		case num == tensorShape && typ == protowire.BytesType:
			vi.shaped = true
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if num != shapeDim || typ != protowire.BytesType {
					return nil
				}
				size := int64(-1)
				param := ""
				err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
					if num == dimValue && typ == protowire.VarintType {
						size = int64(x)
					}
					if num == dimParam && typ == protowire.BytesType {
						param = string(v)
					}
					return nil
				})
				vi.dims = append(vi.dims, size)
				vi.params = append(vi.params, param)
				return err
			})
		}
		return nil
	})
}

// eachField calls fn with every field of a serialised message in order; v is
// the payload of a length-delimited field and x the value of a varint one
// (nil and 0 otherwise); fixed-width values no caller needs are skipped.
func eachField(data []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return errTruncated
		}
		data = data[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(data)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return errTruncated
		}
		data = data[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// passThrough are the operators that change a tensor's shape but not its
// values, which outputKind looks through to find the operator that made them
// (a classifier exported as Softmax then Reshape is still a classifier).
var passThrough = map[string]bool{
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true,
}

// MetadataOutputKind is the key of ModelProto.metadata_props that states a
// model's output kind explicitly ("probability" or "value").
const MetadataOutputKind = "modelplane.output_kind"

// outputKind decides what the values of output mean, by the rules of the
// package documentation.
func (g graph) outputKind(output string) (string, error) {
	if k, ok := g.metadata[MetadataOutputKind]; ok {
		if k != serveapi.OutputProbability && k != serveapi.OutputValue {
			return "", fmt.Errorf("metadata %s is %q, want probability or value", MetadataOutputKind, k)
		}
		return k, nil
	}
	if strings.Contains(strings.ToLower(output), "prob") {
		return serveapi.OutputProbability, nil
	}
	name := output
	for range len(g.producers) + 1 {
		n, ok := g.producers[name]
		if !ok || (n.domain != "" && n.domain != "ai.onnx") {
			break
		}
		if n.opType == "Softmax" || n.opType == "Sigmoid" {
			return serveapi.OutputProbability, nil
		}
		if !passThrough[n.opType] || len(n.inputs) == 0 {
			break
		}
		name = n.inputs[0]
	}
	return serveapi.OutputValue, nil
}
