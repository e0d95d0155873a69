//go:build cgo

package onnxgen_test

import (
	"testing"

	"modelplane/runtime/onnx"
	"modelplane/serveapi"
)

// TestONNXRuntimeRunsMLPs loads every written model in the real ONNX
// Runtime, through the built-in runtime's loader, and compares its answers
// with the Go computation of the same MLP.
func TestONNXRuntimeRunsMLPs(t *testing.T) {
	t.Parallel()
	if _, err := onnx.RuntimeVersion(); err != nil {
		t.Fatalf("onnx runtime: %v (%s)", err, installHint)
	}
	dir := t.TempDir()
	for i, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			m, err := onnx.Load(write(t, dir, i, c))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got := m.NumFeatures(); got != c.inputs {
				t.Errorf("NumFeatures() = %d, want %d", got, c.inputs)
			}
			last := c.layers[len(c.layers)-1]
			wantKind := serveapi.OutputValue
			if last.Activation == "Sigmoid" {
				wantKind = serveapi.OutputProbability
			}
			if got := m.OutputKind(); got != wantKind {
				t.Errorf("OutputKind() = %q, want %q", got, wantKind)
			}
			rows := randomRows(uint64(100+i), 33, c.inputs)
			got, err := m.Predict(rows)
			if err != nil {
				t.Fatal(err)
			}
			want := forward(c, rows)
			for r := range want {
				if len(got[r]) != len(want[r]) {
					t.Fatalf("row %d: %d values, want %d", r, len(got[r]), len(want[r]))
				}
				for j := range want[r] {
					if !near(got[r][j], want[r][j]) {
						t.Errorf("row %d[%d]: ONNX Runtime %v, Go %v", r, j, got[r][j], want[r][j])
					}
				}
			}
		})
	}
}
