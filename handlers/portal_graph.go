package handlers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"modelplane/endpoint"
	"modelplane/graph"
	"modelplane/web"
)

// graphProps draws each version of a graph endpoint as nested boxes from
// its entry node, routed versions first, heaviest first.
func graphProps(vs []endpoint.GraphVersion) *web.GraphProps {
	p := &web.GraphProps{}
	for _, v := range vs {
		d := v.Definition
		p.Versions = append(p.Versions, web.GraphVersionView{Name: v.Name, Weight: v.Weight,
			Root: graphNodeView(&d, d.Entry, "", map[string]bool{}, 0)})
	}
	slices.SortStableFunc(p.Versions, func(a, b web.GraphVersionView) int { return cmp.Compare(b.Weight, a.Weight) })
	return p
}

// graphNodeView is node id's box with its children's. A node already
// drawn on this path or elsewhere is drawn once more without children
// (Repeat), so a shared node or a bad definition cannot grow the page.
func graphNodeView(d *graph.Definition, id, edge string, drawn map[string]bool, depth int) web.GraphNodeView {
	n := d.Node(id)
	if n == nil {
		return web.GraphNodeView{ID: id, Kind: "missing", Edge: edge}
	}
	v := web.GraphNodeView{ID: n.ID, Kind: n.Type, Target: n.Endpoint, Edge: edge, Detail: graphDetail(n)}
	if drawn[id] || depth > graph.MaxDepth {
		v.Repeat = true
		return v
	}
	drawn[id] = true
	child := func(c, e string) { v.Children = append(v.Children, graphNodeView(d, c, e, drawn, depth+1)) }
	switch n.Type {
	case graph.TypeSequence:
		for _, s := range n.Steps {
			child(s, "")
		}
	case graph.TypeEnsemble:
		for i, s := range n.Steps {
			e := ""
			if i < len(n.Weights) {
				e = fmt.Sprintf("weight %g", n.Weights[i])
			}
			child(s, e)
		}
	case graph.TypeSwitch:
		for _, c := range n.Cases {
			child(c.Then, fmt.Sprintf("if %s %s %s", c.Field, c.Op, c.Value))
		}
	case graph.TypeSplitter:
		for _, b := range n.Branches {
			child(b.Node, fmt.Sprintf("weight %d", b.Weight))
		}
	case graph.TypeRouter:
		names := make([]string, 0, len(n.Routes))
		for k := range n.Routes {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			child(n.Routes[k], "answer "+k)
		}
	}
	if n.Default != "" {
		child(n.Default, "otherwise")
	}
	return v
}

// graphDetail summarises a node's settings in one line.
func graphDetail(n *graph.Vertex) string {
	var parts []string
	if n.Combine != "" {
		parts = append(parts, n.Combine)
	}
	if n.Field != "" {
		parts = append(parts, "field "+n.Field)
	}
	if n.TimeoutMS > 0 {
		parts = append(parts, fmt.Sprintf("timeout %d ms", n.TimeoutMS))
	}
	if n.Soft {
		parts = append(parts, "soft")
	}
	if n.Idempotent {
		switch n.Retries {
		case 0:
			parts = append(parts, "idempotent")
		case 1:
			parts = append(parts, "idempotent, 1 retry")
		default:
			parts = append(parts, fmt.Sprintf("idempotent, %d retries", n.Retries))
		}
	}
	if n.Output != "" {
		parts = append(parts, "output "+n.Output)
	}
	if len(n.Input) > 0 {
		parts = append(parts, "input mapped")
	}
	if len(n.Labels) > 0 {
		parts = append(parts, "labels "+strings.Join(n.Labels, ", "))
	}
	return strings.Join(parts, " · ")
}
