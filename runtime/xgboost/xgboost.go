package xgboost

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"modelplane/serveapi"
)

// ErrUnsupported is wrapped by Load's error for a valid model file whose
// booster or objective this package does not reproduce; callers report it
// as the version's invalid reason.
var ErrUnsupported = errors.New("unsupported")

// transform turns a row's margins into its output.
type transform int

const (
	identity transform = iota
	sigmoid
	softmax
	exponential
)

// objective says how xgboost turns base_score into a margin and margins into
// predictions for one objective (xgboost's ObjFunction::ProbToMargin and
// PredTransform).
type objective struct {
	kind string
	// logitBase: base_score is a probability, its margin is its logit.
	// logBase: base_score is a mean, its margin is its log.
	logitBase, logBase bool
	out                transform
}

var objectives = map[string]objective{
	"binary:logistic":      {kind: serveapi.OutputProbability, logitBase: true, out: sigmoid},
	"multi:softprob":       {kind: serveapi.OutputProbability, out: softmax},
	"multi:softmax":        {kind: serveapi.OutputProbability, out: softmax},
	"reg:squarederror":     {kind: serveapi.OutputValue},
	"reg:linear":           {kind: serveapi.OutputValue},
	"reg:squaredlogerror":  {kind: serveapi.OutputValue},
	"reg:pseudohubererror": {kind: serveapi.OutputValue},
	"reg:absoluteerror":    {kind: serveapi.OutputValue},
	"reg:quantileerror":    {kind: serveapi.OutputValue},
	"reg:logistic":         {kind: serveapi.OutputValue, logitBase: true, out: sigmoid},
	"count:poisson":        {kind: serveapi.OutputValue, logBase: true, out: exponential},
	"reg:gamma":            {kind: serveapi.OutputValue, logBase: true, out: exponential},
	"reg:tweedie":          {kind: serveapi.OutputValue, logBase: true, out: exponential},
}

// node is one tree node in the flat array. A leaf has feature -1 and its
// value in value; a split sends a row left when its feature is < value
// (numerical) or not in the node's category set (categorical, cats >= 0),
// and a NaN to left when defaultLeft.
type node struct {
	value       float32
	feature     int32
	left, right int32
	cats        int32
	defaultLeft bool
}

// Model is a loaded XGBoost model. Its arrays are read-only after Load, so
// Predict is safe for concurrent use.
type Model struct {
	nodes []node
	// roots[i] is tree i's root in nodes, groups[i] the output it adds to.
	roots  []int32
	groups []int32
	// catSets holds each categorical node's categories, sorted.
	catSets [][]uint32
	// base is each output's starting margin: base_score through the
	// objective's link.
	base      []float32
	nFeatures int
	names     []string
	nOut      int
	kind      string
	out       transform
}

var _ serveapi.Model = (*Model)(nil)

// Load reads an XGBoost JSON model file. The error names the file and what
// is wrong with it; an unsupported booster or objective wraps
// ErrUnsupported.
func Load(path string) (serveapi.Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("xgboost: %w", err)
	}
	m, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("xgboost: load %s: %w", path, err)
	}
	return m, nil
}

