package artifact

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONScanner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in         string
		xgboostKey bool
	}{
		{`{}`, false}, {`[]`, false}, {` {"a" : [1, 2.5, -3e+2, true, false, null, "x"]} `, false},
		{`{"learner":{}}`, true}, {`{"a":{"learner":1}}`, false}, {`{"learnerx":1}`, false},
		{`{"a":1,"learner":2}`, true}, {`{"learn\u0065r":1}`, false}, {`["learner"]`, false},
		{`0`, false}, {`-0.0e-0`, false}, {`"\ud83d\ude00"`, false}, {`"tab\there"`, false},
		{``, false}, {`   `, false}, {`{`, false}, {`[1,]`, false}, {`{"a":1,}`, false}, {`{"a"}`, false},
		{`01`, false}, {`1.`, false}, {`.5`, false}, {`-`, false}, {`1e`, false}, {`1e+`, false},
		{`tru`, false}, {`nul`, false}, {`truex`, false}, {`"\x"`, false}, {`"\u12G4"`, false},
		{"\"a\nb\"", false}, {`[}`, false}, {`{]`, false}, {`{} {}`, false}, {`1 2`, false},
		{`{"a":1}}`, false}, {`{1:2}`, false}, {`'a'`, false}, {`NaN`, false},
		{strings.Repeat("[", 10000) + strings.Repeat("]", 10000), false},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), false},
	}
	for _, tt := range tests {
		var s jsonScanner
		err := s.write([]byte(tt.in))
		if err == nil {
			err = s.end()
		}
		name := tt.in
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		if got, want := err == nil, json.Valid([]byte(tt.in)); got != want {
			t.Errorf("jsonScanner(%q) valid = %v (%v), want %v as json.Valid", name, got, err, want)
		}
		if err == nil && (s.format() == FormatXGBoostJSON) != tt.xgboostKey {
			t.Errorf("jsonScanner(%q) format = %s, want xgboost-json %v", name, s.format(), tt.xgboostKey)
		}
	}
}
