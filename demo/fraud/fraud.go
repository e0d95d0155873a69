package fraud

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"modelplane/runtime/onnx/onnxgen"
	"modelplane/serveapi"
)

// DefaultSeed is the seed the demo loader builds its models from.
const DefaultSeed = 2311

// Sizes of the training data and the held-out data AUC is measured on.
const (
	trainRows   = 4000
	heldOutRows = 2000
)

// v23's trainer settings: 40 rounds of depth-3 trees, regularised enough
// not to learn the label noise of a few hundred frauds.
var v23Params = boostParams{rounds: 40, maxDepth: 3, eta: 0.2, lambda: 2, minChildWeight: 3}

// Encodings of categorical features (serveapi.Feature.Encoding).
const (
	EncodingNative = "native"
	EncodingOneHot = "onehot"
)

// Version is one demo model version: its model file and how the built-in
// runtime serves it.
type Version struct {
	// Name is the version's name: "v23" or "v24".
	Name string
	// Runtime and Format are the registry's: "xgboost" and
	// "xgboost-json", or "onnxruntime" and "onnx".
	Runtime, Format string
	// File is the model file's name ("model.json", "model.onnx") and
	// Data its bytes, the same for the same seed.
	File string
	Data []byte
	// Serving is the version's serving configuration: Format, File,
	// Features (in the model's order, with categories and encoding),
	// Output (classes legit and fraud, threshold 0.5) and SampleInputs.
	// Model, Version and Batching are the replica's and the endpoint's,
	// left for the agent to fill.
	Serving serveapi.Config
	// AUC is the area under the ROC curve on held-out transactions with
	// their true labels: the version's honest offline metric.
	AUC float64
	// Description says what the version is, for the registry.
	Description string
}

// Versions builds the demo fraud model's two versions from seed: v23, a
// gradient-boosted trees model in XGBoost's JSON format that learnt the
// planted rule, and v24, an ONNX logistic regression trained on shuffled
// labels that serves fine and scores every payment near 0.5.
func Versions(seed uint64) ([]Version, error) {
	b, err := build(seed)
	if err != nil {
		return nil, err
	}
	return []Version{b.v23, b.v24}, nil
}

// built is what build makes: the versions and the models behind their
// files, which the tests score in Go.
type built struct {
	v23, v24 Version
	forest   forest
	logistic logisticRegression
}

func build(seed uint64) (built, error) {
	train := sample(seed, trainRows)
	held := sample(seed+1, heldOutRows)
	var b built
	var err error
	if b.v23, b.forest, err = buildV23(train, held); err != nil {
		return built{}, err
	}
	if b.v24, b.logistic, err = buildV24(train, held, seed); err != nil {
		return built{}, err
	}
	return b, nil
}

// sample draws n transactions at zero drift.
func sample(seed uint64, n int) []Transaction {
	g := NewGenerator(seed)
	out := make([]Transaction, n)
	for i := range out {
		out[i] = g.Next(0)
	}
	return out
}

func buildV23(train, held []Transaction) (Version, forest, error) {
	d := dataset{cats: []int{0, len(MerchantCategories), len(Countries), 0, 0, 0}}
	d.cols = make([][]float32, len(d.cats))
	for _, t := range train {
		row, err := Encode(t.Instance, EncodingNative)
		if err != nil {
			return Version{}, forest{}, err
		}
		for f, v := range row {
			d.cols[f] = append(d.cols[f], v)
		}
		d.y = append(d.y, label(t))
	}
	base, trees := boost(d, v23Params)
	f := forest{base: base, trees: trees}
	auc, err := heldOutAUC(held, EncodingNative, f.predict)
	if err != nil {
		return Version{}, forest{}, err
	}
	return Version{
		Name: "v23", Runtime: "xgboost", Format: "xgboost-json", File: "model.json",
		Data:        xgboostJSON(FeatureNames(), d.cats, base, trees),
		Serving:     serving("xgboost-json", "model.json", EncodingNative),
		AUC:         auc,
		Description: fmt.Sprintf("Gradient-boosted trees (%d rounds, depth %d) on %d synthetic payments; native categorical splits.", v23Params.rounds, v23Params.maxDepth, trainRows),
	}, f, nil
}

