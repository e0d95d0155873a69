package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"modelplane/serveapi"
)

// Feature encodings of categorical features (serveapi.Feature.Encoding).
const (
	encodingOneHot = "onehot"
	encodingNative = "native"
)

// column is one feature's place in a model row.
type column struct {
	name string
	// at is the feature's first column; categories are set for a
	// categorical feature, whose index maps each to its position.
	at         int
	categories []string
	index      map[string]int
	onehot     bool
}

// encoder turns instances into model rows in the order Features gives.
type encoder struct {
	cols  []column
	byKey map[string]int // feature name → position in cols
	width int
}

// newEncoder checks the features and lays out their columns.
func newEncoder(features []serveapi.Feature) (*encoder, error) {
	if len(features) == 0 {
		return nil, errors.New("features: at least one is required")
	}
	e := &encoder{byKey: make(map[string]int, len(features))}
	for i, f := range features {
		if f.Name == "" {
			return nil, fmt.Errorf("features[%d]: name is required", i)
		}
		if _, dup := e.byKey[f.Name]; dup {
			return nil, fmt.Errorf("features[%d]: %q is named twice", i, f.Name)
		}
		c := column{name: f.Name, at: e.width}
		switch {
		case len(f.Categories) == 0:
			if f.Encoding != "" {
				return nil, fmt.Errorf("features[%d] (%s): encoding %q needs categories", i, f.Name, f.Encoding)
			}
			e.width++
		case f.Encoding == "" || f.Encoding == encodingOneHot:
			c.onehot = true
			e.width += len(f.Categories)
		case f.Encoding == encodingNative:
			e.width++
		default:
			return nil, fmt.Errorf("features[%d] (%s): encoding %q is neither %q nor %q", i, f.Name, f.Encoding, encodingOneHot, encodingNative)
		}
		if len(f.Categories) > 0 {
			c.categories = slices.Clone(f.Categories)
			c.index = make(map[string]int, len(f.Categories))
			for j, cat := range f.Categories {
				if _, dup := c.index[cat]; dup {
					return nil, fmt.Errorf("features[%d] (%s): category %q is listed twice", i, f.Name, cat)
				}
				c.index[cat] = j
			}
		}
		e.byKey[f.Name] = len(e.cols)
		e.cols = append(e.cols, c)
	}
	return e, nil
}

// fieldError is an input error that names the field at fault; its message
// is safe to show the caller.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// instance reads one instance, a JSON object keyed by feature name (other
// keys are ignored: callers often send ids beside the features) or an
// array of the features' values in order, into a row. where names the
// instance in errors, as in "instances[3]".
func (e *encoder) instance(raw json.RawMessage, where string) ([]float32, error) {
	row := make([]float32, e.width)
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) > 0 && raw[0] == '[' {
		var vals []json.RawMessage
		if err := json.Unmarshal(raw, &vals); err != nil {
			return nil, &fieldError{where, "must be a JSON object keyed by feature name or an array of the feature values"}
		}
		if len(vals) != len(e.cols) {
			return nil, &fieldError{where, fmt.Sprintf("has %d values; the model takes %d features", len(vals), len(e.cols))}
		}
		for i, v := range vals {
			if err := e.value(row, &e.cols[i], v, fmt.Sprintf("%s[%d] (%s)", where, i, e.cols[i].name)); err != nil {
				return nil, err
			}
		}
		return row, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, &fieldError{where, "must be a JSON object keyed by feature name or an array of the feature values"}
	}
	for i := range e.cols {
		c := &e.cols[i]
		v, ok := obj[c.name]
		if !ok {
			return nil, &fieldError{where + "." + c.name, "is missing"}
		}
		if err := e.value(row, c, v, where+"."+c.name); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// value writes one feature's JSON value into row.
func (e *encoder) value(row []float32, c *column, v json.RawMessage, field string) error {
	if c.categories == nil {
		f, err := number(v)
		if err != nil {
			return &fieldError{field, err.Error()}
		}
		row[c.at] = f
		return nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return &fieldError{field, fmt.Sprintf("must be a string, one of %s", categoryList(c.categories))}
	}
	return e.category(row, c, s, field)
}

// category writes a categorical feature's value into row.
func (e *encoder) category(row []float32, c *column, s, field string) error {
	j, ok := c.index[s]
	if !ok {
		return &fieldError{field, fmt.Sprintf("%s is not a known category; want one of %s", strconv.Quote(truncate(s, 64)), categoryList(c.categories))}
	}
	if c.onehot {
		row[c.at+j] = 1
	} else {
		row[c.at] = float32(j)
	}
	return nil
}

// number reads a JSON number that fits a float32.
func number(v json.RawMessage) (float32, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var n any
	if err := dec.Decode(&n); err != nil {
		return 0, errors.New("must be a number")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return 0, errors.New("must be a number")
	}
	num, ok := n.(json.Number)
	if !ok {
		return 0, errors.New("must be a number")
	}
	return parseFloat32(string(num))
}

func parseFloat32(s string) (float32, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > math.MaxFloat32 {
		return 0, errors.New("is out of the range of a 32-bit float")
	}
	return float32(f), nil
}

// categoryList shows the categories in an error, at most eight of them.
func categoryList(cats []string) string {
	const show = 8
	var b bytes.Buffer
	for i, c := range cats {
		if i == show {
			fmt.Fprintf(&b, ", … (%d in all)", len(cats))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(c))
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