// parse builds a Model from a JSON model file's bytes.
func parse(data []byte) (*Model, error) {
	f, err := parseFile(data)
	if err != nil {
		return nil, err
	}
	l := f.Learner
	objName := l.Objective.Name
	obj, ok := objectives[objName]
	if !ok {
		if objName == "" {
			return nil, fmt.Errorf("no objective in the model file")
		}
		return nil, fmt.Errorf("objective %q: %w (supported: binary:logistic, multi:softprob, multi:softmax, reg:*, count:poisson)", objName, ErrUnsupported)
	}
	p := l.LearnerModelParam
	nFeatures, err := intParam("num_feature", p.NumFeature, -1)
	if err != nil {
		return nil, err
	}
	if nFeatures < 1 {
		return nil, fmt.Errorf("num_feature %q: want a positive feature count", p.NumFeature)
	}
	nClass, err := intParam("num_class", p.NumClass, 0)
	if err != nil {
		return nil, err
	}
	nTarget, err := intParam("num_target", p.NumTarget, 1)
	if err != nil {
		return nil, err
	}
	if nTarget != 1 {
		return nil, fmt.Errorf("num_target %d: multi-target models: %w", nTarget, ErrUnsupported)
	}
	nGroups := 1
	if obj.out == softmax {
		if nClass < 2 {
			return nil, fmt.Errorf("objective %s with num_class %d: want at least 2 classes", objName, nClass)
		}
		nGroups = nClass
	} else if nClass > 1 {
		return nil, fmt.Errorf("objective %s with num_class %d: a single-output objective cannot have classes", objName, nClass)
	}
	scores, err := baseScore(p.BaseScore)
	if err != nil {
		return nil, err
	}
	if len(scores) != 1 && len(scores) != nGroups {
		return nil, fmt.Errorf("base_score has %d values for %d outputs", len(scores), nGroups)
	}
	margins := make([]float32, nGroups)
	for g := range margins {
		s := scores[0]
		if len(scores) > 1 {
			s = scores[g]
		}
		if margins[g], err = baseMargin(obj, s); err != nil {
			return nil, err
		}
	}

	b := l.GradientBooster
	if b == nil {
		return nil, fmt.Errorf("no gradient_booster in the model file")
	}
	var forest *forestJSON
	var weights []float32
	switch b.Name {
	case "gbtree":
		forest = b.Model
	case "dart":
		if b.GBTree != nil {
			forest = b.GBTree.Model
		}
		weights = b.WeightDrop
	case "":
		return nil, fmt.Errorf("gradient_booster has no name")
	default:
		return nil, fmt.Errorf("booster %q: %w (supported: gbtree, dart)", b.Name, ErrUnsupported)
	}
	if forest == nil {
		return nil, fmt.Errorf("booster %s has no model", b.Name)
	}
	if v, _ := intParam("size_leaf_vector", forest.Param.SizeLeafVector, 0); v > 1 {
		return nil, fmt.Errorf("vector-leaf trees (size_leaf_vector %d): %w", v, ErrUnsupported)
	}
	trees := forest.Trees
	if len(forest.TreeInfo) != len(trees) {
		return nil, fmt.Errorf("tree_info has %d entries for %d trees", len(forest.TreeInfo), len(trees))
	}
	if weights != nil && len(weights) != len(trees) {
		return nil, fmt.Errorf("dart weight_drop has %d weights for %d trees", len(weights), len(trees))
	}
	parallel, err := intParam("num_parallel_tree", forest.Param.NumParallelTree, 1)
	if err != nil {
		return nil, err
	}
	if parallel < 1 {
		return nil, fmt.Errorf("num_parallel_tree %d: want at least 1", parallel)
	}
	use, err := treesToUse(l.Attributes, len(trees), nGroups*parallel)
	if err != nil {
		return nil, err
	}

	if len(l.FeatureNames) > 0 && len(l.FeatureNames) != nFeatures {
		return nil, fmt.Errorf("%d feature_names for num_feature %d", len(l.FeatureNames), nFeatures)
	}
	m := &Model{
		base:      margins,
		nFeatures: nFeatures,
		names:     l.FeatureNames,
		nOut:      nGroups,
		kind:      obj.kind,
		out:       obj.out,
		roots:     make([]int32, 0, use),
		groups:    make([]int32, 0, use),
	}
	for i := range use {
		g := forest.TreeInfo[i]
		if g < 0 || g >= nGroups {
			return nil, fmt.Errorf("tree %d: group %d out of range [0,%d)", i, g, nGroups)
		}
		w := float32(1)
		if weights != nil {
			w = weights[i]
		}
		root, err := m.addTree(&trees[i], w, weights != nil)
		if err != nil {
			return nil, fmt.Errorf("tree %d: %w", i, err)
		}
		m.roots = append(m.roots, root)
		m.groups = append(m.groups, int32(g))
	}
	return m, nil
}

// baseMargin is xgboost's ProbToMargin of base_score for the objective,
// computed in float32 as the library does.
func baseMargin(obj objective, base float32) (float32, error) {
	switch {
	case obj.logitBase:
		if !(base > 0 && base < 1) {
			return 0, fmt.Errorf("base_score %g: a logistic objective needs it in (0,1)", base)
		}
		return float32(-math.Log(float64(1/base - 1))), nil
	case obj.logBase:
		if !(base > 0) {
			return 0, fmt.Errorf("base_score %g: a log-link objective needs it positive", base)
		}
		return float32(math.Log(float64(base))), nil
	}
	if math.IsNaN(float64(base)) || math.IsInf(float64(base), 0) {
		return 0, fmt.Errorf("base_score %g is not finite", base)
	}
	return base, nil
}

