package fraud

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/artifact"
	"modelplane/drift/stat"
	"modelplane/runtime"
	"modelplane/runtime/onnx"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
)

// python is Debian's interpreter, where python3-xgboost installs;
// scripts/install-deps.sh test installs it.
const python = "/usr/bin/python3"

const installHint = "run scripts/install-deps.sh test"

// built once at the default seed for the tests that only read the models.
var demoBuild = sync.OnceValues(func() (built, error) { return build(DefaultSeed) })

func demo(t *testing.T) built {
	t.Helper()
	b, err := demoBuild()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return b
}

// transactions draws n transactions from seed, drift rising from 0 to
// maxDrift so the comparisons cover the amounts the traffic generator
// sends as well as the training ones.
func transactions(seed uint64, n int, maxDrift float64) []Transaction {
	g := NewGenerator(seed)
	out := make([]Transaction, n)
	for i := range out {
		out[i] = g.Next(maxDrift * float64(i) / float64(n))
	}
	return out
}

func encodeAll(t *testing.T, ts []Transaction, encoding string) [][]float32 {
	t.Helper()
	rows := make([][]float32, len(ts))
	for i, tx := range ts {
		r, err := Encode(tx.Instance, encoding)
		if err != nil {
			t.Fatal(err)
		}
		rows[i] = r
	}
	return rows
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestV23MatchesXGBoost loads v23's file in the real xgboost and in the
// built-in runtime's loader and compares their predictions.
func TestV23MatchesXGBoost(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import xgboost, numpy").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import xgboost and numpy: %v: %s (%s)", python, err, out, installHint)
	}
	b := demo(t)
	dir := t.TempDir()
	path := writeFile(t, dir, b.v23.File, b.v23.Data)
	rows := encodeAll(t, transactions(77, 400, 0.6), EncodingNative)
	// Categories out of the training range go left in both.
	rows = append(rows, []float32{900, 8, 11, 2, 3, 7000}, []float32{12, -1, 0, 14, 900, 2})
	types := []string{"q", "c", "c", "q", "q", "q"}
	spec, err := json.Marshal(map[string]any{"feature_names": FeatureNames(), "feature_types": types, "rows": rows})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "xgb_predict.py"), path, writeFile(t, dir, "rows.json", spec))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xgb_predict.py: %v\n%s", err, stderr.String())
	}
	var lib struct {
		XGBoost     string    `json:"xgboost"`
		Predictions []float64 `json:"predictions"`
	}
	if err := json.Unmarshal(out, &lib); err != nil {
		t.Fatal(err)
	}
	t.Logf("xgboost %s", lib.XGBoost)
	m, err := xgboost.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Predict(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(lib.Predictions) != len(rows) {
		t.Fatalf("xgboost gave %d predictions for %d rows", len(lib.Predictions), len(rows))
	}
	maxDiff := 0.0
	for i, want := range lib.Predictions {
		d := math.Abs(float64(got[i][0]) - want)
		maxDiff = math.Max(maxDiff, d)
		if d > 1e-5 {
			t.Errorf("row %d %v: runtime %v, xgboost %v", i, rows[i], got[i][0], want)
		}
		// The trainer's own walk is the same model.
		if own := b.forest.predict(rows[i]); math.Abs(own-want) > 1e-5 {
			t.Errorf("row %d: trainer %v, xgboost %v", i, own, want)
		}
	}
	t.Logf("largest difference from xgboost %.3g", maxDiff)
	if names := m.(*xgboost.Model).FeatureNames(); !slices.Equal(names, FeatureNames()) {
		t.Errorf("feature_names %v, want %v", names, FeatureNames())
	}
}

