package kserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
)

// Tensor names of the translated call (see the package comment).
const (
	InputTensor  = "input__0"
	OutputTensor = "output__0"
	// builtinOutput is the built-in runtime's output name, and labelOutput
	// its labels'.
	builtinOutput = "output"
	labelOutput   = "label"
)

// Tasks the answer is shaped for; any other task is answered as
// regression values.
const (
	TaskClassification = "classification"
	TaskRegression     = "regression"
)

// defaultClasses name a binary classifier's classes, as the built-in
// runtime names them when a version names none.
var defaultClasses = [2]string{"negative", "positive"}

// InputError is an instance that cannot become the input tensor. Field is
// its path in the body, as the gateway's schema errors name paths.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Translator translates the calls of one version. It is immutable and safe
// for concurrent use.
type Translator struct {
	path     string
	task     string
	features []string
	index    map[string]int
}

// New returns the translator of a version served as model (the name in
// /v2/models/{model}/infer) whose model reads features in order and
// performs task.
func New(model string, features []string, task string) *Translator {
	t := &Translator{path: "/v2/models/" + url.PathEscape(model) + "/infer", task: task,
		features: features, index: make(map[string]int, len(features))}
	for i, f := range features {
		t.index[f] = i
	}
	return t
}

// Path is the replica's path for the call.
func (t *Translator) Path() string { return t.path }

type predictBody struct {
	Instances []json.RawMessage `json:"instances"`
}

// Request translates a /predict body into a V2 infer request carrying id,
// and returns it with the number of instances.
// An instance is a JSON object keyed by feature name (other keys are
// ignored) or an array of the feature values in order; a value is a
// number or a boolean (1 or 0). Anything else is an *InputError naming
// the value. A model with no feature names is served with its own
// tensors (tensor.go).
func (t *Translator) Request(body []byte, id string) ([]byte, int, error) {
	if len(t.features) == 0 {
		return t.tensorRequest(body, id)
	}
	var in predictBody
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, 0, &InputError{Field: "body", Msg: "must be {\"instances\": [...]}"}
	}
	if len(in.Instances) == 0 {
		return nil, 0, &InputError{Field: "instances", Msg: "must be a non-empty array"}
	}
	w := len(t.features)
	var b bytes.Buffer
	b.Grow(64 + len(in.Instances)*w*12)
	b.WriteString(`{"id":`)
	idJSON, _ := json.Marshal(id)
	b.Write(idJSON)
	fmt.Fprintf(&b, `,"inputs":[{"name":%q,"datatype":"FP32","shape":[%d,%d],"data":[`, InputTensor, len(in.Instances), w)
	row := make([]json.RawMessage, w)
	var num []byte
	for i, raw := range in.Instances {
		if err := t.row(raw, i, row); err != nil {
			return nil, 0, err
		}
		for j, v := range row {
			f, err := value(v)
			if err != nil {
				return nil, 0, &InputError{Field: fmt.Sprintf("instances/%d/%s", i, t.features[j]), Msg: err.Error()}
			}
			if i > 0 || j > 0 {
				b.WriteByte(',')
			}
			num = strconv.AppendFloat(num[:0], float64(f), 'g', -1, 32)
			b.Write(num)
		}
	}
	b.WriteString(`]}]}`)
	return b.Bytes(), len(in.Instances), nil
}

// row fills row with instance i's values in feature order.
func (t *Translator) row(raw json.RawMessage, i int, row []json.RawMessage) error {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) > 0 && raw[0] == '[' {
		var vals []json.RawMessage
		if err := json.Unmarshal(raw, &vals); err != nil {
			return &InputError{Field: fmt.Sprintf("instances/%d", i), Msg: "must be an object keyed by feature name or an array of the feature values"}
		}
		if len(vals) != len(row) {
			return &InputError{Field: fmt.Sprintf("instances/%d", i), Msg: fmt.Sprintf("has %d values; the model takes %d features", len(vals), len(row))}
		}
		copy(row, vals)
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return &InputError{Field: fmt.Sprintf("instances/%d", i), Msg: "must be an object keyed by feature name or an array of the feature values"}
	}
	for j, name := range t.features {
		v, ok := obj[name]
		if !ok {
			return &InputError{Field: fmt.Sprintf("instances/%d/%s", i, name), Msg: "is missing"}
		}
		row[j] = v
	}
	return nil
}

// value reads one feature value as FP32.
func value(v json.RawMessage) (float32, error) {
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "true":
		return 1, nil
	case "false":
		return 0, nil
	case "null":
		return 0, errors.New("must be a number, not null")
	}
	if len(v) > 0 && v[0] == '"' {
		return 0, errors.New("must be a number: the runtime takes one FP32 tensor, so a string (categorical) feature cannot be sent to it")
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, errors.New("must be a number")
	}
	if math.Abs(f) > math.MaxFloat32 {
		return 0, errors.New("is out of the FP32 range")
	}
	return float32(f), nil
}