// treesToUse is how many of the n trees predict: all of them, or those up to
// best_iteration when early stopping recorded one (a layer is one
// iteration's trees: one per class per parallel tree).
func treesToUse(attrs map[string]string, n, layer int) (int, error) {
	s, ok := attrs["best_iteration"]
	if !ok {
		return n, nil
	}
	best, err := intParam("best_iteration", s, 0)
	if err != nil {
		return 0, err
	}
	if best < 0 {
		return 0, fmt.Errorf("best_iteration %d is negative", best)
	}
	if best >= n/layer {
		return n, nil
	}
	return (best + 1) * layer, nil
}

// addTree appends one tree's nodes, checks every index the walk will
// follow, and returns the root's index. weighted scales leaves by w (dart).
func (m *Model) addTree(t *treeJSON, w float32, weighted bool) (int32, error) {
	n := len(t.Left)
	if n == 0 {
		return 0, fmt.Errorf("no nodes")
	}
	if nn, err := intParam("num_nodes", t.TreeParam.NumNodes, n); err != nil {
		return 0, err
	} else if nn != n {
		return 0, fmt.Errorf("num_nodes %d but %d left_children", nn, n)
	}
	if v, _ := intParam("size_leaf_vector", t.TreeParam.SizeLeafVector, 0); v > 1 {
		return 0, fmt.Errorf("vector leaves (size_leaf_vector %d): %w", v, ErrUnsupported)
	}
	for name, l := range map[string]int{
		"right_children":   len(t.Right),
		"split_indices":    len(t.SplitIndices),
		"split_conditions": len(t.SplitConditions),
		"default_left":     len(t.DefaultLeft),
	} {
		if l != n {
			return 0, fmt.Errorf("%s has %d entries for %d nodes", name, l, n)
		}
	}
	if t.SplitType != nil && len(t.SplitType) != n {
		return 0, fmt.Errorf("split_type has %d entries for %d nodes", len(t.SplitType), n)
	}
	if len(m.nodes)+n > math.MaxInt32 {
		return 0, fmt.Errorf("too many nodes")
	}
	cats, err := categorySets(t, n)
	if err != nil {
		return 0, err
	}

	off := int32(len(m.nodes))
	for i := range n {
		nd := node{value: float32(t.SplitConditions[i]), feature: -1, cats: -1}
		l, r := t.Left[i], t.Right[i]
		switch {
		case l == -1 && r == -1:
			if weighted {
				nd.value = float32(nd.value * w)
			}
		case l < 0 || r < 0 || int(l) >= n || int(r) >= n:
			return 0, fmt.Errorf("node %d: children %d, %d out of range [0,%d)", i, l, r, n)
		default:
			f := t.SplitIndices[i]
			if f < 0 || int(f) >= m.nFeatures {
				return 0, fmt.Errorf("node %d: feature %d out of range [0,%d)", i, f, m.nFeatures)
			}
			nd.feature, nd.left, nd.right = f, off+l, off+r
			nd.defaultLeft = bool(t.DefaultLeft[i])
			if t.SplitType != nil && t.SplitType[i] == 1 {
				set, ok := cats[int32(i)]
				if !ok {
					return 0, fmt.Errorf("node %d: categorical split without categories", i)
				}
				nd.cats = int32(len(m.catSets))
				m.catSets = append(m.catSets, set)
			} else if t.SplitType != nil && t.SplitType[i] != 0 {
				return 0, fmt.Errorf("node %d: unknown split_type %d", i, t.SplitType[i])
			}
		}
		m.nodes = append(m.nodes, nd)
	}
	if err := checkAcyclic(m.nodes[off:], off); err != nil {
		return 0, err
	}
	return off, nil
}

// categorySets reads a tree's categorical splits: categories_nodes[k]'s
// categories are categories[segments[k] : segments[k]+sizes[k]].
func categorySets(t *treeJSON, n int) (map[int32][]uint32, error) {
	k := len(t.CategoriesNodes)
	if len(t.CategoriesSegments) != k || len(t.CategoriesSizes) != k {
		return nil, fmt.Errorf("categories_nodes, categories_segments and categories_sizes differ in length (%d, %d, %d)",
			k, len(t.CategoriesSegments), len(t.CategoriesSizes))
	}
	if k == 0 {
		return nil, nil
	}
	sets := make(map[int32][]uint32, k)
	for j, nid := range t.CategoriesNodes {
		if nid < 0 || int(nid) >= n {
			return nil, fmt.Errorf("categories_nodes[%d] = %d out of range [0,%d)", j, nid, n)
		}
		seg, size := t.CategoriesSegments[j], t.CategoriesSizes[j]
		if seg < 0 || size < 0 || seg > int64(len(t.Categories)) || size > int64(len(t.Categories))-seg {
			return nil, fmt.Errorf("node %d: category segment [%d,+%d) outside %d categories", nid, seg, size, len(t.Categories))
		}
		set := make([]uint32, 0, size)
		for _, c := range t.Categories[seg : seg+size] {
			if c < 0 || c >= maxCategory {
				return nil, fmt.Errorf("node %d: category %d out of range [0,%d)", nid, c, maxCategory)
			}
			set = append(set, uint32(c))
		}
		slices.Sort(set)
		sets[nid] = set
	}
	return sets, nil
}

