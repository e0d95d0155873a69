package kserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"modelplane/serveapi"
)

type v2Output struct {
	Name     string          `json:"name"`
	Datatype string          `json:"datatype"`
	Shape    []int64         `json:"shape"`
	Data     json.RawMessage `json:"data"`
}

type v2Response struct {
	ModelName string     `json:"model_name"`
	Outputs   []v2Output `json:"outputs"`
}

// v2Error is the protocol's error body.
type v2Error struct {
	Error string `json:"error"`
}

// ErrAnswer wraps every answer that cannot be translated: the runtime
// answered 200 with something that is not what the request asked for.
var ErrAnswer = errors.New("the runtime's V2 answer cannot be translated")

// Response translates the V2 answer to a request of n instances into the
// platform's predict answer (serveapi.PredictResponse), naming version, so
// that a caller and the gateway's sampler read a V2-only runtime's answers
// like the built-in runtime's.
func (t *Translator) Response(body []byte, n int, version string) ([]byte, error) {
	var r v2Response
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAnswer, err)
	}
	if len(t.features) == 0 {
		return t.tensorResponse(r, n, version)
	}
	out, labels := pickOutputs(r.Outputs)
	if out == nil {
		return nil, fmt.Errorf("%w: no numeric output", ErrAnswer)
	}
	rows, err := matrix(out, n)
	if err != nil {
		return nil, fmt.Errorf("%w: output %q: %v", ErrAnswer, out.Name, err)
	}
	var names []string
	if labels != nil {
		if names, err = strs(labels, n); err != nil {
			return nil, fmt.Errorf("%w: output %q: %v", ErrAnswer, labels.Name, err)
		}
	}
	ans := serveapi.PredictResponse[serveapi.Prediction]{Predictions: make([]serveapi.Prediction, n), ModelVersion: version}
	for i, row := range rows {
		p := t.answer(row)
		if names != nil {
			p.Label = names[i]
		}
		ans.Predictions[i] = p
	}
	return json.Marshal(ans)
}

// ErrorMessage returns the message of a V2 error body, or the body itself
// (cut short) when it is not one.
func ErrorMessage(body []byte) string {
	var e v2Error
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := string(bytes.TrimSpace(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// pickOutputs chooses the output holding the model's rows and the one
// holding labels (nil when none). Without output__0 or output, the first
// floating-point output wins over integer ones: a scikit-learn classifier
// converted to ONNX answers an INT64 label before its FP32 probabilities.
func pickOutputs(outs []v2Output) (rows, labels *v2Output) {
	var firstFloat, firstNumber *v2Output
	for i := range outs {
		o := &outs[i]
		switch {
		case o.Datatype == "BYTES":
			if o.Name == labelOutput {
				labels = o
			}
		case o.Name == OutputTensor || o.Name == builtinOutput:
			if rows == nil || o.Name == OutputTensor {
				rows = o
			}
		case floatBits[o.Datatype] > 0 && firstFloat == nil:
			firstFloat = o
		case firstNumber == nil:
			firstNumber = o
		}
	}
	switch {
	case rows != nil:
	case firstFloat != nil:
		rows = firstFloat
	default:
		rows = firstNumber
	}
	return rows, labels
}

// floatBits are the floating-point datatypes and the precision their
// values are read at: an FP32 value is read as the float32 the runtime
// computed, so that a score equals the one its /predict would give.
var floatBits = map[string]int{"FP16": 32, "BF16": 32, "FP32": 32, "FP64": 64}

// matrix reads a numeric output of shape [n] or [n, k] into n rows.
func matrix(o *v2Output, n int) ([][]float64, error) {
	k := int64(1)
	switch {
	case len(o.Shape) == 1:
	case len(o.Shape) == 2:
		k = o.Shape[1]
	default:
		return nil, fmt.Errorf("shape %v; want [%d] or [%d, K]", o.Shape, n, n)
	}
	if o.Shape[0] != int64(n) || k < 1 {
		return nil, fmt.Errorf("shape %v for %d instances", o.Shape, n)
	}
	bits := floatBits[o.Datatype]
	if bits == 0 {
		bits = 64 // integers and booleans
	}
	vals, err := flatNumbers(o.Data, bits)
	if err != nil {
		return nil, err
	}
	if int64(len(vals)) != int64(n)*k {
		return nil, fmt.Errorf("%d values for shape %v", len(vals), o.Shape)
	}
	rows := make([][]float64, n)
	for i := range rows {
		rows[i] = vals[int64(i)*k : int64(i+1)*k]
	}
	return rows, nil
}

// flatNumbers reads tensor data, flat or nested, row-major; booleans are
// 1 and 0.
func flatNumbers(raw json.RawMessage, bits int) ([]float64, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("data is not JSON")
	}
	var out []float64
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case json.Number:
			f, err := strconv.ParseFloat(string(x), bits)
			if err != nil {
				return fmt.Errorf("data holds %q", x)
			}
			out = append(out, f)
		case bool:
			out = append(out, map[bool]float64{true: 1, false: 0}[x])
		default:
			return errors.New("data must be an array of numbers")
		}
		return nil
	}
	if _, ok := v.([]any); !ok {
		return nil, errors.New("data must be an array")
	}
	return out, walk(v)
}

// strs reads a BYTES output of n strings.
func strs(o *v2Output, n int) ([]string, error) {
	var flat []string
	if err := json.Unmarshal(o.Data, &flat); err != nil {
		var nested [][]string
		if json.Unmarshal(o.Data, &nested) != nil {
			return nil, errors.New("data must be an array of strings")
		}
		for _, r := range nested {
			flat = append(flat, r...)
		}
	}
	if len(flat) != n {
		return nil, fmt.Errorf("%d labels for %d instances", len(flat), n)
	}
	return flat, nil
}

// answer maps one output row as the built-in runtime's default output
// mapping does: a classifier's positive-class probability (the last of
// one or two values) is the score, labelled by 0.5; more values are class
// probabilities, the largest winning, named by their index; a regressor's
// row is its value or values.
func (t *Translator) answer(row []float64) serveapi.Prediction {
	if t.task != TaskClassification {
		if len(row) == 1 {
			v := row[0]
			return serveapi.Prediction{Value: &v}
		}
		return serveapi.Prediction{Values: row}
	}
	if len(row) <= 2 {
		score := row[len(row)-1]
		p := serveapi.Prediction{Label: defaultClasses[0], Score: &score}
		if score >= 0.5 {
			p.Label = defaultClasses[1]
		}
		if len(row) == 2 {
			p.Probabilities = map[string]float64{defaultClasses[0]: row[0], defaultClasses[1]: score}
		}
		return p
	}
	best := 0
	p := serveapi.Prediction{Probabilities: make(map[string]float64, len(row))}
	for i, v := range row {
		p.Probabilities[strconv.Itoa(i)] = v
		if v > row[best] {
			best = i
		}
	}
	score := row[best]
	p.Label, p.Score = strconv.Itoa(best), &score
	return p
}
