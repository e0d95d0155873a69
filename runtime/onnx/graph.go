package onnx

import (
	"errors"
	"fmt"
	"strings"

	"modelplane/runtime/model"

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
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == modelGraph && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != graphNode || typ != protowire.BytesType {
					return nil
				}
				n, outputs, err := readNode(v)
				if err != nil {
					return fmt.Errorf("node: %w", err)
				}
				for _, o := range outputs {
					g.producers[o] = n
				}
				return nil
			})
		case num == modelMetadataProps && typ == protowire.BytesType:
			var key, value string
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
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
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v []byte) error {
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

// eachField calls fn with every field of a serialised message in order; v is
// the payload of a length-delimited field and nil for the other wire types,
// which no caller needs.
func eachField(data []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return errTruncated
		}
		data = data[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(data)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return errTruncated
		}
		data = data[n:]
		if err := fn(num, typ, v); err != nil {
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
		if k != model.OutputProbability && k != model.OutputValue {
			return "", fmt.Errorf("metadata %s is %q, want probability or value", MetadataOutputKind, k)
		}
		return k, nil
	}
	if strings.Contains(strings.ToLower(output), "prob") {
		return model.OutputProbability, nil
	}
	name := output
	for range len(g.producers) + 1 {
		n, ok := g.producers[name]
		if !ok || (n.domain != "" && n.domain != "ai.onnx") {
			break
		}
		if n.opType == "Softmax" || n.opType == "Sigmoid" {
			return model.OutputProbability, nil
		}
		if !passThrough[n.opType] || len(n.inputs) == 0 {
			break
		}
		name = n.inputs[0]
	}
	return model.OutputValue, nil
}
