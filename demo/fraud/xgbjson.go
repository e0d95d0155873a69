package fraud

import (
	"bytes"
	"strconv"
	"strings"
)

// xgboostJSON writes the forest in the JSON model format xgboost 1.7 saves
// (Booster.save_model("model.json")): the learner's parameters, feature
// names and types ("q" numeric, "c" categorical), and per tree the arrays
// of its nodes, categorical splits included. Written by hand, not with
// encoding/json, so that the bytes are fixed by the trees alone and the
// number formatting is the shortest that reads back as the same float32.
func xgboostJSON(names []string, cats []int, base float32, trees [][]treeNode) []byte {
	var b bytes.Buffer
	b.WriteString(`{"learner":{"attributes":{},"feature_names":[`)
	for i, n := range names {
		comma(&b, i)
		b.WriteString(strconv.Quote(n))
	}
	b.WriteString(`],"feature_types":[`)
	for i, c := range cats {
		comma(&b, i)
		if c > 0 {
			b.WriteString(`"c"`)
		} else {
			b.WriteString(`"q"`)
		}
	}
	nf := strconv.Itoa(len(names))
	b.WriteString(`],"gradient_booster":{"model":{"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"`)
	b.WriteString(strconv.Itoa(len(trees)))
	b.WriteString(`","size_leaf_vector":"0"},"tree_info":[`)
	for i := range trees {
		comma(&b, i)
		b.WriteByte('0')
	}
	b.WriteString(`],"trees":[`)
	for i, t := range trees {
		comma(&b, i)
		writeTree(&b, i, nf, t)
	}
	b.WriteString(`]},"name":"gbtree"},"learner_model_param":{"base_score":"`)
	b.WriteString(formatFloat(base))
	b.WriteString(`","boost_from_average":"1","num_class":"0","num_feature":"`)
	b.WriteString(nf)
	b.WriteString(`","num_target":"1"},"objective":{"name":"binary:logistic","reg_loss_param":{"scale_pos_weight":"1"}}},"version":[1,7,4]}`)
	return b.Bytes()
}

func writeTree(b *bytes.Buffer, id int, numFeature string, t []treeNode) {
	list := func(key string, n int, v func(i int) string) {
		b.WriteString(`"` + key + `":[`)
		for i := range n {
			comma(b, i)
			b.WriteString(v(i))
		}
		b.WriteString(`],`)
	}
	var catNodes, catSegs, catSizes, catValues []int
	for i, n := range t {
		if n.cats != nil {
			catNodes = append(catNodes, i)
			catSegs = append(catSegs, len(catValues))
			catSizes = append(catSizes, len(n.cats))
			catValues = append(catValues, n.cats...)
		}
	}
	ints := func(xs []int) func(int) string { return func(i int) string { return strconv.Itoa(xs[i]) } }
	b.WriteByte('{')
	list("base_weights", len(t), func(i int) string { return formatFloat(t[i].weight) })
	list("categories", len(catValues), ints(catValues))
	list("categories_nodes", len(catNodes), ints(catNodes))
	list("categories_segments", len(catSegs), ints(catSegs))
	list("categories_sizes", len(catSizes), ints(catSizes))
	list("default_left", len(t), func(i int) string {
		if t[i].leaf() {
			return "0"
		}
		return "1"
	})
	b.WriteString(`"id":` + strconv.Itoa(id) + `,`)
	list("left_children", len(t), func(i int) string { return strconv.Itoa(int(t[i].left)) })
	list("loss_changes", len(t), func(i int) string { return formatFloat(t[i].gain) })
	list("parents", len(t), func(i int) string { return strconv.Itoa(int(t[i].parent)) })
	list("right_children", len(t), func(i int) string { return strconv.Itoa(int(t[i].right)) })
	list("split_conditions", len(t), func(i int) string {
		switch {
		case t[i].leaf():
			return formatFloat(t[i].value)
		case t[i].cats != nil:
			return "0.0" // unused by a categorical split (xgboost writes NaN, which is not JSON)
		}
		return formatFloat(t[i].threshold)
	})
	list("split_indices", len(t), func(i int) string {
		if t[i].leaf() {
			return "0"
		}
		return strconv.Itoa(int(t[i].feature))
	})
	list("split_type", len(t), func(i int) string {
		if t[i].cats != nil {
			return "1"
		}
		return "0"
	})
	list("sum_hessian", len(t), func(i int) string { return formatFloat(t[i].hessian) })
	b.WriteString(`"tree_param":{"num_deleted":"0","num_feature":"` + numFeature +
		`","num_nodes":"` + strconv.Itoa(len(t)) + `","size_leaf_vector":"0"}}`)
}

func comma(b *bytes.Buffer, i int) {
	if i > 0 {
		b.WriteByte(',')
	}
}

// formatFloat is the shortest decimal that reads back as v, always with a
// point or an exponent: xgboost's JSON reader takes "1" for an integer and
// refuses it where a number is due.
func formatFloat(v float32) string {
	s := strconv.FormatFloat(float64(v), 'g', -1, 32)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}
