package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"modelplane/serveapi"
)

// The V2 (Open Inference protocol) tensors of the built-in runtime. A
// request carries either
//
//   - one numeric input named matrixInput (any name that is not a
//     feature's is read so) of shape [N, W]: N rows of the model's W input
//     columns as the model reads them (categorical features already
//     encoded), the shape Triton serves a tabular model with; or
//   - one input per feature, named by the feature, of shape [N] or [N, 1]:
//     numbers for a numeric feature, BYTES (strings) for a categorical one,
//     which the runtime encodes as /predict does.
//
// data is row-major, flat or nested. The answer has output matrixOutput,
// FP32 [N, K], the model's output rows, and for a classifier labelOutput,
// BYTES [N], the label /predict would give.
const (
	matrixInput  = "input"
	matrixOutput = "output"
	labelOutput  = "label"
)

type v2Tensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Data       json.RawMessage `json:"data"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

type v2Request struct {
	ID         string          `json:"id,omitempty"`
	Inputs     []v2Tensor      `json:"inputs"`
	Outputs    json.RawMessage `json:"outputs,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

type v2Output struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Data     any     `json:"data"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version,omitempty"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type v2ModelMetadata struct {
	Name     string         `json:"name"`
	Versions []string       `json:"versions,omitempty"`
	Platform string         `json:"platform"`
	Inputs   []v2TensorMeta `json:"inputs"`
	Outputs  []v2TensorMeta `json:"outputs"`
}

// v2Error is the protocol's error body.
func v2Error(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeJSON(w, status, map[string]string{"error": msg})
}

func (s *Server) serverMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"name": "modelplane-runtime", "version": "1", "extensions": []string{}})
}

func (s *Server) modelMetadata(w http.ResponseWriter, r *http.Request, l *loaded) {
	if l.tensors != nil {
		md := v2ModelMetadata{Name: l.cfg.Model, Platform: l.cfg.Format}
		if l.cfg.Version != "" {
			md.Versions = []string{l.cfg.Version}
		}
		metadataTensors(&md, l.tensors)
		writeJSON(w, http.StatusOK, md)
		return
	}
	md := v2ModelMetadata{Name: l.cfg.Model, Platform: l.cfg.Format,
		Inputs:  []v2TensorMeta{{Name: matrixInput, Datatype: "FP32", Shape: []int64{-1, int64(l.enc.width)}}},
		Outputs: []v2TensorMeta{{Name: matrixOutput, Datatype: "FP32", Shape: []int64{-1, -1}}}}
	if l.cfg.Version != "" {
		md.Versions = []string{l.cfg.Version}
	}
	if k := l.outWidth.Load(); k > 0 {
		md.Outputs[0].Shape[1] = k
	}
	if l.dec.kind == serveapi.OutputProbability {
		md.Outputs = append(md.Outputs, v2TensorMeta{Name: labelOutput, Datatype: "BYTES", Shape: []int64{-1}})
	}
	writeJSON(w, http.StatusOK, md)
}

// infer answers POST /v2/models/{model}/infer.
func (s *Server) infer(w http.ResponseWriter, r *http.Request, l *loaded) {
	body, ok := s.readBody(w, r, v2Error)
	if !ok {
		l.metrics.failed(reasonOther)
		return
	}
	var req v2Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		l.metrics.failed(reasonOther)
		v2Error(w, http.StatusBadRequest, "body must be a V2 inference request: "+jsonProblem(err))
		return
	}
	if l.tensors != nil {
		s.inferTensors(w, r, l, req)
		return
	}
	rows, err := s.tensorRows(l, req.Inputs)
	if err != nil {
		l.metrics.failed(reasonOther)
		v2Error(w, http.StatusBadRequest, err.Error())
		return
	}
	res, f := s.run(r.Context(), l, rows)
	if f != nil {
		s.answerFailure(w, f, v2Error)
		return
	}
	k := len(res.Outputs[0])
	flat := make([]float32, 0, len(rows)*k)
	var labels []string
	for _, row := range res.Outputs {
		if len(row) != k {
			v2Error(w, http.StatusInternalServerError, "the model returned rows of different widths")
			return
		}
		flat = append(flat, row...)
		if l.dec.kind == serveapi.OutputProbability {
			a, err := l.dec.answer(row)
			if err != nil {
				v2Error(w, http.StatusInternalServerError, "the model's output does not fit its output mapping")
				return
			}
			labels = append(labels, a.Label)
		}
	}
	n := int64(len(rows))
	out := v2Response{ModelName: l.cfg.Model, ModelVersion: l.cfg.Version, ID: req.ID,
		Outputs: []v2Output{{Name: matrixOutput, Datatype: "FP32", Shape: []int64{n, int64(k)}, Data: flat}}}
	if labels != nil {
		out.Outputs = append(out.Outputs, v2Output{Name: labelOutput, Datatype: "BYTES", Shape: []int64{n}, Data: labels})
	}
	writeJSON(w, http.StatusOK, out)
}

// numericTypes are the V2 datatypes read as numbers.
var numericTypes = map[string]bool{
	"BOOL": true, "UINT8": true, "UINT16": true, "UINT32": true, "UINT64": true,
	"INT8": true, "INT16": true, "INT32": true, "INT64": true, "FP16": true, "FP32": true, "FP64": true, "BF16": true,
}

// tensorRows reads a V2 request's inputs into model rows. Its errors name
// the input at fault.
func (s *Server) tensorRows(l *loaded, inputs []v2Tensor) ([][]float32, error) {
	if len(inputs) == 0 {
		return nil, errors.New("inputs: at least one input is required")
	}
	if len(inputs) == 1 {
		if _, isFeature := l.enc.byKey[inputs[0].Name]; !isFeature {
			return s.matrixRows(l, &inputs[0])
		}
	}
	return s.featureRows(l, inputs)
}

func (s *Server) matrixRows(l *loaded, in *v2Tensor) ([][]float32, error) {
	field := fmt.Sprintf("inputs[%q]", in.Name)
	if !numericTypes[in.Datatype] {
		return nil, fmt.Errorf("%s: datatype %q is not numeric; the model reads FP32", field, in.Datatype)
	}
	w := int64(l.enc.width)
	if len(in.Shape) != 2 || in.Shape[1] != w || in.Shape[0] < 1 {
		return nil, fmt.Errorf("%s: shape %v; want [N, %d] (or one input per feature, named by the features)", field, in.Shape, w)
	}
	n := in.Shape[0]
	if n > int64(s.opt.MaxInstances) {
		return nil, fmt.Errorf("%s: at most %d rows per request", field, s.opt.MaxInstances)
	}
	vals, err := flatten(in.Data, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if int64(len(vals)) != n*w {
		return nil, fmt.Errorf("%s: data has %d values; shape %v needs %d", field, len(vals), in.Shape, n*w)
	}
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, w)
		for j := range rows[i] {
			f, err := tensorNumber(vals[int64(i)*w+int64(j)])
			if err != nil {
				return nil, fmt.Errorf("%s: data[%d]: %w", field, int64(i)*w+int64(j), err)
			}
			rows[i][j] = f
		}
	}
	return rows, nil
}

func (s *Server) featureRows(l *loaded, inputs []v2Tensor) ([][]float32, error) {
	byName := make(map[string]*v2Tensor, len(inputs))
	for i := range inputs {
		in := &inputs[i]
		if _, ok := l.enc.byKey[in.Name]; !ok {
			return nil, fmt.Errorf("inputs[%q]: not a feature of the model; send one input per feature or one %q input of shape [N, %d]", in.Name, matrixInput, l.enc.width)
		}
		if byName[in.Name] != nil {
			return nil, fmt.Errorf("inputs[%q]: sent twice", in.Name)
		}
		byName[in.Name] = in
	}
	n := int64(-1)
	var rows [][]float32
	for ci := range l.enc.cols {
		c := &l.enc.cols[ci]
		in := byName[c.name]
		field := fmt.Sprintf("inputs[%q]", c.name)
		if in == nil {
			return nil, fmt.Errorf("%s: is missing", field)
		}
		if len(in.Shape) == 0 || len(in.Shape) > 2 || len(in.Shape) == 2 && in.Shape[1] != 1 || in.Shape[0] < 1 {
			return nil, fmt.Errorf("%s: shape %v; want [N] or [N, 1]", field, in.Shape)
		}
		if n < 0 {
			n = in.Shape[0]
			if n > int64(s.opt.MaxInstances) {
				return nil, fmt.Errorf("%s: at most %d rows per request", field, s.opt.MaxInstances)
			}
			rows = make([][]float32, n)
			for i := range rows {
				rows[i] = make([]float32, l.enc.width)
			}
		} else if in.Shape[0] != n {
			return nil, fmt.Errorf("%s: %d rows where the other inputs have %d", field, in.Shape[0], n)
		}
		categorical := c.categories != nil
		switch {
		case categorical && in.Datatype != "BYTES":
			return nil, fmt.Errorf("%s: a categorical feature takes BYTES, not %q", field, in.Datatype)
		case !categorical && !numericTypes[in.Datatype]:
			return nil, fmt.Errorf("%s: a numeric feature takes a numeric datatype, not %q", field, in.Datatype)
		}
		vals, err := flatten(in.Data, categorical)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if int64(len(vals)) != n {
			return nil, fmt.Errorf("%s: data has %d values; shape %v needs %d", field, len(vals), in.Shape, n)
		}
		for i, v := range vals {
			at := fmt.Sprintf("%s.data[%d]", field, i)
			if categorical {
				if err := l.enc.category(rows[i], c, v.(string), at); err != nil {
					return nil, err
				}
				continue
			}
			f, err := tensorNumber(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			rows[i][c.at] = f
		}
	}
	return rows, nil
}

// flatten reads a tensor's data, flat or nested, row-major, as numbers
// (json.Number or bool) or, for BYTES, strings.
func flatten(raw json.RawMessage, strs bool) ([]any, error) {
	if len(raw) == 0 {
		return nil, errors.New("data is required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("data: " + jsonProblem(err))
	}
	var out []any
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case string:
			if !strs {
				return errors.New("data holds a string where numbers are due")
			}
			out = append(out, x)
		case json.Number, bool:
			if strs {
				return errors.New("data holds a number where strings (BYTES) are due")
			}
			out = append(out, x)
		default:
			return errors.New("data must be an array of numbers, or of strings for BYTES")
		}
		return nil
	}
	if _, ok := v.([]any); !ok {
		return nil, errors.New("data must be an array")
	}
	if err := walk(v); err != nil {
		return nil, err
	}
	return out, nil
}

func tensorNumber(v any) (float32, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case json.Number:
		return parseFloat32(strings.TrimSpace(string(x)))
	}
	return 0, errors.New("must be a number")
}
