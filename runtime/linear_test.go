package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"modelplane/runtime"
	"modelplane/serveapi"
)

// linear is a small real model for the server's tests: K linear functions
// of the row, read from a JSON file, whose outputs are class probabilities
// (a logistic regression for K = 1, softmax regression above) or
// regression values. It implements serveapi.Model as a loader would.
type linear struct {
	Kind    string      `json:"kind"`
	Weights [][]float64 `json:"weights"`
	Bias    []float64   `json:"bias"`

	calls atomic.Int64
	rows  atomic.Int64
	// gate, when set, holds Predict until a value arrives, so a test can
	// keep the executor busy.
	gate chan struct{}
	mu   sync.Mutex
	// seen are the first columns of every row executed.
	seen []float32
}

func openLinear(path string) (serveapi.Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m linear
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse linear model: %w", err)
	}
	if len(m.Weights) == 0 || len(m.Bias) != len(m.Weights) {
		return nil, errors.New("linear model: weights and bias disagree")
	}
	return &m, nil
}

func (m *linear) NumFeatures() int   { return len(m.Weights[0]) }
func (m *linear) OutputKind() string { return m.Kind }
func (m *linear) Close() error       { return nil }

func (m *linear) Predict(rows [][]float32) ([][]float32, error) {
	if m.gate != nil {
		<-m.gate
	}
	m.calls.Add(1)
	m.rows.Add(int64(len(rows)))
	out := make([][]float32, len(rows))
	for i, r := range rows {
		if len(r) != m.NumFeatures() {
			return nil, fmt.Errorf("row %d has %d columns, want %d", i, len(r), m.NumFeatures())
		}
		m.mu.Lock()
		m.seen = append(m.seen, r[0])
		m.mu.Unlock()
		z := m.eval(r)
		o := make([]float32, len(z))
		for k := range z {
			o[k] = float32(z[k])
		}
		out[i] = o
	}
	return out, nil
}

// eval is the model in float64: the tests' reference answers.
func (m *linear) eval(r []float32) []float64 {
	z := make([]float64, len(m.Weights))
	for k, w := range m.Weights {
		z[k] = m.Bias[k]
		for j, x := range r {
			z[k] += w[j] * float64(x)
		}
	}
	if m.Kind != serveapi.OutputProbability {
		return z
	}
	if len(z) == 1 {
		z[0] = 1 / (1 + math.Exp(-z[0]))
		return z
	}
	var sum float64
	for k := range z {
		z[k] = math.Exp(z[k])
		sum += z[k]
	}
	for k := range z {
		z[k] /= sum
	}
	return z
}

// modelDir writes a model directory: the linear model as file and the
// serving configuration.
func modelDir(t testing.TB, cfg serveapi.Config, m *linear, file string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), c, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// opened keeps the model a test's opener loaded, so the test can count its
// calls and gate it.
type opened struct {
	mu   sync.Mutex
	m    *linear
	gate chan struct{}
}

func (o *opened) openers() map[string]runtime.Opener {
	open := func(path string) (serveapi.Model, error) {
		m, err := openLinear(path)
		if err != nil {
			return nil, err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.m = m.(*linear)
		o.m.gate = o.gate
		return m, nil
	}
	// The linear model's file is JSON, so it stands in for the
	// xgboost-json format and its default extension.
	return map[string]runtime.Opener{"xgboost-json": open, "linear": open}
}

func (o *opened) model() *linear {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m
}
