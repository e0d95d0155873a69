package lightgbm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dmitryikh/leaves"

	"modelplane/serveapi"
)

// ErrUnsupported is wrapped by Load's error for a valid LightGBM model this
// package does not score; callers report it as the version's invalid reason.
var ErrUnsupported = errors.New("unsupported")

// transform turns a row's raw scores into its output.
type transform int

const (
	identity transform = iota
	sigmoid
	softmax
	exponential
	squared // "regression sqrt": the model predicts sign(y)·sqrt(|y|)
)

// Model is a loaded LightGBM model.
type Model struct {
	ens       *leaves.Ensemble
	nFeatures int
	names     []string
	nOut      int
	kind      string
	out       transform
	// scale multiplies raw scores before a sigmoid (LightGBM's sigmoid
	// parameter).
	scale float64
}

var _ serveapi.Model = (*Model)(nil)

// Load reads a LightGBM text model file. The error names the file and what
// is wrong; an unsupported objective or model kind wraps ErrUnsupported.
func Load(path string) (serveapi.Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lightgbm: %w", err)
	}
	m, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("lightgbm: load %s: %w", path, err)
	}
	return m, nil
}

// parse checks a text model and hands it to leaves.
func parse(data []byte) (m *Model, err error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if string(bytes.TrimSpace(first)) != "tree" {
		return nil, fmt.Errorf("not a LightGBM text model (it starts with the line \"tree\"; save it with Booster.save_model)")
	}
	// The header block includes the "tree" line, as leaves reads it.
	lr := &lines{data: data}
	header, _, err := readBlock(lr)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	h, err := readHeader(header)
	if err != nil {
		return nil, err
	}
	next := -1 // where the next tree's "Tree=" line must start
	for i := range h.nTrees {
		block, at, err := readBlock(lr)
		if err != nil {
			return nil, fmt.Errorf("tree %d of %d: %w", i, h.nTrees, err)
		}
		if block["Tree"] != strconv.Itoa(i) || (next >= 0 && at != next) {
			return nil, fmt.Errorf("tree %d is not where tree_sizes puts it: truncated or edited file", i)
		}
		if err := checkTree(block, h.nFeatures); err != nil {
			return nil, fmt.Errorf("tree %d: %w", i, err)
		}
		next = at + h.treeSizes[i]
	}
	// LightGBM records each tree's length in tree_sizes and ends the trees
	// with a marker; a last tree cut short would otherwise load as another
	// model.
	if next > len(data) || !bytes.HasPrefix(data[next:], []byte("end of trees")) {
		return nil, fmt.Errorf("no \"end of trees\" where tree_sizes says the trees end: truncated or edited file")
	}

	if h.version == "v4" {
		// leaves accepts only v2 and v3; v4's tree blocks, linear trees
		// aside (refused by checkTree), read the same.
		data = bytes.Replace(data, []byte("\nversion=v4\n"), []byte("\nversion=v3\n"), 1)
	}
	// The checks above cover every index leaves follows; recover anyway, so
	// that a case they miss is an error and not a crashed runtime.
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("malformed model: %v", p)
		}
	}()
	ens, err := leaves.LGEnsembleFromReader(bufio.NewReader(bytes.NewReader(data)), false)
	if err != nil {
		return nil, fmt.Errorf("read trees: %w", err)
	}
	if ens.NRawOutputGroups() != h.nOut {
		return nil, fmt.Errorf("leaves read %d outputs, the header says %d", ens.NRawOutputGroups(), h.nOut)
	}
	return &Model{ens: ens, nFeatures: h.nFeatures, names: h.names, nOut: h.nOut, kind: h.kind, out: h.out, scale: h.scale}, nil
}

// header is what the model file's first block says.
type header struct {
	version   string
	nFeatures int
	nOut      int
	nTrees    int
	treeSizes []int
	names     []string
	kind      string
	out       transform
	scale     float64
}

