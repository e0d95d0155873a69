package fraud

import (
	"cmp"
	"math"
	"slices"
)

// The gradient-boosted trees trainer behind v23: logistic loss, depth-wise
// exact greedy splits, XGBoost's gain and leaf weights (second-order, L2
// regularised), and native categorical partition splits (categories sorted
// by gradient ratio, the best prefix goes left), so the trees are the kind
// xgboost itself grows and its JSON format holds them as they are.

// boostParams are the trainer's hyperparameters, named as XGBoost's.
type boostParams struct {
	rounds         int
	maxDepth       int
	eta            float64
	lambda         float64
	minChildWeight float64
}

// dataset is training data by column: cols[f][row], float32 as the runtime
// and xgboost see the features. cats[f] is the category count of a native
// categorical column (its values are category indexes), 0 for a numeric one.
type dataset struct {
	cols [][]float32
	cats []int
	y    []float64
}

func (d dataset) rows() int { return len(d.y) }

// treeNode is one node as XGBoost's JSON writes it. A leaf has left and
// right -1 and its value in value.
type treeNode struct {
	left, right int32
	parent      int32
	feature     int32
	threshold   float32 // numeric split: a row goes left when below it
	cats        []int   // categorical split: these categories go right
	value       float32 // a leaf's value (eta applied)
	weight      float32 // the node's weight (eta applied), base_weights
	gain        float32 // loss_changes
	hessian     float32 // sum_hessian
}

func (n treeNode) leaf() bool { return n.left < 0 }

// noParent is XGBoost's parent of a root.
const noParent = math.MaxInt32

// split is the best split found for a node.
type split struct {
	gain           float64
	feature        int
	threshold      float32
	rightCats      []int
	gl, hl, gr, hr float64
}

// boost trains the forest and returns base_score (the training base rate)
// with the trees.
func boost(d dataset, p boostParams) (float32, [][]treeNode) {
	n := d.rows()
	pos := 0.0
	for _, y := range d.y {
		pos += y
	}
	base := float32(pos / float64(n))
	// The margin every prediction starts from, as the runtime computes it.
	baseMargin := float64(float32(-math.Log(float64(1/base - 1))))
	margin := make([]float64, n)
	for i := range margin {
		margin[i] = baseMargin
	}
	order := make([][]int32, len(d.cols))
	for f, col := range d.cols {
		if d.cats[f] > 0 {
			continue
		}
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(col[a], col[b]) })
		order[f] = idx
	}
	g := make([]float64, n)
	h := make([]float64, n)
	at := make([]int32, n)
	trees := make([][]treeNode, 0, p.rounds)
	for range p.rounds {
		for i := range n {
			pr := 1 / (1 + math.Exp(-margin[i]))
			g[i] = pr - d.y[i]
			h[i] = math.Max(pr*(1-pr), 1e-16)
			at[i] = 0
		}
		t := growTree(d, p, order, g, h, at)
		for i := range n {
			margin[i] += float64(t[at[i]].value)
		}
		trees = append(trees, t)
	}
	return base, trees
}

// growTree grows one tree depth by depth; at[i] ends as row i's leaf.
func growTree(d dataset, p boostParams, order [][]int32, g, h []float64, at []int32) []treeNode {
	var sg, sh float64
	for i := range g {
		sg += g[i]
		sh += h[i]
	}
	nodes := []treeNode{{left: -1, right: -1, parent: noParent}}
	sumG, sumH := []float64{sg}, []float64{sh}
	frontier := []int32{0}
	for depth := 0; depth < p.maxDepth && len(frontier) > 0; depth++ {
		// best[nd] is frontier node nd's best split so far; nil for
		// the nodes not on the frontier.
		best := make([]*split, len(nodes))
		for _, nd := range frontier {
			best[nd] = &split{}
		}
		for f := range d.cols {
			if d.cats[f] > 0 {
				categoricalSplits(d, p, f, frontier, best, g, h, at, sumG, sumH)
			} else {
				numericSplits(d, p, f, order[f], best, g, h, at, sumG, sumH)
			}
		}
		var next []int32
		for _, nd := range frontier {
			s := best[nd]
			if s.gain <= 1e-6 {
				continue
			}
			l, r := int32(len(nodes)), int32(len(nodes)+1)
			nodes[nd].left, nodes[nd].right = l, r
			nodes[nd].feature = int32(s.feature)
			nodes[nd].threshold = s.threshold
			nodes[nd].cats = s.rightCats
			nodes[nd].gain = float32(s.gain)
			nodes = append(nodes,
				treeNode{left: -1, right: -1, parent: nd},
				treeNode{left: -1, right: -1, parent: nd})
			sumG = append(sumG, s.gl, s.gr)
			sumH = append(sumH, s.hl, s.hr)
			next = append(next, l, r)
		}
		if len(next) == 0 {
			break
		}
		for i := range at {
			n := &nodes[at[i]]
			if n.leaf() {
				continue
			}
			v := d.cols[n.feature][i]
			if goesRight(*n, v) {
				at[i] = n.right
			} else {
				at[i] = n.left
			}
		}
		frontier = next
	}
	for i := range nodes {
		w := float32(-sumG[i] / (sumH[i] + p.lambda) * p.eta)
		nodes[i].weight = w
		nodes[i].hessian = float32(sumH[i])
		if nodes[i].leaf() {
			nodes[i].value = w
		}
	}
	return nodes
}