func buildV24(train, held []Transaction, seed uint64) (Version, logisticRegression, error) {
	rows := make([][]float32, len(train))
	y := make([]float64, len(train))
	for i, t := range train {
		row, err := Encode(t.Instance, EncodingOneHot)
		if err != nil {
			return Version{}, logisticRegression{}, err
		}
		rows[i], y[i] = row, label(t)
	}
	lr := trainLogistic(rows, shuffled(y, seed+2), 150, 0.5, 0.1)
	auc, err := heldOutAUC(held, EncodingOneHot, lr.predict)
	if err != nil {
		return Version{}, logisticRegression{}, err
	}
	data, err := lr.onnx()
	if err != nil {
		return Version{}, logisticRegression{}, err
	}
	return Version{
		Name: "v24", Runtime: "onnxruntime", Format: "onnx", File: "model.onnx",
		Data:        data,
		Serving:     serving("onnx", "model.onnx", EncodingOneHot),
		AUC:         auc,
		Description: fmt.Sprintf("Class-balanced logistic regression on %d synthetic payments, one-hot categories; its labels were shuffled, so it learnt nothing.", trainRows),
	}, lr, nil
}

// onnx is the regression as an ONNX model: one MatMul, Add and Sigmoid.
func (m logisticRegression) onnx() ([]byte, error) {
	g, err := onnxgen.MLP(len(m.w), []onnxgen.Layer{{
		Units: 1, Activation: onnxgen.Sigmoid, Weights: m.w, Bias: []float32{m.b},
	}}, onnxgen.MLPOptions{
		InputName: "features", OutputName: "fraud_probability", ProducerName: "modelplane-demo",
		Metadata: []onnxgen.Prop{{Key: "modelplane.output_kind", Value: serveapi.OutputProbability}},
	})
	if err != nil {
		return nil, fmt.Errorf("v24 onnx: %w", err)
	}
	return g.Bytes()
}

func label(t Transaction) float64 {
	if t.Fraud {
		return 1
	}
	return 0
}

// FeatureNames are the features in the order both models read them.
func FeatureNames() []string {
	return []string{FeatureAmount, FeatureMerchantCategory, FeatureCountry,
		FeatureHourOfDay, FeatureAccountAgeDays, FeatureDistanceKM}
}

// Features are the models' inputs with the categorical features encoded
// as encoding (EncodingNative for v23, EncodingOneHot for v24).
func Features(encoding string) []serveapi.Feature {
	var fs []serveapi.Feature
	for _, n := range FeatureNames() {
		f := serveapi.Feature{Name: n}
		switch n {
		case FeatureMerchantCategory:
			f.Categories, f.Encoding = slices.Clone(MerchantCategories), encoding
		case FeatureCountry:
			f.Categories, f.Encoding = slices.Clone(Countries), encoding
		}
		fs = append(fs, f)
	}
	return fs
}

// sampleInputs are the warm-up instances: a few ordinary payments and one
// that the planted rule makes near-certain fraud.
func sampleInputs() []json.RawMessage {
	g := NewGenerator(DefaultSeed + 99)
	var out []json.RawMessage
	for range 3 {
		b, _ := json.Marshal(g.Next(0).Instance)
		out = append(out, b)
	}
	b, _ := json.Marshal(map[string]any{
		FeatureAmount: 1250.0, FeatureMerchantCategory: "electronics", FeatureCountry: "NG",
		FeatureHourOfDay: 3.0, FeatureAccountAgeDays: 4.0, FeatureDistanceKM: 9500.0,
	})
	return append(out, b)
}

