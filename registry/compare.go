package registry

import (
	"bytes"
	"encoding/json"

	"modelplane/serveapi"
)

// AnswerComparison sets another version's stored validation answers
// beside a version's own, on the version's validation inputs, so a
// candidate is compared with its parent or the serving version on the
// same inputs without running either again.
type AnswerComparison struct {
	// Inputs are the version's validation inputs; Mine its answers to
	// them and Theirs the other version's, nil where the other's
	// validation did not answer that input (it was validated on other
	// inputs, or not by the control plane).
	Inputs []json.RawMessage
	Mine   []*serveapi.Prediction
	Theirs []*serveapi.Prediction
	// Differs marks the inputs both answered whose predicted label (a
	// classifier's top class) differs.
	Differs []bool
	// Compared counts the inputs both versions answered with a label,
	// Disagree those whose labels differ: the disagreement rate is
	// Disagree/Compared.
	Compared, Disagree int
}

// Answers returns a validation's inputs and its answers to them, in order;
// nothing when x is nil, pending or its answers do not parse.
func Answers(x *Validation) ([]json.RawMessage, []*serveapi.Prediction) {
	if x == nil {
		return nil, nil
	}
	var inputs []json.RawMessage
	var outputs []*serveapi.Prediction
	if json.Unmarshal(x.Inputs, &inputs) != nil || json.Unmarshal(x.Outputs, &outputs) != nil || len(outputs) != len(inputs) {
		return nil, nil
	}
	return inputs, outputs
}

// CompareAnswers compares theirs with mine on mine's inputs, matching an
// input by its JSON value (key order and spacing aside).
func CompareAnswers(mine, theirs *Validation) AnswerComparison {
	var c AnswerComparison
	c.Inputs, c.Mine = Answers(mine)
	theirInputs, theirAnswers := Answers(theirs)
	byInput := map[string]*serveapi.Prediction{}
	for i, in := range theirInputs {
		byInput[canonical(in)] = theirAnswers[i]
	}
	for i, in := range c.Inputs {
		t := byInput[canonical(in)]
		c.Theirs = append(c.Theirs, t)
		m := c.Mine[i]
		differs := false
		if m != nil && t != nil && m.Label != "" && t.Label != "" {
			c.Compared++
			if differs = m.Label != t.Label; differs {
				c.Disagree++
			}
		}
		c.Differs = append(c.Differs, differs)
	}
	return c
}

// canonical is a JSON value re-encoded (object keys sorted, no spacing),
// or the bytes as they are when they do not parse.
func canonical(b json.RawMessage) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