// goesRight is XGBoost's decision for a split node: a numeric value at or
// above the threshold, or a category in the node's set, goes right.
func goesRight(n treeNode, v float32) bool {
	if n.cats != nil {
		_, in := slices.BinarySearch(n.cats, int(v))
		return in
	}
	return v >= n.threshold
}

// gain is XGBoost's split gain without the 1/2 and gamma.
func gain(p boostParams, gl, hl, gr, hr float64) float64 {
	return gl*gl/(hl+p.lambda) + gr*gr/(hr+p.lambda) - (gl+gr)*(gl+gr)/(hl+hr+p.lambda)
}

// numericSplits scans feature f's sorted values once for every frontier
// node, evaluating a threshold between each pair of distinct values.
func numericSplits(d dataset, p boostParams, f int, order []int32, best []*split,
	g, h []float64, at []int32, sumG, sumH []float64) {
	col := d.cols[f]
	type scan struct {
		gl, hl float64
		last   float32
		seen   bool
	}
	state := make([]scan, len(best))
	for _, r := range order {
		nd := at[r]
		if best[nd] == nil {
			continue
		}
		s := &state[nd]
		v := col[r]
		if s.seen && v != s.last {
			gr, hr := sumG[nd]-s.gl, sumH[nd]-s.hl
			if s.hl >= p.minChildWeight && hr >= p.minChildWeight {
				if gn := gain(p, s.gl, s.hl, gr, hr); gn > best[nd].gain {
					thr := float32((float64(s.last) + float64(v)) / 2)
					if thr <= s.last {
						thr = v
					}
					*best[nd] = split{gain: gn, feature: f, threshold: thr, gl: s.gl, hl: s.hl, gr: gr, hr: hr}
				}
			}
		}
		s.gl += g[r]
		s.hl += h[r]
		s.last, s.seen = v, true
	}
}

// categoricalSplits finds each frontier node's best partition of feature
// f's categories: sorted by gradient ratio, every prefix is a left set.
func categoricalSplits(d dataset, p boostParams, f int, frontier []int32, best []*split,
	g, h []float64, at []int32, sumG, sumH []float64) {
	k := d.cats[f]
	slot := make([]int, len(best))
	for i := range slot {
		slot[i] = -1
	}
	for i, nd := range frontier {
		slot[nd] = i
	}
	cg := make([]float64, len(frontier)*k)
	ch := make([]float64, len(frontier)*k)
	col := d.cols[f]
	for r, nd := range at {
		i := slot[nd]
		if i < 0 {
			continue
		}
		c := int(col[r])
		cg[i*k+c] += g[r]
		ch[i*k+c] += h[r]
	}
	for i, nd := range frontier {
		var present []int
		for c := range k {
			if ch[i*k+c] > 0 {
				present = append(present, c)
			}
		}
		ratio := func(c int) float64 { return cg[i*k+c] / (ch[i*k+c] + p.lambda) }
		slices.SortStableFunc(present, func(a, b int) int { return cmp.Compare(ratio(a), ratio(b)) })
		var gl, hl float64
		for j := 0; j+1 < len(present); j++ {
			c := present[j]
			gl += cg[i*k+c]
			hl += ch[i*k+c]
			gr, hr := sumG[nd]-gl, sumH[nd]-hl
			if hl < p.minChildWeight || hr < p.minChildWeight {
				continue
			}
			if gn := gain(p, gl, hl, gr, hr); gn > best[nd].gain {
				right := slices.Clone(present[j+1:])
				slices.Sort(right)
				*best[nd] = split{gain: gn, feature: f, rightCats: right, gl: gl, hl: hl, gr: gr, hr: hr}
			}
		}
	}
}