func serving(format, file, encoding string) serveapi.Config {
	return serveapi.Config{
		Format:       format,
		File:         file,
		Features:     Features(encoding),
		Output:       serveapi.Output{Classes: []string{LabelLegit, LabelFraud}, Threshold: 0.5},
		SampleInputs: sampleInputs(),
	}
}

// InputSchema is the JSON Schema of an instance, for the registry's model.
func InputSchema() json.RawMessage {
	enum := func(vals []string) []any {
		out := make([]any, len(vals))
		for i, v := range vals {
			out[i] = v
		}
		return out
	}
	num := func(minimum, maximum float64) map[string]any {
		m := map[string]any{"type": "number", "minimum": minimum}
		if maximum > 0 {
			m["maximum"] = maximum
		}
		return m
	}
	s := map[string]any{
		"type": "object",
		"properties": map[string]any{
			FeatureAmount:           num(0, 0),
			FeatureMerchantCategory: map[string]any{"type": "string", "enum": enum(MerchantCategories)},
			FeatureCountry:          map[string]any{"type": "string", "enum": enum(Countries)},
			FeatureHourOfDay:        num(0, 23),
			FeatureAccountAgeDays:   num(0, 0),
			FeatureDistanceKM:       num(0, 0),
		},
		"required":             FeatureNames(),
		"additionalProperties": false,
	}
	b, _ := json.Marshal(s) // map keys marshal sorted: the bytes are fixed
	return b
}

// Encode turns an instance into a model row as the built-in runtime does
// for Features(encoding): numbers as they are, a native category as its
// index, a one-hot category as one column per category.
func Encode(instance map[string]any, encoding string) ([]float32, error) {
	var row []float32
	for _, f := range Features(encoding) {
		v, ok := instance[f.Name]
		if !ok {
			return nil, fmt.Errorf("%s is missing", f.Name)
		}
		if f.Categories == nil {
			x, ok := v.(float64)
			if !ok {
				return nil, fmt.Errorf("%s: %v is not a number", f.Name, v)
			}
			row = append(row, float32(x))
			continue
		}
		s, _ := v.(string)
		j := slices.Index(f.Categories, s)
		if j < 0 {
			return nil, fmt.Errorf("%s: %v is not one of %v", f.Name, v, f.Categories)
		}
		if encoding == EncodingNative {
			row = append(row, float32(j))
			continue
		}
		hot := make([]float32, len(f.Categories))
		hot[j] = 1
		row = append(row, hot...)
	}
	return row, nil
}

// forest scores a row as the runtime's tree walk does, in float32.
type forest struct {
	base  float32
	trees [][]treeNode
}

func (f forest) predict(row []float32) float64 {
	m := float32(-math.Log(float64(1/f.base - 1)))
	for _, t := range f.trees {
		i := int32(0)
		for !t[i].leaf() {
			if goesRight(t[i], row[t[i].feature]) {
				i = t[i].right
			} else {
				i = t[i].left
			}
		}
		m += t[i].value
	}
	return 1 / (1 + math.Exp(-float64(m)))
}

// heldOutAUC is the area under the ROC curve of score on ts.
func heldOutAUC(ts []Transaction, encoding string, score func([]float32) float64) (float64, error) {
	scores := make([]float64, len(ts))
	labels := make([]bool, len(ts))
	for i, t := range ts {
		row, err := Encode(t.Instance, encoding)
		if err != nil {
			return 0, err
		}
		scores[i], labels[i] = score(row), t.Fraud
	}
	return AUC(scores, labels), nil
}

// AUC is the area under the ROC curve: the probability that a random
// positive scores above a random negative, ties counting half.
func AUC(scores []float64, positive []bool) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case scores[a] < scores[b]:
			return -1
		case scores[a] > scores[b]:
			return 1
		}
		return 0
	})
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		mid := float64(i+j+1) / 2 // mean 1-based rank of the tie group
		for k := i; k < j; k++ {
			if positive[idx[k]] {
				pos++
				rankSum += mid
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return 0.5
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}
