package lightgbm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"modelplane/serveapi"
)

// readData returns a testdata file's bytes, gunzipped when it ends in .gz.
func readData(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(name, ".gz") {
		return b
	}
	z, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// modelFile writes a testdata model, gunzipped, to a temporary file, so
// that the test goes through Load with a path as the runtime does.
func modelFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(name), ".gz"))
	if err := os.WriteFile(p, readData(t, name), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// table reads whitespace-separated rows of numbers (the leaves files' TSV
// and prediction files).
func table(t *testing.T, name string) [][]float64 {
	t.Helper()
	var rows [][]float64
	s := bufio.NewScanner(bytes.NewReader(readData(t, name)))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 {
			continue
		}
		row := make([]float64, len(f))
		for i, v := range f {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			row[i] = x
		}
		rows = append(rows, row)
	}
	return rows
}

// libsvm reads "label index:value ..." rows into dense rows of width n
// (absent features are 0, as leaves' CSR reader has them).
func libsvm(t *testing.T, name string, n int) [][]float64 {
	t.Helper()
	var rows [][]float64
	for _, line := range strings.Split(strings.TrimSpace(string(readData(t, name))), "\n") {
		f := strings.Fields(line)
		row := make([]float64, n)
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, ":")
			i, err1 := strconv.Atoi(k)
			x, err2 := strconv.ParseFloat(v, 64)
			if err1 != nil || err2 != nil || i >= n {
				t.Fatalf("%s: bad entry %q", name, kv)
			}
			row[i] = x
		}
		rows = append(rows, row)
	}
	return rows
}

// boostersInput reads a boosters input.json (missing values as null).
func boostersInput(t *testing.T, dir string) [][]float64 {
	t.Helper()
	var in struct {
		Data [][]*float64 `json:"data"`
	}
	if err := json.Unmarshal(readData(t, dir+"/input.json"), &in); err != nil {
		t.Fatal(err)
	}
	rows := make([][]float64, len(in.Data))
	for i, r := range in.Data {
		rows[i] = make([]float64, len(r))
		for j, v := range r {
			if v == nil {
				rows[i][j] = math.NaN()
			} else {
				rows[i][j] = *v
			}
		}
	}
	return rows
}

// boostersExpected reads one field of a boosters expected.json, a list of
// numbers or of rows.
func boostersExpected(t *testing.T, dir, field string) [][]float64 {
	t.Helper()
	var exp map[string]json.RawMessage
	if err := json.Unmarshal(readData(t, dir+"/expected.json"), &exp); err != nil {
		t.Fatal(err)
	}
	var rows [][]float64
	if err := json.Unmarshal(exp[field], &rows); err == nil {
		return rows
	}
	rows = nil // a failed Unmarshal leaves nil rows behind
	var flat []float64
	if err := json.Unmarshal(exp[field], &flat); err != nil {
		t.Fatalf("%s/expected.json %s: %v", dir, field, err)
	}
	for _, v := range flat {
		rows = append(rows, []float64{v})
	}
	return rows
}

func softmaxRows(raw [][]float64) [][]float64 {
	out := make([][]float64, len(raw))
	for i, r := range raw {
		hi := r[0]
		for _, v := range r {
			hi = math.Max(hi, v)
		}
		var sum float64
		for _, v := range r {
			sum += math.Exp(v - hi)
		}
		out[i] = make([]float64, len(r))
		for j, v := range r {
			out[i][j] = math.Exp(v-hi) / sum
		}
	}
	return out
}

