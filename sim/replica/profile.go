package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"modelplane/serveapi"
	"modelplane/sim"
	"modelplane/sim/profile"
)

// A replica reads its version's sim profile with profile.Parse, so the
// keys, their exact spelling and their checks are those of profile.Profile;
// unknown keys are refused. Beyond that the task decides which profiles fit:
//
//   - classification and regression: a predictor profile (latency_ms,
//     error_rate, score, value, class_balance); LLM keys are refused.
//   - llm: an LLM profile; the predictor keys are refused. Predict's draws are
//     unused, only error_rate is read. Without an injected Engine the profile
//     must also drive an engine.Scheduler (see New).
//
//	{"latency_ms":{"p50":8,"p99":21}, "error_rate":0.001,
//	 "score":{"mean":0.12,"sd":0.18}, "class_balance":{"legit":0.97,"fraud":0.03}}
//
// "value" is for regressors; a regressor without it uses "score", and
// without either N(0, 1).

// behaviour is a parsed, validated profile ready to draw from.
type behaviour struct {
	latency   sim.LogNormal
	errorRate float64
	score     sim.Beta
	// bands are the classes with cumulative upper bounds of the score
	// quantile, in profile order; the last bound is 1.
	bands []profile.ClassShare
	value profile.Moments
}

// Defaults for profiles that leave a key out.
var (
	defaultScore = profile.Moments{Mean: 0.5, SD: 0.25}
	defaultValue = profile.Moments{Mean: 0, SD: 1}
)

// parseProfile reads and checks a sim profile for the given task. An empty
// profile means no latency, no errors and the default distributions.
func parseProfile(raw json.RawMessage, task Task) (profile.Profile, behaviour, error) {
	p, err := profile.Parse(raw)
	if err != nil {
		return profile.Profile{}, behaviour{}, err
	}
	b, err := newBehaviour(p, task)
	if err != nil {
		return profile.Profile{}, behaviour{}, fmt.Errorf("%w: %w", profile.ErrInvalid, err)
	}
	return p, b, nil
}

// newBehaviour turns a parsed, validated profile into the task's draws. It
// checks only what profile.Profile.Validate leaves to the task.
func newBehaviour(p profile.Profile, task Task) (behaviour, error) {
	b := behaviour{errorRate: p.ErrorRate, latency: sim.FitLogNormal(0, 0)}
	if task == TaskLLM {
		if p.LatencyMs != nil || p.Score != nil || p.Value != nil || p.ClassBalance != nil {
			return behaviour{}, errors.New("not an LLM profile: latency_ms, score, value and class_balance are for classifiers and regressors")
		}
		return b, nil
	}
	if p.IsLLM() {
		return behaviour{}, fmt.Errorf("an LLM profile (step-time or KV-cache keys) does not fit a %s replica", task)
	}
	if l := p.LatencyMs; l != nil {
		b.latency = sim.FitLogNormal(l.P50, l.P99)
	}
	if task == TaskClassification {
		score := defaultScore
		if p.Score != nil {
			score = *p.Score
		}
		if score.Mean <= 0 || score.Mean >= 1 || score.SD <= 0 {
			return behaviour{}, errors.New("score: want 0 < mean < 1 and sd > 0")
		}
		b.score = sim.FitBeta(score.Mean, score.SD)
		b.bands = cumulative(p.ClassBalance)
		return b, nil
	}
	b.value = defaultValue
	switch {
	case p.Value != nil:
		b.value = *p.Value
	case p.Score != nil:
		b.value = *p.Score
	}
	return b, nil
}

// cumulative normalises the class shares, which profile.Profile.Validate has
// checked (finite, >= 0, a positive sum, no label twice), and turns them into
// bands. Without classes the labels are "negative" and "positive" split at a
// score of 0.5, which the caller handles by the empty result.
func cumulative(classes profile.ClassBalance) []profile.ClassShare {
	if len(classes) == 0 {
		return nil
	}
	var sum float64
	for _, c := range classes {
		sum += c.Share
	}
	bands := make([]profile.ClassShare, len(classes))
	var acc float64
	for i, c := range classes {
		acc += c.Share / sum
		bands[i] = profile.ClassShare{Label: c.Label, Share: acc}
	}
	bands[len(bands)-1].Share = 1
	return bands
}

// classify draws one instance's output. The score is a Beta draw; the label
// is the class whose band holds the score's own quantile q = I_score(a, b).
// q is uniform on [0, 1], so each class gets exactly its share, and the
// highest scores go to the last class listed (for {"legit":0.97,"fraud":0.03}
// the top 3 percent of scores are "fraud"), as a real classifier's would.
func (b behaviour) classify(r *rand.Rand) serveapi.Prediction {
	s := b.score.Draw(r)
	if len(b.bands) == 0 {
		if s >= 0.5 {
			return serveapi.Prediction{Label: "positive", Score: &s}
		}
		return serveapi.Prediction{Label: "negative", Score: &s}
	}
	q := b.score.CDF(s)
	for _, band := range b.bands {
		if q < band.Share {
			return serveapi.Prediction{Label: band.Label, Score: &s}
		}
	}
	return serveapi.Prediction{Label: b.bands[len(b.bands)-1].Label, Score: &s}
}

// regress draws one instance's value from N(mean, sd²).
func (b behaviour) regress(r *rand.Rand) serveapi.Prediction {
	v := b.value.Mean + b.value.SD*r.NormFloat64()
	return serveapi.Prediction{Value: &v}
}

// outcome is the request-level draw: whether the request fails and how long
// it takes. The error draw comes first, so changing the latency profile does
// not move which requests fail.
func (b behaviour) outcome(r *rand.Rand) (fail bool, latency time.Duration) {
	fail = r.Float64() < b.errorRate
	return fail, b.latency.Draw(r)
}