func readHeader(p map[string]string) (header, error) {
	h := header{version: p["version"], scale: 1}
	switch h.version {
	case "v2", "v3", "v4":
	case "":
		return h, fmt.Errorf("no version in the header")
	default:
		return h, fmt.Errorf("model format %q: %w (LightGBM writes v2 to v4)", h.version, ErrUnsupported)
	}
	nClass, err := atoi(p, "num_class")
	if err != nil {
		return h, err
	}
	perIter, err := atoi(p, "num_tree_per_iteration")
	if err != nil {
		return h, err
	}
	if nClass < 1 || perIter != nClass {
		return h, fmt.Errorf("num_class %d and num_tree_per_iteration %d: want equal and positive", nClass, perIter)
	}
	maxFeature, err := atoi(p, "max_feature_idx")
	if err != nil {
		return h, err
	}
	if maxFeature < 0 {
		return h, fmt.Errorf("max_feature_idx %d is negative", maxFeature)
	}
	h.nFeatures = maxFeature + 1
	if names := strings.Fields(p["feature_names"]); len(names) > 0 {
		if len(names) != h.nFeatures {
			return h, fmt.Errorf("%d feature_names for max_feature_idx %d", len(names), maxFeature)
		}
		h.names = names
	}
	sizes, ok := p["tree_sizes"]
	if !ok || strings.TrimSpace(sizes) == "" {
		return h, fmt.Errorf("no tree_sizes in the header")
	}
	for _, f := range strings.Split(sizes, " ") {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return h, fmt.Errorf("tree_sizes entry %q is not a positive integer", f)
		}
		h.treeSizes = append(h.treeSizes, v)
	}
	h.nTrees = len(h.treeSizes)
	if h.nTrees%nClass != 0 {
		return h, fmt.Errorf("%d trees for %d classes", h.nTrees, nClass)
	}
	_, rf := p["average_output"]
	if rf && h.version != "v2" {
		return h, fmt.Errorf("random forest (average_output) in format %s: %w", h.version, ErrUnsupported)
	}

	obj, ok := p["objective"]
	if !ok {
		return h, fmt.Errorf("no objective in the header (custom objective): %w", ErrUnsupported)
	}
	fields := strings.Fields(obj)
	if len(fields) == 0 {
		return h, fmt.Errorf("empty objective: %w", ErrUnsupported)
	}
	name, args := fields[0], map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, ":")
		args[k] = v
	}
	classes := func() error {
		n, err := strconv.Atoi(args["num_class"])
		if err != nil || n != nClass {
			return fmt.Errorf("objective %q: num_class does not match the header's %d", obj, nClass)
		}
		return nil
	}
	sigmoidArg := func() error {
		s, ok := args["sigmoid"]
		if !ok {
			return nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("objective %q: bad sigmoid %q", obj, s)
		}
		h.scale = v
		return nil
	}
	single := func() error {
		if nClass != 1 {
			return fmt.Errorf("objective %s with %d classes", name, nClass)
		}
		return nil
	}
	h.nOut = nClass
	switch name {
	case "binary":
		h.kind, h.out = serveapi.OutputProbability, sigmoid
		err = errors.Join(single(), sigmoidArg())
	case "cross_entropy", "xentropy":
		h.kind, h.out = serveapi.OutputProbability, sigmoid
		err = single()
	case "multiclass", "softmax":
		h.kind, h.out = serveapi.OutputProbability, softmax
		err = classes()
	case "multiclassova", "multiclass_ova", "ova", "ovr":
		h.kind, h.out = serveapi.OutputProbability, sigmoid
		err = errors.Join(classes(), sigmoidArg())
	case "regression", "regression_l2", "regression_l1", "huber", "fair", "quantile", "mape":
		h.kind, h.out = serveapi.OutputValue, identity
		if _, ok := args["sqrt"]; ok {
			h.out = squared
		}
		err = single()
	case "poisson", "gamma", "tweedie":
		h.kind, h.out = serveapi.OutputValue, exponential
		err = single()
	default:
		return h, fmt.Errorf("objective %q: %w (supported: binary, multiclass, multiclassova, cross_entropy, regression objectives, poisson, gamma, tweedie)", name, ErrUnsupported)
	}
	if err != nil {
		return h, err
	}
	if rf {
		// LightGBM 2 stored a random forest's leaves already transformed.
		h.out, h.scale = identity, 1
	}
	return h, nil
}

func atoi(p map[string]string, key string) (int, error) {
	s, ok := p[key]
	if !ok {
		return 0, fmt.Errorf("no %s", key)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not an integer", key, s)
	}
	return v, nil
}

// lines reads a file line by line as bufio.Reader.ReadString('\n') does,
// and knows where each line starts.
type lines struct {
	data []byte
	pos  int
}

