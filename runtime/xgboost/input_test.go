package xgboost

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyModel is one regression tree in xgboost 1.7's JSON layout, written by
// hand so that every branch is known: node 0 sends f0 < 1 (and a missing
// f0) left to node 1, a categorical split on f1 whose set {2, 5} goes right
// (leaf 20) and the rest left (leaf 10), a missing f1 right; f0 >= 1 is leaf
// 30. The split condition of the categorical node is NaN, as xgboost writes it.
const tinyModel = `{"learner":{"attributes":{},"feature_names":[],"feature_types":[],
"gradient_booster":{"model":{"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"1","size_leaf_vector":"0"},
"tree_info":[0],"trees":[{"base_weights":[0,0,0,0,0],"categories":[5,2],"categories_nodes":[1],
"categories_segments":[0],"categories_sizes":[2],"default_left":[1,0,0,0,0],"id":0,
"left_children":[1,3,-1,-1,-1],"loss_changes":[0,0,0,0,0],"parents":[2147483647,0,0,1,1],
"right_children":[2,4,-1,-1,-1],"split_conditions":[1.0,NaN,30,10,20],"split_indices":[0,1,0,0,0],
"split_type":[0,1,0,0,0],"sum_hessian":[1,1,1,1,1],
"tree_param":{"num_deleted":"0","num_feature":"2","num_nodes":"5","size_leaf_vector":"0"}}]},"name":"gbtree"},
"learner_model_param":{"base_score":"5E-1","boost_from_average":"1","num_class":"0","num_feature":"2","num_target":"1"},
"objective":{"name":"reg:squarederror","reg_loss_param":{}}},"version":[1,7,4]}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPredictFollowsXGBoostRules(t *testing.T) {
	t.Parallel()
	m, err := Load(writeFile(t, "tiny.json", tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	if names := m.(*Model).FeatureNames(); names != nil {
		t.Errorf("FeatureNames() = %q for a file without names, want nil", names)
	}
	nan := float32(math.NaN())
	tests := []struct {
		name string
		row  []float32
		want float32
	}{
		{"numerical split goes left below the threshold", []float32{0.5, 0}, 10.5},
		{"numerical split goes right at the threshold", []float32{1, 2}, 30.5},
		{"missing numerical value follows default_left", []float32{nan, 3}, 10.5},
		{"category in the node's set goes right", []float32{0, 2}, 20.5},
		{"category outside the set goes left", []float32{0, 3}, 10.5},
		{"missing category follows the default branch", []float32{0, nan}, 20.5},
		{"non-integer category is truncated", []float32{0, 5.7}, 20.5},
		{"negative category goes left", []float32{0, -1}, 10.5},
		{"category past 2^24 goes left", []float32{0, 1 << 25}, 10.5},
		{"infinity is a value, not missing", []float32{float32(math.Inf(-1)), 5}, 20.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Predict([][]float32{tt.row})
			if err != nil {
				t.Fatal(err)
			}
			if got[0][0] != tt.want {
				t.Errorf("Predict(%v) = %v, want %v (leaf + base_score 0.5)", tt.row, got[0][0], tt.want)
			}
		})
	}
}

func TestPredictRejectsBadRows(t *testing.T) {
	t.Parallel()
	m, err := Load(writeFile(t, "tiny.json", tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		rows [][]float32
		want string
	}{
		{"short row", [][]float32{{0, 1}, {0}}, "row 1 has 1 features, want 2"},
		{"long row", [][]float32{{0, 1, 2}}, "row 0 has 3 features, want 2"},
		{"empty row", [][]float32{{}}, "row 0 has 0 features, want 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := m.Predict(tt.rows)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Predict error %v, want one containing %q", err, tt.want)
			}
			if out != nil {
				t.Errorf("Predict returned %v with its error, want nil", out)
			}
		})
	}
	out, err := m.Predict(nil)
	if err != nil || len(out) != 0 {
		t.Errorf("Predict(nil) = %v, %v; want no rows and no error", out, err)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(tinyModel, old) {
			t.Fatalf("tinyModel has no %q", old)
		}
		return strings.Replace(tinyModel, old, new, 1)
	}
	tests := []struct {
		name        string
		content     string
		want        string
		unsupported bool
	}{
		{"empty file", "", "empty file", false},
		{"binary file", "\x00\x01binf\x7f", "not a JSON model", false},
		{"truncated JSON", tinyModel[:len(tinyModel)/2], "invalid model JSON", false},
		{"JSON without a learner", `{"version":[1,7,4]}`, `no "learner"`, false},
		{"child out of range", edit(`"left_children":[1,3,`, `"left_children":[1,9,`), "children 9, 4 out of range", false},
		{"children forming a cycle", edit(`"left_children":[1,3,`, `"left_children":[1,0,`), "reached twice", false},
		{"feature out of range", edit(`"split_indices":[0,1,`, `"split_indices":[0,7,`), "feature 7 out of range", false},
		{"category segment past the categories", edit(`"categories_sizes":[2]`, `"categories_sizes":[3]`), "outside 2 categories", false},
		{"array lengths differ", edit(`"default_left":[1,0,0,0,0]`, `"default_left":[1,0]`), "default_left has 2 entries for 5 nodes", false},
		{"tree_info for a missing tree", edit(`"tree_info":[0]`, `"tree_info":[0,0]`), "tree_info has 2 entries for 1 trees", false},
		{"group past the class count", edit(`"tree_info":[0]`, `"tree_info":[1]`), "group 1 out of range", false},
		{"no features", edit(`"num_feature":"2","num_target"`, `"num_feature":"0","num_target"`), "num_feature", false},
		{"logistic base_score outside (0,1)", strings.Replace(edit(`"reg:squarederror"`, `"binary:logistic"`), `"5E-1"`, `"1.5"`, 1), "needs it in (0,1)", false},
		{"unknown objective", edit(`"reg:squarederror"`, `"reg:made-up"`), `objective "reg:made-up"`, true},
		{"gblinear booster", edit(`"name":"gbtree"`, `"name":"gblinear"`), `booster "gblinear"`, true},
		{"feature_names of the wrong count", edit(`"feature_names":[]`, `"feature_names":["a"]`), "1 feature_names for num_feature 2", false},
		{"base_score vector of the wrong length", edit(`"base_score":"5E-1"`, `"base_score":"[5E-1,5E-1]"`), "base_score has 2 values for 1 outputs", false},
		{"multi-target model", edit(`"num_target":"1"`, `"num_target":"3"`), "multi-target", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "m.json", tt.content)
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
	if _, err := Load(filepath.Join(t.TempDir(), "absent.json")); err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("Load of a missing file: %v, want an error naming it", err)
	}
}

// TestLoadRejectsEveryTruncation cuts the model at every byte: each prefix
// is an error, none a panic or a model.
func TestLoadRejectsEveryTruncation(t *testing.T) {
	t.Parallel()
	for i := range len(tinyModel) - 1 {
		if _, err := parse([]byte(tinyModel[:i])); err == nil {
			t.Fatalf("parse of the first %d bytes succeeded", i)
		}
	}
}

// FuzzParse checks that no file makes parse or Predict panic, and that a
// file that loads predicts one output row per input row.
func FuzzParse(f *testing.F) {
	f.Add([]byte(tinyModel))
	f.Add(randomForest(3, 3, 4, 1))
	f.Add([]byte(`{"learner":{}}`))
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
				rows[i][j] = []float32{0, nan, -1, 1e30}[i]
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

// randomForest builds a binary:logistic model of nTrees complete trees of the
// given depth with random splits, for the benchmark and the fuzz corpus.
func randomForest(nTrees, depth, nFeatures int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	var b strings.Builder
	fmt.Fprintf(&b, `{"learner":{"attributes":{},"gradient_booster":{"name":"gbtree","model":{"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"%d"},"tree_info":[`, nTrees)
	for i := range nTrees {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("0")
	}
	b.WriteString(`],"trees":[`)
	n := 1<<(depth+1) - 1
	for ti := range nTrees {
		if ti > 0 {
			b.WriteString(",")
		}
		var left, right, idx, cond, dl []string
		for i := range n {
			if i < n/2 {
				left = append(left, fmt.Sprint(2*i+1))
				right = append(right, fmt.Sprint(2*i+2))
				idx = append(idx, fmt.Sprint(r.IntN(nFeatures)))
				cond = append(cond, fmt.Sprint(float32(r.NormFloat64())))
			} else {
				left, right, idx = append(left, "-1"), append(right, "-1"), append(idx, "0")
				cond = append(cond, fmt.Sprint(float32(r.NormFloat64()/10)))
			}
			dl = append(dl, fmt.Sprint(r.IntN(2)))
		}
		fmt.Fprintf(&b, `{"left_children":[%s],"right_children":[%s],"split_indices":[%s],"split_conditions":[%s],"default_left":[%s],"tree_param":{"num_nodes":"%d"}}`,
			strings.Join(left, ","), strings.Join(right, ","), strings.Join(idx, ","), strings.Join(cond, ","), strings.Join(dl, ","), n)
	}
	fmt.Fprintf(&b, `]}},"learner_model_param":{"base_score":"5E-1","num_class":"0","num_feature":"%d"},"objective":{"name":"binary:logistic"}},"version":[1,7,4]}`, nFeatures)
	return []byte(b.String())
}

// BenchmarkPredict compares one batch of 64 rows with 64 calls of one row
// on a 100-tree, depth-6 forest over 20 features: the batch saves the
// per-call allocations, the walk is the same.
func BenchmarkPredict(b *testing.B) {
	m, err := parse(randomForest(100, 6, 20, 7))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	rows := make([][]float32, 64)
	for i := range rows {
		rows[i] = make([]float32, 20)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64())
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
