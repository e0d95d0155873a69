package versioncheck

import (
	"encoding/json"

	"modelplane/serveapi"
)

// generated is how many instances Generate makes.
const generated = 3

// Generate makes instances for a version registered without sample
// inputs, from its features and the model's input schema: numbers at the
// schema's minimum, maximum and midpoint (0, 1 and 0.5 where it states no
// bounds), categories from the first to the last. They exercise the model
// and its output mapping; they say nothing of its accuracy.
func Generate(features []serveapi.Feature, inputSchema []byte) []json.RawMessage {
	var schema struct {
		Properties map[string]struct {
			Type    any      `json:"type"`
			Minimum *float64 `json:"minimum"`
			Maximum *float64 `json:"maximum"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(inputSchema, &schema)
	out := make([]json.RawMessage, 0, generated)
	for i := range generated {
		inst := make(map[string]any, len(features))
		for _, f := range features {
			if n := len(f.Categories); n > 0 {
				inst[f.Name] = f.Categories[[]int{0, n - 1, n / 2}[i]]
				continue
			}
			lo, hi := 0.0, 1.0
			p := schema.Properties[f.Name]
			switch {
			case p.Minimum != nil && p.Maximum != nil:
				lo, hi = *p.Minimum, *p.Maximum
			case p.Minimum != nil:
				lo, hi = *p.Minimum, *p.Minimum+1
			case p.Maximum != nil:
				lo, hi = *p.Maximum-1, *p.Maximum
			}
			v := []float64{lo, hi, (lo + hi) / 2}[i]
			if p.Type == "integer" {
				v = float64(int64(v))
			}
			inst[f.Name] = v
		}
		b, _ := json.Marshal(inst)
		out = append(out, b)
	}
	return out
}
