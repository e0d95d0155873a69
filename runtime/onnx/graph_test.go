package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzReadGraph feeds readGraph arbitrary bytes: a model file is outside
// input, so a malformed one must be an error, never a panic.
func FuzzReadGraph(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("this is not a protobuf"))
	// A graph with one Softmax node producing "y", and a metadata entry.
	n := protowire.AppendTag(nil, nodeOpType, protowire.BytesType)
	n = protowire.AppendString(n, "Softmax")
	n = protowire.AppendTag(n, nodeOutput, protowire.BytesType)
	n = protowire.AppendString(n, "y")
	g := protowire.AppendTag(nil, graphNode, protowire.BytesType)
	g = protowire.AppendBytes(g, n)
	e := protowire.AppendTag(nil, entryKey, protowire.BytesType)
	e = protowire.AppendString(e, MetadataOutputKind)
	m := protowire.AppendTag(nil, modelGraph, protowire.BytesType)
	m = protowire.AppendBytes(m, g)
	m = protowire.AppendTag(m, modelMetadataProps, protowire.BytesType)
	m = protowire.AppendBytes(m, e)
	f.Add(m)
	if data, err := os.ReadFile(filepath.Join(nodeTestData, "test_softmax_axis_1", "model.onnx")); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := readGraph(data)
		if err != nil {
			return
		}
		for name := range g.producers {
			_, _ = g.outputKind(name)
		}
	})
}

func TestReadGraph(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(nodeTestData, "test_softmax_axis_1", "model.onnx"))
	if err != nil {
		t.Fatalf("onnx node test data: %v (%s)", err, installHint)
	}
	g, err := readGraph(data)
	if err != nil {
		t.Fatal(err)
	}
	if n := g.producers["y"]; n.opType != "Softmax" || len(n.inputs) != 1 || n.inputs[0] != "x" {
		t.Fatalf("producer of y = %+v, want Softmax of x", n)
	}
	if _, err := readGraph([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Fatal("readGraph(truncated) succeeded")
	}
}