// maxCategory is xgboost's OutOfRangeCat: 2^24, the first float32 past
// which consecutive integers are no longer distinct.
const maxCategory = 1 << 24

// checkAcyclic walks the tree from its root (nodes[0]) and fails if a node
// is reached twice, so that Predict's walk always ends at a leaf.
func checkAcyclic(nodes []node, off int32) error {
	seen := make([]bool, len(nodes))
	stack := []int32{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[i] {
			return fmt.Errorf("node %d is reached twice: the children arrays do not form a tree", i)
		}
		seen[i] = true
		if nodes[i].feature >= 0 {
			stack = append(stack, nodes[i].left-off, nodes[i].right-off)
		}
	}
	return nil
}

// NumFeatures is the width of every input row (num_feature).
func (m *Model) NumFeatures() int { return m.nFeatures }

// FeatureNames are the names the model was trained with, in input order,
// or nil when the file has none (a model trained on a bare array). The
// runtime can check the version's feature order against them.
func (m *Model) FeatureNames() []string {
	if len(m.names) == 0 {
		return nil
	}
	return slices.Clone(m.names)
}

// OutputKind is serveapi.OutputProbability for classifiers and
// serveapi.OutputValue for regressions.
func (m *Model) OutputKind() string { return m.kind }

// NumOutputs is the width of every output row: 1, or the class count.
func (m *Model) NumOutputs() int { return m.nOut }

// Close releases nothing: the model is plain Go memory.
func (m *Model) Close() error { return nil }

// Predict scores rows. The output rows share one backing array, so a batch
// costs two allocations whatever its size.
func (m *Model) Predict(rows [][]float32) ([][]float32, error) {
	for i, r := range rows {
		if len(r) != m.nFeatures {
			return nil, fmt.Errorf("row %d has %d features, want %d", i, len(r), m.nFeatures)
		}
	}
	flat := make([]float32, len(rows)*m.nOut)
	out := make([][]float32, len(rows))
	for i, r := range rows {
		o := flat[i*m.nOut : (i+1)*m.nOut : (i+1)*m.nOut]
		m.predictRow(r, o)
		out[i] = o
	}
	return out, nil
}

// predictRow adds every tree's leaf to its group's margin, in tree order and
// in float32 as xgboost's CPU predictor does, then transforms the margins.
func (m *Model) predictRow(row, out []float32) {
	copy(out, m.base)
	nodes := m.nodes
	for t, i := range m.roots {
		for {
			n := &nodes[i]
			if n.feature < 0 {
				out[m.groups[t]] += n.value
				break
			}
			v := row[n.feature]
			switch {
			case v != v: // NaN: missing
				if n.defaultLeft {
					i = n.left
				} else {
					i = n.right
				}
			case n.cats >= 0:
				if inCategories(m.catSets[n.cats], v) {
					i = n.right
				} else {
					i = n.left
				}
			case v < n.value:
				i = n.left
			default:
				i = n.right
			}
		}
	}
	switch m.out {
	case sigmoid:
		for g, x := range out {
			out[g] = float32(1 / (1 + math.Exp(-float64(x))))
		}
	case exponential:
		for g, x := range out {
			out[g] = float32(math.Exp(float64(x)))
		}
	case softmax:
		softmaxInPlace(out)
	}
}

// inCategories is xgboost's categorical Decision negated: a valid category
// (non-negative, below 2^24, truncated to an integer) in the node's set
// goes right.
func inCategories(set []uint32, v float32) bool {
	if v < 0 || v >= maxCategory {
		return false
	}
	_, found := slices.BinarySearch(set, uint32(v))
	return found
}

// softmaxInPlace turns margins into probabilities, subtracting the largest
// margin first so that exp cannot overflow.
func softmaxInPlace(x []float32) {
	hi := x[0]
	for _, v := range x[1:] {
		if v > hi {
			hi = v
		}
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v - hi))
	}
	for i, v := range x {
		x[i] = float32(math.Exp(float64(v-hi)) / sum)
	}
}
