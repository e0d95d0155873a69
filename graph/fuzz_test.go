package graph_test

import (
	"testing"

	"modelplane/graph"
)

// FuzzValidate: any definition either parses and validates or is refused;
// validation never panics nor loops, whatever the references.
func FuzzValidate(f *testing.F) {
	f.Add(`{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","s"]},{"id":"a","type":"call","endpoint":"e"}]}`)
	f.Add(`{"entry":"r","nodes":[{"id":"r","type":"router","endpoint":"e","routes":{"x":"r"}}]}`)
	f.Add(`{"entry":"w","nodes":[{"id":"w","type":"switch","cases":[{"field":"request/a","op":"gt","value":1,"then":"w"}]}]}`)
	lookup := func(string) (graph.Target, error) { return graph.Target{Exists: true, Calls: []string{"self"}}, nil }
	f.Fuzz(func(t *testing.T, s string) {
		d, err := graph.Parse([]byte(s))
		if err != nil {
			return
		}
		_ = graph.Validate(d, "self", lookup)
	})
}
