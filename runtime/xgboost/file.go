package xgboost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The types below mirror the parts of xgboost's JSON model schema
// (doc/model.schema in the xgboost sources) that prediction reads. xgboost
// writes most scalar parameters as strings ("5E-1"), arrays as JSON arrays.

type fileJSON struct {
	Learner *learnerJSON `json:"learner"`
	Version []int        `json:"version"`
}

type learnerJSON struct {
	Attributes        map[string]string `json:"attributes"`
	FeatureNames      []string          `json:"feature_names"`
	GradientBooster   *boosterJSON      `json:"gradient_booster"`
	LearnerModelParam struct {
		BaseScore  string `json:"base_score"`
		NumClass   string `json:"num_class"`
		NumFeature string `json:"num_feature"`
		NumTarget  string `json:"num_target"`
	} `json:"learner_model_param"`
	Objective struct {
		Name string `json:"name"`
	} `json:"objective"`
}

type boosterJSON struct {
	Name string `json:"name"`
	// Model is gbtree's forest.
	Model *forestJSON `json:"model"`
	// GBTree and WeightDrop are dart's: its forest and one weight per tree.
	GBTree *struct {
		Model *forestJSON `json:"model"`
	} `json:"gbtree"`
	WeightDrop []float32 `json:"weight_drop"`
}

type forestJSON struct {
	Param struct {
		NumParallelTree string `json:"num_parallel_tree"`
		NumTrees        string `json:"num_trees"`
		SizeLeafVector  string `json:"size_leaf_vector"`
	} `json:"gbtree_model_param"`
	TreeInfo []int      `json:"tree_info"`
	Trees    []treeJSON `json:"trees"`
}

type treeJSON struct {
	Left               []int32  `json:"left_children"`
	Right              []int32  `json:"right_children"`
	SplitIndices       []int32  `json:"split_indices"`
	SplitConditions    []number `json:"split_conditions"`
	DefaultLeft        []flag   `json:"default_left"`
	SplitType          []int    `json:"split_type"`
	Categories         []int64  `json:"categories"`
	CategoriesNodes    []int32  `json:"categories_nodes"`
	CategoriesSegments []int64  `json:"categories_segments"`
	CategoriesSizes    []int64  `json:"categories_sizes"`
	TreeParam          struct {
		NumNodes       string `json:"num_nodes"`
		SizeLeafVector string `json:"size_leaf_vector"`
	} `json:"tree_param"`
}

// flag is one default_left entry: xgboost 1.x writes 0/1, other writers
// true/false.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "1", "true":
		*f = true
	case "0", "false":
		*f = false
	default:
		return fmt.Errorf("default_left entry %s is neither 0/1 nor a boolean", b)
	}
	return nil
}

// number is a float32 that may also be one of the non-finite literals
// xgboost writes (NaN for a categorical node's unused threshold), which
// quoteNonFinite has turned into strings.
type number float32

func (n *number) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*n = number(math.NaN())
	case `"Infinity"`:
		*n = number(math.Inf(1))
	case `"-Infinity"`:
		*n = number(math.Inf(-1))
	default:
		v, err := strconv.ParseFloat(string(b), 32)
		if err != nil {
			return fmt.Errorf("%s is not a float32", b)
		}
		*n = number(v)
	}
	return nil
}

// quoteNonFinite rewrites the bare NaN, Infinity and -Infinity literals
// xgboost's JSON writer emits (standard JSON has none) as strings, leaving
// string contents alone. It returns data itself when there are none.
func quoteNonFinite(data []byte) []byte {
	var out []byte
	inString, escaped := false, false
	last := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		var lit string
		switch {
		case c == '"':
			inString = true
			continue
		case c == 'N' && bytes.HasPrefix(data[i:], []byte("NaN")):
			lit = "NaN"
		case c == 'I' && bytes.HasPrefix(data[i:], []byte("Infinity")):
			lit = "Infinity"
		case c == '-' && bytes.HasPrefix(data[i:], []byte("-Infinity")):
			lit = "-Infinity"
		default:
			continue
		}
		out = append(out, data[last:i]...)
		out = append(out, '"')
		out = append(out, lit...)
		out = append(out, '"')
		i += len(lit) - 1
		last = i + 1
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// intParam reads one of xgboost's string-valued integer parameters; empty
// means def.
func intParam(name, s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not an integer", name, s)
	}
	return v, nil
}

// baseScore reads learner_model_param.base_score: "5E-1" in xgboost 1.x
// and 2.x, a vector "[5E-1]" from 3.0 on, with one value per class for a
// multiclass model.
func baseScore(s string) ([]float32, error) {
	if s == "" {
		return []float32{0.5}, nil // xgboost's default before it estimated one
	}
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
		t = t[1 : len(t)-1]
	}
	var out []float32
	for _, f := range strings.Split(t, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
		if err != nil {
			return nil, fmt.Errorf("base_score %q is not a number or a list of numbers", s)
		}
		out = append(out, float32(v))
	}
	return out, nil
}

func parseFile(data []byte) (*fileJSON, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("not a JSON model (xgboost's binary and UBJSON formats are not read: save it with Booster.save_model(\"model.json\"))")
	}
	var f fileJSON
	if err := json.Unmarshal(quoteNonFinite(data), &f); err != nil {
		return nil, fmt.Errorf("invalid model JSON: %w", err)
	}
	if f.Learner == nil {
		return nil, fmt.Errorf("no \"learner\" object: not an xgboost JSON model")
	}
	return &f, nil
}
