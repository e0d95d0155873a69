package registry_test

import (
	"encoding/json"
	"testing"

	"modelplane/registry"
)

// TestCompareAnswers: another version's stored answers are matched to the
// version's inputs by value (key order aside); inputs it did not answer
// stay unmatched and out of the rate; labels that differ count as
// disagreements, and answers without a label (a regression) are not
// compared.
func TestCompareAnswers(t *testing.T) {
	t.Parallel()
	val := func(inputs, outputs string) *registry.Validation {
		return &registry.Validation{State: registry.StatusValidated, Inputs: json.RawMessage(inputs), Outputs: json.RawMessage(outputs)}
	}
	for _, tc := range []struct {
		name               string
		mine, theirs       *registry.Validation
		compared, disagree int
		differs            []bool
		unmatched          []int
	}{
		{"same inputs, one label differs",
			val(`[{"a":1,"b":"x"},{"a":2,"b":"y"}]`, `[{"label":"legit","score":0.1},{"label":"legit","score":0.23}]`),
			val(`[{"b":"x", "a":1},{"a":2,"b":"y"}]`, `[{"label":"legit","score":0.2},{"label":"fraud","score":0.97}]`),
			2, 1, []bool{false, true}, nil},
		{"an input the other never answered",
			val(`[{"a":1},{"a":3}]`, `[{"label":"legit"},{"label":"fraud"}]`),
			val(`[{"a":1}]`, `[{"label":"fraud"}]`),
			1, 1, []bool{true, false}, []int{1}},
		{"regression values are not labels",
			val(`[{"a":1}]`, `[{"value":1.5}]`), val(`[{"a":1}]`, `[{"value":2.5}]`),
			0, 0, []bool{false}, nil},
		{"no validation to compare with",
			val(`[{"a":1}]`, `[{"label":"legit"}]`), nil,
			0, 0, []bool{false}, []int{0}},
	} {
		c := registry.CompareAnswers(tc.mine, tc.theirs)
		if c.Compared != tc.compared || c.Disagree != tc.disagree {
			t.Errorf("%s: %d of %d disagree, want %d of %d", tc.name, c.Disagree, c.Compared, tc.disagree, tc.compared)
		}
		if len(c.Differs) != len(tc.differs) {
			t.Fatalf("%s: differs %v, want %v", tc.name, c.Differs, tc.differs)
		}
		for i := range tc.differs {
			if c.Differs[i] != tc.differs[i] {
				t.Errorf("%s: input %d differs %v, want %v", tc.name, i, c.Differs[i], tc.differs[i])
			}
		}
		for _, i := range tc.unmatched {
			if c.Theirs[i] != nil {
				t.Errorf("%s: input %d matched %+v, want no answer", tc.name, i, c.Theirs[i])
			}
		}
	}
}