// read returns the next line with its newline, where it starts, and
// whether it ended with a newline (false at the end of the data).
func (l *lines) read() (line string, start int, newline bool) {
	start = l.pos
	i := bytes.IndexByte(l.data[l.pos:], '\n')
	if i < 0 {
		l.pos = len(l.data)
		return string(l.data[start:]), start, false
	}
	l.pos += i + 1
	return string(l.data[start:l.pos]), start, true
}

// readBlock reads key=value lines up to a blank line exactly as leaves'
// reader does (its first line is taken even when blank, so the second of
// the two blank lines between trees opens the next block), so that the
// blocks checked here are the blocks leaves builds trees from. treeAt is
// where the block's "Tree=" line starts, -1 if it has none.
func readBlock(l *lines) (p map[string]string, treeAt int, err error) {
	line, start, newline := l.read()
	if !newline {
		return nil, 0, fmt.Errorf("unexpected end of file")
	}
	p, treeAt = map[string]string{}, -1
	for {
		line = strings.TrimSpace(line)
		k, v, found := strings.Cut(line, "=")
		if found && strings.Contains(v, "=") {
			return nil, 0, fmt.Errorf("line %.40q has more than one '='", line)
		}
		if k == "Tree" && treeAt < 0 {
			treeAt = start
		}
		p[k] = v
		line, start, _ = l.read()
		if strings.TrimSpace(line) == "" {
			return p, treeAt, nil
		}
	}
}

// checkTree checks one tree block for everything leaves indexes with.
func checkTree(p map[string]string, nFeatures int) error {
	if p["is_linear"] == "1" {
		return fmt.Errorf("linear tree: %w", ErrUnsupported)
	}
	nLeaves, err := atoi(p, "num_leaves")
	if err != nil {
		return err
	}
	if nLeaves < 1 {
		return fmt.Errorf("num_leaves %d", nLeaves)
	}
	if nLeaves > 1<<24 {
		return fmt.Errorf("num_leaves %d is too large", nLeaves)
	}
	nCat, err := atoi(p, "num_cat")
	if err != nil {
		return err
	}
	if _, err := floats(p, "leaf_value", nLeaves); err != nil {
		return err
	}
	if nLeaves == 1 {
		return nil
	}
	n := nLeaves - 1
	left, err := ints(p, "left_child", n)
	if err != nil {
		return err
	}
	right, err := ints(p, "right_child", n)
	if err != nil {
		return err
	}
	features, err := ints(p, "split_feature", n)
	if err != nil {
		return err
	}
	decision, err := ints(p, "decision_type", n)
	if err != nil {
		return err
	}
	thresholds, err := floats(p, "threshold", n)
	if err != nil {
		return err
	}
	var boundaries []int64
	var nWords int
	if nCat > 0 {
		if boundaries, err = ints(p, "cat_boundaries", nCat+1); err != nil {
			return err
		}
		words := strings.Fields(p["cat_threshold"])
		nWords = len(words)
		for _, w := range words {
			if _, err := strconv.ParseUint(w, 10, 32); err != nil {
				return fmt.Errorf("cat_threshold %q is not a uint32", w)
			}
		}
		if boundaries[0] != 0 || boundaries[nCat] != int64(nWords) {
			return fmt.Errorf("cat_boundaries do not span cat_threshold's %d words", nWords)
		}
		for i := 1; i <= nCat; i++ {
			if boundaries[i] <= boundaries[i-1] {
				return fmt.Errorf("cat_boundaries are not increasing")
			}
		}
	} else if nCat < 0 {
		return fmt.Errorf("num_cat %d", nCat)
	}
	for i := range n {
		if features[i] < 0 || features[i] >= int64(nFeatures) {
			return fmt.Errorf("node %d: split_feature %d out of range [0,%d)", i, features[i], nFeatures)
		}
		if decision[i] < 0 || decision[i] > math.MaxUint8 {
			return fmt.Errorf("node %d: decision_type %d", i, decision[i])
		}
		if decision[i]&1 != 0 {
			c := thresholds[i]
			if nCat == 0 || !(c >= 0 && c < float64(nCat)) || c != math.Trunc(c) {
				return fmt.Errorf("node %d: categorical threshold %v is not one of %d category sets", i, c, nCat)
			}
		}
		for _, c := range []int64{left[i], right[i]} {
			if c >= int64(n) || ^c >= int64(nLeaves) || c == 0 {
				return fmt.Errorf("node %d: child %d out of range", i, c)
			}
		}
	}
	// Every internal node but the root and every leaf must be reached
	// exactly once from the root.
	seenNode, seenLeaf := make([]bool, n), make([]bool, nLeaves)
	stack := []int64{0}
	seenNode[0] = true
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range []int64{left[i], right[i]} {
			if c < 0 {
				if seenLeaf[^c] {
					return fmt.Errorf("leaf %d is reached twice", ^c)
				}
				seenLeaf[^c] = true
				continue
			}
			if seenNode[c] {
				return fmt.Errorf("node %d is reached twice: the children do not form a tree", c)
			}
			seenNode[c] = true
			stack = append(stack, c)
		}
	}
	for i, s := range seenNode {
		if !s {
			return fmt.Errorf("node %d is not reached from the root", i)
		}
	}
	return nil
}

