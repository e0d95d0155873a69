package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// profile is the part of a version's sim profile that predict and the error
// injection read. Unknown keys, the LLM step-time keys among them, are
// ignored, so one profile type serves every task.
//
//	{"latency_ms":{"p50":8,"p99":21}, "error_rate":0.001,
//	 "score":{"mean":0.12,"sd":0.18}, "class_balance":{"legit":0.97,"fraud":0.03},
//	 "value":{"mean":3.2,"sd":0.9}}
//
// "value" is for regressors; a regressor without it uses "score".
type profile struct {
	Latency      *percentiles `json:"latency_ms"`
	ErrorRate    float64      `json:"error_rate"`
	Score        *moments     `json:"score"`
	Value        *moments     `json:"value"`
	ClassBalance classBalance `json:"class_balance"`
}

type percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

type moments struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
}

// classShare is one class and its share of predictions.
type classShare struct {
	Label string
	Share float64
}

// classBalance keeps the classes in the order the profile lists them: the
// order decides which class gets the highest scores (the last one).
type classBalance []classShare

func (c *classBalance) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*c = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("must be an object of class to share")
	}
	seen := map[string]bool{}
	var out classBalance
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		label := t.(string) // object keys are always strings
		var share float64
		if err := dec.Decode(&share); err != nil {
			return fmt.Errorf("class %q: share must be a number", label)
		}
		if seen[label] {
			return fmt.Errorf("class %q listed twice", label)
		}
		seen[label] = true
		out = append(out, classShare{Label: label, Share: share})
	}
	*c = out
	return nil
}

// behaviour is a parsed, validated profile ready to draw from.
type behaviour struct {
	latency   logNormal
	errorRate float64
	score     beta
	// bands are the classes with cumulative upper bounds of the score
	// quantile, in profile order; the last bound is 1.
	bands []classShare
	value moments
}

// Defaults for profiles that leave a key out.
var (
	defaultScore = moments{Mean: 0.5, SD: 0.25}
	defaultValue = moments{Mean: 0, SD: 1}
)

// parseProfile reads and checks a sim profile for the given task. An empty
// profile means no latency, no errors and the default distributions.
func parseProfile(raw json.RawMessage, task Task) (behaviour, error) {
	var p profile
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return behaviour{}, fmt.Errorf("sim profile: %w", err)
		}
	}
	var b behaviour
	if l := p.Latency; l != nil {
		if !finite(l.P50, l.P99) || l.P50 < 0 || l.P99 < l.P50 {
			return behaviour{}, errors.New("sim profile: latency_ms: want 0 <= p50 <= p99")
		}
		b.latency = fitLogNormal(l.P50, l.P99)
	} else {
		b.latency = fitLogNormal(0, 0)
	}
	if !finite(p.ErrorRate) || p.ErrorRate < 0 || p.ErrorRate > 1 {
		return behaviour{}, errors.New("sim profile: error_rate: want a share between 0 and 1")
	}
	b.errorRate = p.ErrorRate
	if task == TaskLLM {
		return b, nil
	}

	score := defaultScore
	if p.Score != nil {
		score = *p.Score
	}
	if task == TaskClassification {
		if !finite(score.Mean, score.SD) || score.Mean <= 0 || score.Mean >= 1 || score.SD <= 0 {
			return behaviour{}, errors.New("sim profile: score: want 0 < mean < 1 and sd > 0")
		}
		b.score = fitBeta(score.Mean, score.SD)
		bands, err := cumulative(p.ClassBalance)
		if err != nil {
			return behaviour{}, err
		}
		b.bands = bands
		return b, nil
	}

	b.value = defaultValue
	switch {
	case p.Value != nil:
		b.value = *p.Value
	case p.Score != nil:
		b.value = *p.Score
	}
	if !finite(b.value.Mean, b.value.SD) || b.value.SD < 0 {
		return behaviour{}, errors.New("sim profile: value: want a finite mean and sd >= 0")
	}
	return b, nil
}

// cumulative normalises the class shares and turns them into bands. Without
// classes the labels are "negative" and "positive" split at a score of 0.5,
// which the caller handles by the empty result.
func cumulative(classes classBalance) ([]classShare, error) {
	if len(classes) == 0 {
		return nil, nil
	}
	var sum float64
	for _, c := range classes {
		if !finite(c.Share) || c.Share < 0 {
			return nil, fmt.Errorf("sim profile: class_balance: class %q: want a share >= 0", c.Label)
		}
		sum += c.Share
	}
	if sum <= 0 {
		return nil, errors.New("sim profile: class_balance: shares add up to 0")
	}
	bands := make([]classShare, len(classes))
	var acc float64
	for i, c := range classes {
		acc += c.Share / sum
		bands[i] = classShare{Label: c.Label, Share: acc}
	}
	bands[len(bands)-1].Share = 1
	return bands, nil
}

func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// classification is one classifier output.
type classification struct {
	Label string  `json:"label"`
	Score float64 `json:"score"`
}

// regression is one regressor output.
type regression struct {
	Value float64 `json:"value"`
}

// classify draws one instance's output. The score is a Beta draw; the label
// is the class whose band holds the score's own quantile q = I_score(a, b).
// q is uniform on [0, 1], so each class gets exactly its share, and the
// highest scores go to the last class listed (for {"legit":0.97,"fraud":0.03}
// the top 3 percent of scores are "fraud"), as a real classifier's would.
func (b behaviour) classify(r *rand.Rand) classification {
	s := b.score.draw(r)
	if len(b.bands) == 0 {
		if s >= 0.5 {
			return classification{Label: "positive", Score: s}
		}
		return classification{Label: "negative", Score: s}
	}
	q := b.score.cdf(s)
	for _, band := range b.bands {
		if q < band.Share {
			return classification{Label: band.Label, Score: s}
		}
	}
	return classification{Label: b.bands[len(b.bands)-1].Label, Score: s}
}

// regress draws one instance's value from N(mean, sd²).
func (b behaviour) regress(r *rand.Rand) regression {
	return regression{Value: b.value.Mean + b.value.SD*r.NormFloat64()}
}

// outcome is the request-level draw: whether the request fails and how long
// it takes. The error draw comes first, so changing the latency profile does
// not move which requests fail.
func (b behaviour) outcome(r *rand.Rand) (fail bool, latency time.Duration) {
	fail = r.Float64() < b.errorRate
	return fail, b.latency.draw(r)
}
