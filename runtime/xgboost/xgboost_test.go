package xgboost

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"modelplane/serveapi"
)

// python is the interpreter Debian's python3-xgboost and python3-sklearn
// install into; scripts/install-deps.sh test installs them.
const python = "/usr/bin/python3"

type libraryCase struct {
	Name          string       `json:"name"`
	Model         string       `json:"model"`
	Kind          string       `json:"kind"`
	Rows          [][]*float64 `json:"rows"`
	Want          [][]float64  `json:"want"`
	Labels        []int        `json:"labels"`
	Error         string       `json:"error"`
	BestIteration int          `json:"best_iteration"`
	Rounds        int          `json:"rounds"`
	FeatureNames  []string     `json:"feature_names"`
}

// makeLibraryModels trains models with the real xgboost (testdata/
// make_models.py) into a temporary directory and returns the directory and
// its cases. Without python3, xgboost or sklearn the test fails: CI installs
// them, and a skipped comparison would pass for a wrong tree walk.
func makeLibraryModels(t *testing.T) (string, []libraryCase) {
	t.Helper()
	check := exec.Command(python, "-c", "import xgboost, sklearn, numpy")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("%s with xgboost, sklearn and numpy is needed to compare with the real library "+
			"(run scripts/install-deps.sh test): %v\n%s", python, err, out)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "make_models.py"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_models.py: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		XGBoost string        `json:"xgboost"`
		Cases   []libraryCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	t.Logf("models trained with xgboost %s", f.XGBoost)
	return dir, f.Cases
}

func toRows(in [][]*float64) [][]float32 {
	rows := make([][]float32, len(in))
	for i, r := range in {
		rows[i] = make([]float32, len(r))
		for j, v := range r {
			if v == nil {
				rows[i][j] = float32(math.NaN())
			} else {
				rows[i][j] = float32(*v)
			}
		}
	}
	return rows
}

// TestMatchesXGBoost compares Predict with xgboost's own predictions on
// random rows for every objective, booster and feature kind the package
// supports, and checks that Load refuses the rest by name.
func TestMatchesXGBoost(t *testing.T) {
	dir, cases := makeLibraryModels(t)
	if len(cases) < 10 {
		t.Fatalf("make_models.py wrote %d cases, want at least 10", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			m, err := Load(filepath.Join(dir, c.Model))
			if c.Error != "" {
				if err == nil {
					t.Fatalf("Load succeeded, want an error naming %q", c.Error)
				}
				if !strings.Contains(err.Error(), c.Error) || !errors.Is(err, ErrUnsupported) {
					t.Fatalf("Load error %q: want ErrUnsupported naming %q", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.OutputKind() != c.Kind {
				t.Errorf("OutputKind = %q, want %q", m.OutputKind(), c.Kind)
			}
			if got := m.(*Model).FeatureNames(); !slices.Equal(got, c.FeatureNames) {
				t.Errorf("FeatureNames() = %q, want %q", got, c.FeatureNames)
			}
			rows := toRows(c.Rows)
			if m.NumFeatures() != len(rows[0]) {
				t.Fatalf("NumFeatures = %d, want %d", m.NumFeatures(), len(rows[0]))
			}
			got, err := m.Predict(rows)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.Want) {
				t.Fatalf("%d output rows, want %d", len(got), len(c.Want))
			}
			var worst float64
			bad := 0
			for i := range got {
				if len(got[i]) != len(c.Want[i]) {
					t.Fatalf("row %d: %d outputs, want %d", i, len(got[i]), len(c.Want[i]))
				}
				for j, g := range got[i] {
					worst = math.Max(worst, math.Abs(float64(g)-c.Want[i][j]))
					if math.Abs(float64(g)-c.Want[i][j]) > 1e-5 {
						if bad++; bad <= 5 {
							t.Errorf("row %d output %d = %v, xgboost %v", i, j, g, c.Want[i][j])
						}
					}
				}
				if c.Labels != nil {
					if a := argmax(got[i]); a != c.Labels[i] {
						t.Errorf("row %d: argmax %d, xgboost's label %d", i, a, c.Labels[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d outputs differ from xgboost by more than 1e-5", bad, len(got)*len(got[0]))
			}
			t.Logf("%d rows, largest difference from xgboost %.3g", len(got), worst)
			if c.Rounds > 0 {
				xm := m.(*Model)
				if want := (c.BestIteration + 1); len(xm.roots) != want {
					t.Errorf("uses %d trees, want %d (best_iteration %d of %d rounds)", len(xm.roots), want, c.BestIteration, c.Rounds)
				}
			}
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// Ensure the package's Model satisfies the runtime's contract.
var _ serveapi.Model = (*Model)(nil)

// TestMatchesXGBoost3Files checks files saved by xgboost 3.1.1 (which
// writes base_score as a vector and pandas categoricals) against that
// version's own predictions: see testdata/xgboost3/README.md.
func TestMatchesXGBoost3Files(t *testing.T) {
	t.Parallel()
	models, err := filepath.Glob(filepath.Join("testdata", "xgboost3", "*.model.json"))
	if err != nil || len(models) < 10 {
		t.Fatalf("testdata/xgboost3 has %d models (%v), want at least 10", len(models), err)
	}
	for _, path := range models {
		name := strings.TrimSuffix(filepath.Base(path), ".model.json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := Load(path)
			if strings.HasPrefix(name, "gblinear") {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "gblinear") {
					t.Fatalf("Load of a gblinear model: %v, want ErrUnsupported naming gblinear", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var in struct {
				Features [][]*float64 `json:"features"`
			}
			var exp struct {
				Transformed json.RawMessage `json:"predictions_transformed"`
			}
			readJSON(t, strings.TrimSuffix(path, ".model.json")+".input.json", &in)
			readJSON(t, strings.TrimSuffix(path, ".model.json")+".expected.json", &exp)
			var want [][]float64
			if json.Unmarshal(exp.Transformed, &want) != nil {
				var flat []float64
				if err := json.Unmarshal(exp.Transformed, &flat); err != nil {
					t.Fatal(err)
				}
				want = nil
				for _, v := range flat {
					want = append(want, []float64{v})
				}
			}
			got, err := m.Predict(toRows(in.Features))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d output rows, xgboost %d", len(got), len(want))
			}
			for i := range want {
				for j, w := range want[i] {
					if math.Abs(float64(got[i][j])-w) > 1e-5 {
						t.Errorf("row %d output %d = %v, xgboost 3.1.1 %v", i, j, got[i][j], w)
					}
				}
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