// TestServedByTheRuntime serves each version from a model directory with
// its serving configuration, as a replica does, and checks the answers:
// v23's are its file's predictions of the encoded instance, v24's the
// probabilities of its own weights.
func TestServedByTheRuntime(t *testing.T) {
	if _, err := onnx.RuntimeVersion(); err != nil {
		t.Fatalf("onnx runtime: %v (%s)", err, installHint)
	}
	b := demo(t)
	openers := map[string]runtime.Opener{"xgboost-json": xgboost.Load, "onnx": onnx.Load}
	ts := transactions(91, 250, 0.5)
	for _, v := range []Version{b.v23, b.v24} {
		t.Run(v.Name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, v.File, v.Data)
			cfg := v.Serving
			cfg.Model, cfg.Version = "fraud-scoring", v.Name
			raw, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, serveapi.ConfigFile, raw)
			s, err := runtime.Open(dir, openers, runtime.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer s.Close(ctx)
			if err := s.Warm(ctx); err != nil {
				t.Fatalf("warm-up with the sample inputs: %v", err)
			}
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()

			instances := make([]map[string]any, len(ts))
			for i, tx := range ts {
				instances[i] = tx.Instance
			}
			body, _ := json.Marshal(map[string]any{"instances": instances})
			resp, err := http.Post(hs.URL+"/predict", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Predictions []struct {
					Score *float64 `json:"score"`
					Label string   `json:"label"`
				} `json:"predictions"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("predict: status %d, %v", resp.StatusCode, err)
			}
			if len(got.Predictions) != len(ts) {
				t.Fatalf("%d predictions for %d instances", len(got.Predictions), len(ts))
			}
			var want []float64
			if v.Name == "v23" {
				m, err := xgboost.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				out, err := m.Predict(encodeAll(t, ts, EncodingNative))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range out {
					want = append(want, float64(o[0]))
				}
			} else {
				for _, r := range encodeAll(t, ts, EncodingOneHot) {
					want = append(want, b.logistic.predict(r))
				}
			}
			for i, p := range got.Predictions {
				if p.Score == nil || math.Abs(*p.Score-want[i]) > 1e-5 {
					t.Fatalf("instance %d %v: score %v, want %v", i, ts[i].Instance, p.Score, want[i])
				}
				wantLabel := LabelLegit
				if want[i] >= 0.5 {
					wantLabel = LabelFraud
				}
				if math.Abs(want[i]-0.5) > 1e-5 && p.Label != wantLabel {
					t.Errorf("instance %d: label %q for score %v, want %q", i, p.Label, want[i], wantLabel)
				}
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	a := demo(t)
	b, err := build(DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]Version{{a.v23, b.v23}, {a.v24, b.v24}} {
		if !bytes.Equal(pair[0].Data, pair[1].Data) {
			t.Errorf("version %d: two builds from seed %d differ", i, DefaultSeed)
		}
	}
	other, err := Versions(DefaultSeed + 1)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other[0].Data, a.v23.Data) {
		t.Error("seeds differ but v23's files are equal")
	}
	g1, g2 := NewGenerator(5), NewGenerator(5)
	for i := range 100 {
		x, y := g1.Next(0.2), g2.Next(0.2)
		if !equalInstances(x.Instance, y.Instance) || x.Fraud != y.Fraud {
			t.Fatalf("transaction %d differs between generators of one seed: %v, %v", i, x, y)
		}
	}
}

func equalInstances(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestV23LearntThePlantedRule holds v23 to the rule on held-out data: its
// AUC is near the rule's own (the labels are noisy, so no model reaches 1),
// and v24's is a coin's.
func TestV23LearntThePlantedRule(t *testing.T) {
	b := demo(t)
	held := transactions(4242, 3000, 0)
	scores := make([]float64, len(held))
	labels := make([]bool, len(held))
	for i, tx := range held {
		in := tx.Instance
		scores[i] = FraudProbability(in[FeatureAmount].(float64), in[FeatureMerchantCategory].(string),
			in[FeatureCountry].(string), in[FeatureHourOfDay].(float64), in[FeatureAccountAgeDays].(float64),
			in[FeatureDistanceKM].(float64))
		labels[i] = tx.Fraud
	}
	bayes := AUC(scores, labels)
	v23, err := heldOutAUC(held, EncodingNative, b.forest.predict)
	if err != nil {
		t.Fatal(err)
	}
	v24, err := heldOutAUC(held, EncodingOneHot, b.logistic.predict)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("AUC: rule %.3f, v23 %.3f (reported %.3f), v24 %.3f (reported %.3f)", bayes, v23, b.v23.AUC, v24, b.v24.AUC)
	if v23 < 0.85 || v23 < bayes-0.04 {
		t.Errorf("v23 AUC %.3f, want at least 0.85 and within 0.04 of the rule's %.3f", v23, bayes)
	}
	if v24 < 0.4 || v24 > 0.6 {
		t.Errorf("v24 AUC %.3f, want about 0.5: it was trained on shuffled labels", v24)
	}
	risky, err := Encode(map[string]any{
		FeatureAmount: 1500.0, FeatureMerchantCategory: "gambling", FeatureCountry: "RU",
		FeatureHourOfDay: 2.0, FeatureAccountAgeDays: 3.0, FeatureDistanceKM: 8000.0,
	}, EncodingNative)
	if err != nil {
		t.Fatal(err)
	}
	safe, err := Encode(map[string]any{
		FeatureAmount: 30.0, FeatureMerchantCategory: "grocery", FeatureCountry: "US",
		FeatureHourOfDay: 11.0, FeatureAccountAgeDays: 1200.0, FeatureDistanceKM: 4.0,
	}, EncodingNative)
	if err != nil {
		t.Fatal(err)
	}
	if r, s := b.forest.predict(risky), b.forest.predict(safe); r < 0.7 || s > 0.05 {
		t.Errorf("v23 scores the rule's fraud %.3f and an ordinary grocery payment %.3f, want above 0.7 and below 0.05", r, s)
	}
}

// TestScoreDistributionsDiffer checks that the drift gate's numbers flag
// v24 against v23 on the same traffic: the KL divergence of the label
// shares (what the gate compares when answers carry labels) and the
// normalised Wasserstein-1 distance of the scores, each above its
// threshold.
func TestScoreDistributionsDiffer(t *testing.T) {
	b := demo(t)
	ts := transactions(3131, 4000, 0.2)
	var s23, s24 []float64
	var l23, l24 [2]uint64
	for i, r := range encodeAll(t, ts, EncodingNative) {
		p := b.forest.predict(r)
		s23 = append(s23, p)
		l23[boolIndex(p >= 0.5)]++
		oh, err := Encode(ts[i].Instance, EncodingOneHot)
		if err != nil {
			t.Fatal(err)
		}
		q := b.logistic.predict(oh)
		s24 = append(s24, q)
		l24[boolIndex(q >= 0.5)]++
	}
	m23, sd23 := stat.MeanStd(s23)
	m24, _ := stat.MeanStd(s24)
	kl := stat.KL(l23[:], l24[:])
	w1 := stat.Normalised(stat.Wasserstein1(s23, s24), sd23)
	t.Logf("mean score v23 %.3f v24 %.3f; fraud labels v23 %d v24 %d of %d; KL %.2f, W1/sd %.2f",
		m23, m24, l23[1], l24[1], len(ts), kl, w1)
	if kl <= 5*stat.KLThreshold {
		t.Errorf("KL of label shares %.3f, want well above the gate's %.2f", kl, stat.KLThreshold)
	}
	if w1 <= 5*stat.W1Threshold {
		t.Errorf("normalised W1 of scores %.3f, want well above the gate's %.2f", w1, stat.W1Threshold)
	}
	if m24-m23 < 0.3 {
		t.Errorf("mean scores v23 %.3f, v24 %.3f: want v24 clearly higher", m23, m24)
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestGenerator(t *testing.T) {
	t.Parallel()
	ts := transactions(8, 20000, 0)
	drifted := make([]Transaction, 20000)
	g := NewGenerator(8)
	for i := range drifted {
		drifted[i] = g.Next(0.5)
	}
	var amount, amountDrifted float64
	fraud := 0
	for i, tx := range ts {
		in := tx.Instance
		if len(in) != len(FeatureNames()) {
			t.Fatalf("instance %v has %d features, want %d", in, len(in), len(FeatureNames()))
		}
		if !slices.Contains(MerchantCategories, in[FeatureMerchantCategory].(string)) ||
			!slices.Contains(Countries, in[FeatureCountry].(string)) {
			t.Fatalf("instance %v: category outside the lists", in)
		}
		a, h, age, dist := in[FeatureAmount].(float64), in[FeatureHourOfDay].(float64),
			in[FeatureAccountAgeDays].(float64), in[FeatureDistanceKM].(float64)
		if a < 0 || h < 0 || h > 23 || h != math.Trunc(h) || age < 0 || age > 3650 || dist < 0 {
			t.Fatalf("instance %v: a value out of range", in)
		}
		amount += a
		amountDrifted += drifted[i].Instance[FeatureAmount].(float64)
		if tx.Fraud {
			fraud++
		}
		if tx.Label() != map[bool]string{true: LabelFraud, false: LabelLegit}[tx.Fraud] {
			t.Fatalf("Label() %q for Fraud %v", tx.Label(), tx.Fraud)
		}
	}
	rate := float64(fraud) / float64(len(ts))
	if rate < 0.03 || rate > 0.10 {
		t.Errorf("fraud rate %.3f, want a few percent", rate)
	}
	if ratio := amountDrifted / amount; math.Abs(ratio-1.5) > 0.02 {
		t.Errorf("drift 0.5 scales the mean amount by %.3f, want 1.5", ratio)
	}
	if _, err := json.Marshal(ts[0].Instance); err != nil {
		t.Fatalf("instance does not marshal: %v", err)
	}
}

// TestUploadInspectionAccepts runs the files through the inspection every
// upload goes through: each is its declared format.
func TestUploadInspectionAccepts(t *testing.T) {
	t.Parallel()
	b := demo(t)
	for _, v := range []Version{b.v23, b.v24} {
		f, err := artifact.Detect(v.File, bytes.NewReader(v.Data), int64(len(v.Data)))
		if err != nil || string(f) != v.Format {
			t.Errorf("%s: Detect(%s) = %q, %v; want %s", v.Name, v.File, f, err, v.Format)
		}
	}
}

func TestServingConfig(t *testing.T) {
	t.Parallel()
	b := demo(t)
	for _, v := range []Version{b.v23, b.v24} {
		c := v.Serving
		if c.Format != v.Format || c.File != v.File || !slices.Equal(c.Output.Classes, []string{LabelLegit, LabelFraud}) || c.Output.Threshold != 0.5 {
			t.Errorf("%s: serving %+v", v.Name, c)
		}
		if len(c.SampleInputs) < 3 {
			t.Errorf("%s: %d sample inputs, want a few", v.Name, len(c.SampleInputs))
		}
	}
	if e := b.v23.Serving.Features[1].Encoding; e != EncodingNative {
		t.Errorf("v23 merchant_category encoding %q, want native", e)
	}
	if e := b.v24.Serving.Features[2].Encoding; e != EncodingOneHot {
		t.Errorf("v24 country encoding %q, want onehot", e)
	}
	var schema map[string]any
	if err := json.Unmarshal(InputSchema(), &schema); err != nil || !strings.Contains(string(InputSchema()), `"gambling"`) {
		t.Errorf("InputSchema %s: %v", InputSchema(), err)
	}
}

func TestEncodeRejects(t *testing.T) {
	t.Parallel()
	ok := NewGenerator(1).Next(0).Instance
	tests := []struct {
		name  string
		edit  func(map[string]any)
		field string
	}{
		{"a missing feature", func(m map[string]any) { delete(m, FeatureCountry) }, FeatureCountry},
		{"an unknown category", func(m map[string]any) { m[FeatureMerchantCategory] = "casino" }, FeatureMerchantCategory},
		{"a string amount", func(m map[string]any) { m[FeatureAmount] = "12" }, FeatureAmount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := map[string]any{}
			for k, v := range ok {
				in[k] = v
			}
			tt.edit(in)
			_, err := Encode(in, EncodingOneHot)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Encode error %v, want one naming %s", err, tt.field)
			}
		})
	}
}

// BenchmarkVersions is what every fresh `make run` pays to build the demo
// models.
func BenchmarkVersions(b *testing.B) {
	for b.Loop() {
		if _, err := Versions(DefaultSeed); err != nil {
			b.Fatal(err)
		}
	}
}
