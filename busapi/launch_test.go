package busapi_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
)

func TestLaunchBounded(t *testing.T) {
	t.Parallel()
	small := busapi.Launch{Argv: []string{"vllm", "serve", "/m"}, Env: []string{"A=1"}, Dir: "/r",
		Files: []busapi.LaunchFile{{Path: "m/config.pbtxt", Content: "name: \"m\"\n"}, {Path: "m/1", Link: "/m"}}}
	big := strings.Repeat("é", busapi.LaunchMaxFileBytes) // two bytes each
	tests := []struct {
		name string
		in   busapi.Launch
		// check says what is wrong with the bounded launch, or "".
		check func(busapi.Launch) string
	}{
		{"a launch within the bounds is kept as it is", small, func(got busapi.Launch) string {
			if !reflect.DeepEqual(got, small) {
				return "changed"
			}
			return ""
		}},
		{"a file over its bound is cut on a character and marked", busapi.Launch{Argv: []string{"x"}, Files: []busapi.LaunchFile{{Path: "f", Content: big}}},
			func(got busapi.Launch) string {
				f := got.Files[0]
				if len(f.Content) > busapi.LaunchMaxFileBytes || !strings.HasPrefix(big, f.Content) || !f.Truncated || !got.Truncated {
					return "file not cut to its bound and marked"
				}
				if strings.ContainsRune(f.Content, '\uFFFD') || len(f.Content)%2 != 0 {
					return "cut inside a character"
				}
				return ""
			}},
		{"files past the total are left out and the launch marked", busapi.Launch{Argv: []string{"x"}, Files: []busapi.LaunchFile{
			{Path: "a", Content: strings.Repeat("a", 3000)},
			{Path: "b", Content: strings.Repeat("b", 3000)},
			{Path: "c", Content: strings.Repeat("c", 3000)}}},
			func(got busapi.Launch) string {
				if len(got.Files) != 2 || !got.Truncated {
					return "want two files and truncated"
				}
				return ""
			}},
		{"an agent's oversized argv is cut", busapi.Launch{Argv: []string{"x", big, big, big}}, func(got busapi.Launch) string {
			if !got.Truncated {
				return "not marked"
			}
			return ""
		}},
		{"no argv reads as an empty one", busapi.Launch{}, func(got busapi.Launch) string {
			if got.Argv == nil {
				return "nil argv"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in.Bounded()
			if msg := tt.check(got); msg != "" {
				t.Errorf("%s: %+v", msg, got)
			}
			data, _ := json.Marshal(got)
			// The bounds, plus the JSON around them.
			if len(data) > busapi.LaunchMaxBytes+1024 {
				t.Errorf("bounded launch is %d bytes of JSON, over %d", len(data), busapi.LaunchMaxBytes)
			}
			if again := got.Bounded(); !reflect.DeepEqual(again, got) {
				t.Errorf("bounding twice changed it: %+v then %+v", got, again)
			}
		})
	}
}