func fieldsOf(p map[string]string, key string, want int) ([]string, error) {
	s, ok := p[key]
	if !ok {
		return nil, fmt.Errorf("no %s", key)
	}
	f := strings.Fields(s)
	if len(f) != want {
		return nil, fmt.Errorf("%s has %d values, want %d", key, len(f), want)
	}
	return f, nil
}

func ints(p map[string]string, key string, want int) ([]int64, error) {
	f, err := fieldsOf(p, key, want)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(f))
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s value %q is not an int32", key, s)
		}
		out[i] = v
	}
	return out, nil
}

func floats(p map[string]string, key string, want int) ([]float64, error) {
	f, err := fieldsOf(p, key, want)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(f))
	for i, s := range f {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s value %q is not a number", key, s)
		}
		out[i] = v
	}
	return out, nil
}

// NumFeatures is the width of every input row (max_feature_idx + 1).
func (m *Model) NumFeatures() int { return m.nFeatures }

// FeatureNames are the names in the file's feature_names, in input order
// (LightGBM writes Column_0, Column_1, ... for a model trained on a bare
// array), or nil when it has none. The runtime can check the version's
// feature order against them.
func (m *Model) FeatureNames() []string { return slices.Clone(m.names) }

// OutputKind is serveapi.OutputProbability for classifiers and
// serveapi.OutputValue for regressions.
func (m *Model) OutputKind() string { return m.kind }

// NumOutputs is the width of every output row: 1, or the class count.
func (m *Model) NumOutputs() int { return m.nOut }

// Close releases nothing: the model is plain Go memory.
func (m *Model) Close() error { return nil }

// Predict scores rows. A NaN feature is LightGBM's missing value: it
// follows the split's missing rule (or counts as zero where the split has
// none), as in LightGBM.
func (m *Model) Predict(rows [][]float32) (out [][]float32, err error) {
	for i, r := range rows {
		if len(r) != m.nFeatures {
			return nil, fmt.Errorf("row %d has %d features, want %d", i, len(r), m.nFeatures)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("lightgbm: predict: %v", p)
		}
	}()
	fvals := make([]float64, m.nFeatures)
	raw := make([]float64, m.nOut)
	flat := make([]float32, len(rows)*m.nOut)
	out = make([][]float32, len(rows))
	for i, r := range rows {
		for j, v := range r {
			fvals[j] = float64(v)
		}
		if err := m.ens.Predict(fvals, 0, raw); err != nil {
			return nil, fmt.Errorf("lightgbm: predict row %d: %w", i, err)
		}
		o := flat[i*m.nOut : (i+1)*m.nOut : (i+1)*m.nOut]
		m.transform(raw, o)
		out[i] = o
	}
	return out, nil
}

func (m *Model) transform(raw []float64, out []float32) {
	switch m.out {
	case sigmoid:
		for i, x := range raw {
			out[i] = float32(1 / (1 + math.Exp(-m.scale*x)))
		}
	case softmax:
		hi := raw[0]
		for _, x := range raw[1:] {
			hi = math.Max(hi, x)
		}
		var sum float64
		for _, x := range raw {
			sum += math.Exp(x - hi)
		}
		for i, x := range raw {
			out[i] = float32(math.Exp(x-hi) / sum)
		}
	case exponential:
		for i, x := range raw {
			out[i] = float32(math.Exp(x))
		}
	case squared:
		for i, x := range raw {
			out[i] = float32(math.Copysign(x*x, x))
		}
	default:
		for i, x := range raw {
			out[i] = float32(x)
		}
	}
}
