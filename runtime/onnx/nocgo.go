//go:build !cgo

package onnx

import (
	"errors"

	"modelplane/serveapi"
)

// errNoCgo is returned by a binary built with CGO_ENABLED=0: the binding to
// ONNX Runtime is cgo, and the rest of modelplane still builds without it.
var errNoCgo = errors.New("onnx: built without cgo; ONNX models need a binary built with CGO_ENABLED=1")

// RuntimeVersion reports that this binary cannot load ONNX Runtime.
func RuntimeVersion() (string, error) { return "", errNoCgo }

// LoadWithOptions reports that this binary cannot load ONNX models.
func LoadWithOptions(string, Options) (serveapi.Model, error) { return nil, errNoCgo }

// LoadTensors reports that this binary cannot load ONNX models.
func LoadTensors(string, Options) (serveapi.TensorModel, error) { return nil, errNoCgo }
