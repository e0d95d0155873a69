//go:build cgo

package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"modelplane/serveapi"
)

// environment initialises ONNX Runtime once per process: onnxruntime_go keeps
// one global environment, and a second InitializeEnvironment is an error. A
// failure is kept, so every Load reports the same reason.
var environment = sync.OnceValues(func() (string, error) {
	path, err := LibraryPath()
	if err != nil {
		return "", err
	}
	if err := checkLibrary(path); err != nil {
		return "", err
	}
	ort.SetSharedLibraryPath(path)
	// Warnings (an unused initializer, say) would go to the runtime's
	// stderr on every load; errors are returned to the caller anyway.
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return "", fmt.Errorf("initialise onnx runtime from %s: %w", path, err)
	}
	return ort.GetVersion(), nil
})

// RuntimeVersion initialises the environment if needed and returns the
// version of the ONNX Runtime library loaded, for logs and the runtime's
// model metadata.
func RuntimeVersion() (string, error) {
	return environment()
}

// LoadWithOptions opens the ONNX model at path, checks it is a supported
// model (see the package documentation) and prepares a session that scores
// batches of any size.
func LoadWithOptions(path string, opts Options) (serveapi.Model, error) {
	if _, err := environment(); err != nil {
		return nil, err
	}
	if opts.IntraOpThreads < 0 {
		return nil, fmt.Errorf("onnx: intra-op threads %d, want 0 or more", opts.IntraOpThreads)
	}
	threads := opts.IntraOpThreads
	if threads == 0 {
		threads = 1
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(threads); err != nil {
		return nil, fmt.Errorf("onnx: intra-op threads: %w", err)
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: inter-op threads: %w", err)
	}
	// The input and output are read from the file, so the model is loaded
	// into ONNX Runtime once: the session is its own check of the model,
	// and a bad graph or an unknown operator fails there with its message.
	// A file that is not a model gets ONNX Runtime's word for it too.
	// Loading by path, not from data, lets ONNX Runtime find weights stored
	// beside the file.
	g, err := readGraph(data)
	if err != nil {
		if _, _, oerr := ort.GetInputOutputInfoWithOptions(path, so); oerr != nil {
			return nil, refused(path, oerr)
		}
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	in, err := pickInput(g.inputs)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	out, width, err := pickOutput(g.outputs)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	kind, err := g.outputKind(out.name)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Base(path), err)
	}
	sess, err := ort.NewDynamicAdvancedSession(path, []string{in.name}, []string{out.name}, so)
	if err != nil {
		return nil, refused(path, err)
	}
	return &onnxModel{
		sess:     sess,
		features: int(in.dims[1]),
		width:    width,
		rank:     len(out.dims),
		kind:     kind,
	}, nil
}

// bindingPrefixes are the words onnxruntime_go puts before ONNX Runtime's
// own message when a session cannot be made; users read the message as the
// reason their version is invalid, so only ONNX Runtime's words are kept.
var bindingPrefixes = []string{
	"Error loading temporary session: ",
	"Error creating C session from file: ",
}

// refused is the error of a model ONNX Runtime would not load.
func refused(path string, err error) error {
	msg := err.Error()
	for _, p := range bindingPrefixes {
		msg = strings.TrimPrefix(msg, p)
	}
	return fmt.Errorf("onnx runtime refused %s: %s", filepath.Base(path), msg)
}

// pickInput checks the model has the one input a feature row fills.
func pickInput(inputs []valueInfo) (valueInfo, error) {
	if len(inputs) != 1 {
		return valueInfo{}, fmt.Errorf("model has %d inputs, want 1 of shape [batch, features]", len(inputs))
	}
	in := inputs[0]
	if !in.tensor {
		return in, fmt.Errorf("input %q is not a tensor, want a float tensor", in.name)
	}
	if in.elemType != elemFloat {
		return in, fmt.Errorf("input %q holds %s, want float", in.name, elemTypeName(in.elemType))
	}
	if len(in.dims) != 2 {
		return in, fmt.Errorf("input %q has shape %v, want [batch, features]", in.name, in.dims)
	}
	if in.dims[0] > 0 {
		return in, fmt.Errorf("input %q has shape %v: the batch dimension must be dynamic", in.name, in.dims)
	}
	if in.dims[1] <= 0 {
		return in, fmt.Errorf("input %q has shape %v: the feature count must be fixed", in.name, in.dims)
	}
	return in, nil
}

// pickOutput finds the model's one float output and its row width (0 when
// the width is only known after a run).
func pickOutput(outputs []valueInfo) (valueInfo, int, error) {
	var found []valueInfo
	for _, o := range outputs {
		if o.tensor && o.elemType == elemFloat {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return valueInfo{}, 0, fmt.Errorf("model has %d float outputs among %d, want 1 of shape [batch, K] or [batch]",
			len(found), len(outputs))
	}
	out := found[0]
	switch {
	case len(out.dims) == 1:
		return out, 1, nil
	case len(out.dims) == 2 && out.dims[1] > 0:
		return out, int(out.dims[1]), nil
	case len(out.dims) == 2:
		return out, 0, nil
	}
	return out, 0, fmt.Errorf("output %q has shape %v, want [batch, K] or [batch]", out.name, out.dims)
}

// onnxModel is a serveapi.Model over one ONNX Runtime session.
type onnxModel struct {
	mu       sync.Mutex
	sess     *ort.DynamicAdvancedSession
	features int
	width    int // 0: known only from the output of a run
	rank     int
	kind     string
}

func (m *onnxModel) NumFeatures() int   { return m.features }
func (m *onnxModel) OutputKind() string { return m.kind }

// Predict runs all rows as one batch through the session.
func (m *onnxModel) Predict(rows [][]float32) ([][]float32, error) {
	flat := make([]float32, 0, len(rows)*m.features)
	for i, r := range rows {
		if len(r) != m.features {
			return nil, fmt.Errorf("row %d has %d values, want %d", i, len(r), m.features)
		}
		flat = append(flat, r...)
	}
	if len(rows) == 0 {
		return [][]float32{}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil, errors.New("onnx: model is closed")
	}
	input, err := ort.NewTensor(ort.NewShape(int64(len(rows)), int64(m.features)), flat)
	if err != nil {
		return nil, fmt.Errorf("onnx: input tensor: %w", err)
	}
	defer input.Destroy()
	outputs := []ort.Value{nil}
	if err := m.sess.Run([]ort.Value{input}, outputs); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer outputs[0].Destroy()
	out, ok := outputs[0].(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("onnx: output is %T, want a float tensor", outputs[0])
	}
	shape := out.GetShape()
	width := 1
	if len(shape) == 2 {
		width = int(shape[1])
	}
	if len(shape) != m.rank || shape[0] != int64(len(rows)) || (m.width != 0 && width != m.width) || width < 1 {
		return nil, fmt.Errorf("onnx: output shape %v for %d rows", shape, len(rows))
	}
	data := out.GetData()
	// One backing array for all rows: the batch is freed at once.
	res := make([][]float32, len(rows))
	buf := make([]float32, len(data))
	copy(buf, data)
	for i := range res {
		res[i] = buf[i*width : (i+1)*width : (i+1)*width]
	}
	return res, nil
}

// Close destroys the session; a second Close does nothing.
func (m *onnxModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil
	}
	err := m.sess.Destroy()
	m.sess = nil
	if err != nil {
		return fmt.Errorf("onnx: close: %w", err)
	}
	return nil
}
