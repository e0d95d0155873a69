package lightgbm

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadRejectsBadFiles(t *testing.T) {
	t.Parallel()
	base := string(readData(t, "boosters/small_tree/model.txt"))
	// edit replaces the first occurrence of old; edits inside a tree keep
	// its length so that they reach the tree checks, not the tree_sizes one.
	edit := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("small_tree/model.txt has no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	tests := []struct {
		name        string
		content     string
		want        string
		unsupported bool
	}{
		{"empty file", "", "empty file", false},
		{"not a model", "hello\nworld\n", "not a LightGBM text model", false},
		{"binary file", "\x00\x01\x02tree\n", "not a LightGBM text model", false},
		{"unknown format version", edit("version=v4", "version=v9"), `model format "v9"`, true},
		{"ranking objective", edit("objective=regression", "objective=lambdarank"), `objective "lambdarank"`, true},
		{"custom objective", edit("objective=regression\n", ""), "custom objective", true},
		{"random forest in v4", edit("objective=regression\n", "objective=regression\naverage_output\n"), "random forest", true},
		{"class count disagreement", edit("num_class=1", "num_class=2"), "num_class 2 and num_tree_per_iteration 1", false},
		{"feature past max_feature_idx", edit("max_feature_idx=4\nobjective=regression\nfeature_names=Column_0 Column_1 Column_2 Column_3 Column_4\n",
			"max_feature_idx=0\nobjective=regression\nfeature_names=Column_0\n"), "split_feature 1 out of range [0,1)", false},
		{"leaf child out of range", edit("left_child=1 -1 -2", "left_child=1 -1 -9"), "child -9 out of range", false},
		{"children forming a cycle", edit("left_child=1 -1 -2", "left_child=1 -1 +1"), "reached twice", false},
		{"categorical split without categories", edit("decision_type=2 2 2", "decision_type=3 2 2"), "categorical threshold", false},
		{"array of the wrong length", edit("left_child=1 -1 -2", "left_child=1 -1 -2 5"), "left_child has 4 values, want 3", false},
		{"tree_sizes disagreeing with the trees", edit("tree_sizes=510 ", "tree_sizes=511 "), "tree 1 is not where tree_sizes puts it", false},
		{"tree out of order", edit("Tree=1", "Tree=7"), "tree 1 is not where tree_sizes puts it", false},
		{"no end of trees", edit("end of trees", "end of tree"), `no "end of trees"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "model.txt")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load error %q: want it to name the file and contain %q", err, tt.want)
			}
			if got := errors.Is(err, ErrUnsupported); got != tt.unsupported {
				t.Errorf("errors.Is(err, ErrUnsupported) = %v, want %v", got, tt.unsupported)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.txt")); err == nil || !strings.Contains(err.Error(), "absent.txt") {
		t.Errorf("Load of a missing file: %v, want an error naming it", err)
	}
}

// TestLoadRejectsEveryTruncation cuts a model at every byte: a cut before
// the end of its trees is an error, never a panic or a different model.
func TestLoadRejectsEveryTruncation(t *testing.T) {
	t.Parallel()
	data := readData(t, "boosters/small_tree/model.txt")
	end := bytes.Index(data, []byte("end of trees")) + len("end of trees")
	for i := range end {
		if _, err := parse(data[:i]); err == nil {
			t.Fatalf("parse of the first %d of %d bytes succeeded", i, end)
		}
	}
	if _, err := parse(data[:end]); err != nil {
		t.Errorf("parse up to \"end of trees\": %v, want the model (the sections after the trees are optional)", err)
	}
}

func TestPredictRejectsBadRows(t *testing.T) {
	t.Parallel()
	m, err := parse(readData(t, "boosters/small_tree/model.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range [][][]float32{{{1, 2, 3, 4, 5}, {1, 2}}, {{1, 2, 3, 4, 5, 6}}, {{}}} {
		out, err := m.Predict(rows)
		bad := len(rows) - 1
		if err == nil || !strings.Contains(err.Error(), "row "+string(rune('0'+bad))) || out != nil {
			t.Errorf("Predict(%v) = %v, %v; want an error naming row %d", rows, out, err, bad)
		}
	}
	nan := float32(math.NaN())
	out, err := m.Predict([][]float32{{nan, nan, nan, nan, nan}})
	if err != nil || len(out) != 1 || math.IsNaN(float64(out[0][0])) {
		t.Errorf("Predict of an all-missing row = %v, %v; want a number (missing values follow the splits' rules)", out, err)
	}
}

func TestFeatureNames(t *testing.T) {
	t.Parallel()
	m, err := parse(readData(t, "leaves/genlin_fmtp_poisson_Frequency.model.gz"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"VehBrand", "VehPower", "VehGas", "Region", "Area", "VehAge", "DrivAge", "BonusMalus", "Density"}
	if got := m.FeatureNames(); !slices.Equal(got, want) {
		t.Errorf("FeatureNames() = %v, want %v", got, want)
	}
	base := string(readData(t, "boosters/small_tree/model.txt"))
	bad := strings.Replace(base, "feature_names=Column_0 ", "feature_names=", 1)
	if _, err := parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "4 feature_names for max_feature_idx 4") {
		t.Errorf("parse with a name missing: %v, want an error counting the names", err)
	}
}

// FuzzParse checks that no file makes parse or Predict panic, and that a
// file that loads predicts one output row per input row.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"boosters/small_tree/model.txt", "leaves/lg_rf_iris.model"} {
		f.Add(readData(f, name))
	}
	f.Add([]byte("tree\nversion=v3\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parse(data)
		if err != nil {
			return
		}
		nan := float32(math.NaN())
		rows := make([][]float32, 4)
		for i := range rows {
			rows[i] = make([]float32, m.NumFeatures())
			for j := range rows[i] {
				rows[i][j] = []float32{0, nan, -1e30, 1e30}[i]
			}
		}
		out, err := m.Predict(rows)
		if err != nil {
			t.Fatalf("Predict on rows of the right width: %v", err)
		}
		if len(out) != len(rows) || len(out[0]) != m.NumOutputs() {
			t.Fatalf("Predict gave %d rows of %d, want %d of %d", len(out), len(out[0]), len(rows), m.NumOutputs())
		}
	})
}

// BenchmarkPredict compares one batch of 64 rows with 64 calls of one row
// on the 100-tree poisson model.
func BenchmarkPredict(b *testing.B) {
	m, err := parse(readData(b, "leaves/genlin_fmtp_poisson_Frequency.model.gz"))
	if err != nil {
		b.Fatal(err)
	}
	rows := make([][]float32, 64)
	for i := range rows {
		rows[i] = make([]float32, m.NumFeatures())
		for j := range rows[i] {
			rows[i][j] = float32((i*7 + j*3) % 10)
		}
	}
	b.Run("batch64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Predict(rows); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("single64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, row := range rows {
				if _, err := m.Predict([][]float32{row}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
