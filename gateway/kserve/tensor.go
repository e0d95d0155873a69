package kserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A model that declares no feature_names is served with its own tensors
// (token ids, an embedding): each instance is an object keyed by input
// name holding one row of that input, the shape the built-in runtime's
// /predict takes for such a model. The instances' rows are stacked along a
// new first axis into one tensor per input; the datatype is read from the
// JSON, since the gateway holds no signature: strings are BYTES, booleans
// BOOL, numbers written without a fraction or exponent INT64, others FP32
// (so an FP32 input of whole numbers is sent as 1.0, not 1). Rows of
// different shapes cannot share a tensor: send them in separate requests.
// The answer's outputs are split back into rows, each prediction an object
// keyed by output name.

// tensorRequest translates a /predict body for a tensor model.
func (t *Translator) tensorRequest(body []byte, id string) ([]byte, int, error) {
	var in predictBody
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, 0, &InputError{Field: "body", Msg: "must be {\"instances\": [...]}"}
	}
	if len(in.Instances) == 0 {
		return nil, 0, &InputError{Field: "instances", Msg: "must be a non-empty array"}
	}
	type input struct {
		shape    []int64
		datatype string
		data     []json.RawMessage
	}
	inputs := map[string]*input{}
	var names []string
	for i, raw := range in.Instances {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, 0, &InputError{Field: fmt.Sprintf("instances/%d", i), Msg: "must be an object keyed by the model's inputs (the model declares no feature_names)"}
		}
		if i == 0 {
			for k := range obj {
				names = append(names, k)
			}
			sort.Strings(names)
		} else if len(obj) != len(names) {
			return nil, 0, &InputError{Field: fmt.Sprintf("instances/%d", i), Msg: "must have the same inputs as instances/0"}
		}
		for _, name := range names {
			field := fmt.Sprintf("instances/%d/%s", i, name)
			v, ok := obj[name]
			if !ok {
				return nil, 0, &InputError{Field: field, Msg: "is missing (instances/0 has it)"}
			}
			shape, flat, dt, err := flattenRow(v)
			if err != nil {
				return nil, 0, &InputError{Field: field, Msg: err.Error()}
			}
			x := inputs[name]
			if x == nil {
				x = &input{shape: shape, datatype: dt}
				inputs[name] = x
			}
			if fmt.Sprint(shape) != fmt.Sprint(x.shape) {
				return nil, 0, &InputError{Field: field, Msg: fmt.Sprintf("has shape %v where instances/0 has %v: rows of different shapes go in separate requests", shape, x.shape)}
			}
			if x.datatype != dt {
				if promote(x.datatype, dt) == "" {
					return nil, 0, &InputError{Field: field, Msg: fmt.Sprintf("holds %s where instances/0 holds %s", dt, x.datatype)}
				}
				x.datatype = promote(x.datatype, dt)
			}
			x.data = append(x.data, flat...)
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	idJSON, _ := json.Marshal(id)
	b.Write(idJSON)
	b.WriteString(`,"inputs":[`)
	for k, name := range names {
		x := inputs[name]
		if k > 0 {
			b.WriteByte(',')
		}
		shape, _ := json.Marshal(append([]int64{int64(len(in.Instances))}, x.shape...))
		nameJSON, _ := json.Marshal(name)
		fmt.Fprintf(&b, `{"name":%s,"datatype":%q,"shape":%s,"data":[`, nameJSON, x.datatype, shape)
		for j, v := range x.data {
			if j > 0 {
				b.WriteByte(',')
			}
			b.Write(v)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	return b.Bytes(), len(in.Instances), nil
}

// promote is the datatype of an input whose rows hold a and b: INT64 and
// FP32 make FP32; anything else mixed is "" (refused).
func promote(a, b string) string {
	if a == b {
		return a
	}
	if (a == "INT64" || a == "FP32") && (b == "INT64" || b == "FP32") {
		return "FP32"
	}
	return ""
}

// flattenRow reads one row: its shape, its values in row-major order and
// their datatype.
func flattenRow(raw json.RawMessage) ([]int64, []json.RawMessage, string, error) {
	var shape []int64
	var flat []json.RawMessage
	dt := ""
	note := func(t string) error {
		switch {
		case dt == "":
			dt = t
		case dt != t && promote(dt, t) != "":
			dt = promote(dt, t)
		case dt != t:
			return fmt.Errorf("mixes %s and %s values", dt, t)
		}
		return nil
	}
	var walk func(v json.RawMessage, depth int) error
	walk = func(v json.RawMessage, depth int) error {
		v = bytes.TrimSpace(v)
		if len(v) == 0 {
			return fmt.Errorf("is empty")
		}
		if v[0] == '[' {
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				return fmt.Errorf("is not a nested array of values")
			}
			if depth == len(shape) {
				shape = append(shape, int64(len(items)))
			} else if depth > len(shape) || shape[depth] != int64(len(items)) {
				return fmt.Errorf("is a ragged array: every row of a dimension must have the same length")
			}
			for _, it := range items {
				if err := walk(it, depth+1); err != nil {
					return err
				}
			}
			return nil
		}
		if depth != len(shape) {
			return fmt.Errorf("is a ragged array: every row of a dimension must have the same length")
		}
		switch {
		case v[0] == '"':
			if err := note("BYTES"); err != nil {
				return err
			}
		case string(v) == "true" || string(v) == "false":
			if err := note("BOOL"); err != nil {
				return err
			}
		case string(v) == "null" || v[0] == '{':
			return fmt.Errorf("holds %s, not a number, boolean or string", v)
		case strings.ContainsAny(string(v), ".eE"):
			if err := note("FP32"); err != nil {
				return err
			}
		default:
			if err := note("INT64"); err != nil {
				return err
			}
		}
		flat = append(flat, v)
		return nil
	}
	if err := walk(raw, 0); err != nil {
		return nil, nil, "", err
	}
	if dt == "" {
		dt = "FP32" // an empty row
	}
	if shape == nil {
		shape = []int64{}
	}
	return shape, flat, dt, nil
}

// tensorResponse translates the V2 answer to n instances of a tensor
// model into predictions keyed by output name, each the instance's row.
func (t *Translator) tensorResponse(r v2Response, n int, version string) ([]byte, error) {
	preds := make([]map[string]any, n)
	for i := range preds {
		preds[i] = map[string]any{}
	}
	for _, o := range r.Outputs {
		if len(o.Shape) == 0 || o.Shape[0] != int64(n) {
			return nil, fmt.Errorf("%w: output %q has shape %v for %d instances", ErrAnswer, o.Name, o.Shape, n)
		}
		shape, flat, _, err := flattenRow(o.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: output %q: %v", ErrAnswer, o.Name, err)
		}
		inner := o.Shape[1:]
		per := 1
		for _, d := range inner {
			per *= int(d)
		}
		if len(flat) != n*per {
			return nil, fmt.Errorf("%w: output %q holds %d values for shape %v (data nested as %v)", ErrAnswer, o.Name, len(flat), o.Shape, shape)
		}
		for i := range preds {
			preds[i][o.Name] = nest(flat[i*per:(i+1)*per], inner)
		}
	}
	return json.Marshal(struct {
		Predictions  []map[string]any `json:"predictions"`
		ModelVersion string           `json:"model_version"`
	}{preds, version})
}

// nest shapes a row's flat values.
func nest(flat []json.RawMessage, shape []int64) any {
	if len(shape) == 0 {
		return flat[0]
	}
	if len(shape) == 1 {
		return flat
	}
	n := int(shape[0])
	per := len(flat) / max(n, 1)
	out := make([]any, n)
	for i := range out {
		out[i] = nest(flat[i*per:(i+1)*per], shape[1:])
	}
	return out
}