// TestMatchesLightGBM scores reference rows with models saved by LightGBM
// (2.x to 4.x) and compares with LightGBM's own saved predictions (see
// testdata/README.md for where each file comes from).
func TestMatchesLightGBM(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		model string
		kind  string
		rows  func(t *testing.T, nFeatures int) [][]float64
		want  func(t *testing.T) [][]float64
	}{
		{
			name: "v4 regression", model: "boosters/regression/model.txt", kind: serveapi.OutputValue,
			rows: func(t *testing.T, _ int) [][]float64 { return boostersInput(t, "boosters/regression") },
			want: func(t *testing.T) [][]float64 { return boostersExpected(t, "boosters/regression", "raw") },
		},
		{
			name: "v4 regression with missing values", model: "boosters/regression_missing/model.txt", kind: serveapi.OutputValue,
			rows: func(t *testing.T, _ int) [][]float64 { return boostersInput(t, "boosters/regression_missing") },
			want: func(t *testing.T) [][]float64 { return boostersExpected(t, "boosters/regression_missing", "raw") },
		},
		{
			name: "v4 small trees", model: "boosters/small_tree/model.txt", kind: serveapi.OutputValue,
			rows: func(t *testing.T, _ int) [][]float64 { return boostersInput(t, "boosters/small_tree") },
			want: func(t *testing.T) [][]float64 { return boostersExpected(t, "boosters/small_tree", "raw") },
		},
		{
			name: "v4 binary", model: "boosters/binary_classification/model.txt", kind: serveapi.OutputProbability,
			rows: func(t *testing.T, _ int) [][]float64 { return boostersInput(t, "boosters/binary_classification") },
			want: func(t *testing.T) [][]float64 { return boostersExpected(t, "boosters/binary_classification", "proba") },
		},
		{
			name: "v4 multiclass", model: "boosters/multiclass/model.txt", kind: serveapi.OutputProbability,
			rows: func(t *testing.T, _ int) [][]float64 { return boostersInput(t, "boosters/multiclass") },
			want: func(t *testing.T) [][]float64 { return boostersExpected(t, "boosters/multiclass", "proba") },
		},
		{
			name: "dart binary", model: "leaves/lg_dart_breast_cancer.model", kind: serveapi.OutputProbability,
			rows: func(t *testing.T, _ int) [][]float64 { return table(t, "leaves/breast_cancer_test.tsv") },
			want: func(t *testing.T) [][]float64 { return table(t, "leaves/lg_dart_breast_cancer_true_predictions.txt") },
		},
		{
			name: "v2 random forest binary", model: "leaves/lg_rf_iris.model", kind: serveapi.OutputProbability,
			rows: func(t *testing.T, n int) [][]float64 { return libsvm(t, "leaves/iris_test.libsvm", n) },
			want: func(t *testing.T) [][]float64 { return table(t, "leaves/lg_rf_iris_true_predictions.txt") },
		},
		{
			// LightGBM saved raw scores here; the probabilities are their
			// softmax.
			name: "multiclass with categorical features", model: "leaves/lg_kddcup99.model.gz", kind: serveapi.OutputProbability,
			rows: func(t *testing.T, _ int) [][]float64 { return table(t, "leaves/kddcup99_test.tsv.gz") },
			want: func(t *testing.T) [][]float64 {
				return softmaxRows(table(t, "leaves/lg_kddcup99_true_predictions.txt.gz"))
			},
		},
		{
			name: "poisson with categorical features", model: "leaves/genlin_fmtp_poisson_Frequency.model.gz", kind: serveapi.OutputValue,
			rows: func(t *testing.T, _ int) [][]float64 {
				return table(t, "leaves/genlin_fmtp_poisson_Frequency_features.tsv")
			},
			want: func(t *testing.T) [][]float64 {
				return table(t, "leaves/genlin_fmtp_poisson_Frequency_true_predictions.txt")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := Load(modelFile(t, tt.model))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.OutputKind() != tt.kind {
				t.Errorf("OutputKind = %q, want %q", m.OutputKind(), tt.kind)
			}
			in := tt.rows(t, m.NumFeatures())
			want := tt.want(t)
			if len(in) != len(want) || len(in) == 0 {
				t.Fatalf("%d input rows for %d predictions", len(in), len(want))
			}
			rows := make([][]float32, len(in))
			for i, r := range in {
				if len(r) != m.NumFeatures() {
					t.Fatalf("row %d has %d features, the model %d", i, len(r), m.NumFeatures())
				}
				rows[i] = make([]float32, len(r))
				for j, v := range r {
					rows[i][j] = float32(v)
				}
			}
			got, err := m.Predict(rows)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			bad := 0
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("row %d: %d outputs, LightGBM %d", i, len(got[i]), len(want[i]))
				}
				for j, w := range want[i] {
					d := math.Abs(float64(got[i][j]) - w)
					worst = math.Max(worst, d/math.Max(1, math.Abs(w)))
					// Within 1e-5, relative once the value exceeds 1: the
					// output is float32, whose spacing at 150 is 1.5e-5.
					if d > 1e-5*math.Max(1, math.Abs(w)) {
						if bad++; bad <= 5 {
							t.Errorf("row %d output %d = %v, LightGBM %v", i, j, got[i][j], w)
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d outputs differ from LightGBM's by more than 1e-5", bad)
			}
			t.Logf("%d rows, largest (relative) difference from LightGBM %.3g", len(got), worst)
		})
	}
}

func TestLoadRefusesLinearTrees(t *testing.T) {
	t.Parallel()
	_, err := Load(modelFile(t, "boosters/linear_tree/model.txt"))
	if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "linear tree") {
		t.Fatalf("Load of a linear-tree model: %v, want ErrUnsupported naming linear trees", err)
	}
}
