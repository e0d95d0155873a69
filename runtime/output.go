package runtime

import (
	"errors"
	"fmt"

	"modelplane/serveapi"
)

// defaultBinaryClasses name a binary classifier's classes when the version
// names none, as the simulated replicas do.
var defaultBinaryClasses = []string{"negative", "positive"}

// decoder turns output rows into /predict's answers (serveapi.Prediction).
type decoder struct {
	kind      string
	classes   []string
	threshold float64
}

func newDecoder(kind string, out serveapi.Output) (*decoder, error) {
	d := &decoder{kind: kind, classes: out.Classes, threshold: out.Threshold}
	switch kind {
	case serveapi.OutputProbability:
	case serveapi.OutputValue:
		if len(out.Classes) > 0 {
			return nil, errors.New("output.classes: a regression model has no classes")
		}
	default:
		return nil, fmt.Errorf("model output kind %q is neither %q nor %q", kind, serveapi.OutputProbability, serveapi.OutputValue)
	}
	if d.threshold == 0 {
		d.threshold = 0.5
	}
	if d.threshold <= 0 || d.threshold >= 1 {
		return nil, fmt.Errorf("output.threshold %v must be between 0 and 1", out.Threshold)
	}
	seen := map[string]bool{}
	for _, c := range out.Classes {
		if c == "" || seen[c] {
			return nil, fmt.Errorf("output.classes: %q is empty or listed twice", c)
		}
		seen[c] = true
	}
	return d, nil
}

// check says whether output rows of width w fit the configuration: a
// binary classifier gives one value (the positive class) or two, with two
// class names or none; a multiclass one a value per named class.
func (d *decoder) check(w int) error {
	switch {
	case w < 1:
		return errors.New("the model returned empty output rows")
	case d.kind == serveapi.OutputValue:
		return nil
	case w <= 2 && (len(d.classes) == 0 || len(d.classes) == 2):
		return nil
	case w > 2 && len(d.classes) == 0:
		return fmt.Errorf("the model returns %d class probabilities but output.classes names none", w)
	case len(d.classes) != w:
		return fmt.Errorf("the model returns %d class probabilities but output.classes names %d", w, len(d.classes))
	}
	return nil
}

func (d *decoder) answer(row []float32) (serveapi.Prediction, error) {
	if err := d.check(len(row)); err != nil {
		return serveapi.Prediction{}, err
	}
	if d.kind == serveapi.OutputValue {
		if len(row) == 1 {
			v := float64(row[0])
			return serveapi.Prediction{Value: &v}, nil
		}
		vs := make([]float64, len(row))
		for i, x := range row {
			vs[i] = float64(x)
		}
		return serveapi.Prediction{Values: vs}, nil
	}
	classes := d.classes
	if len(row) <= 2 {
		if classes == nil {
			classes = defaultBinaryClasses
		}
		score := float64(row[len(row)-1])
		a := serveapi.Prediction{Label: classes[0], Score: &score}
		if score >= d.threshold {
			a.Label = classes[1]
		}
		if len(row) == 2 {
			a.Probabilities = map[string]float64{classes[0]: float64(row[0]), classes[1]: score}
		}
		return a, nil
	}
	best := 0
	a := serveapi.Prediction{Probabilities: make(map[string]float64, len(row))}
	for i, p := range row {
		a.Probabilities[classes[i]] = float64(p)
		if p > row[best] {
			best = i
		}
	}
	score := float64(row[best])
	a.Label, a.Score = classes[best], &score
	return a, nil
}
