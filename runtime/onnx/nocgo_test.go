//go:build !cgo

package onnx

import "testing"

// TestNeedsCgo fails a CGO_ENABLED=0 test run, whose ONNX Runtime tests
// would otherwise not be compiled and pass by their absence.
func TestNeedsCgo(t *testing.T) {
	t.Fatal("runtime/onnx's tests need cgo (CGO_ENABLED=1 and a C compiler)")
}
