package scenario

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"modelplane/drift/stat"
	"modelplane/judge"
	"modelplane/sim/profile"
)

// minimal is the smallest valid scenario file; tests edit it.
const minimal = `
duration: 30s
arrivals: {rate: 10}
prompt_tokens: 100
versions:
  - name: v1
    gpus: 2
    profile: {decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}
`

func TestParseExample(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(example.yaml): %v", err)
	}
	v42 := profile.Profile{PrefillMsPerToken: 0.05, DecodeBaseMs: 12, DecodeMsPerSeq: 0.35, KVMBPerToken: 0.8, UsableGB: 13}.WithDefaults()
	v43 := profile.Profile{PrefillMsPerToken: 0.05, DecodeBaseMs: 23, DecodeMsPerSeq: 0.65, KVMBPerToken: 0.8, UsableGB: 13}.WithDefaults()
	want := Scenario{
		Name: "example-canary", Description: "A small chat fleet with a 10 percent canary and two tenants.",
		Seed: 7, Duration: time.Minute, Warmup: 10 * time.Second,
		Arrivals:         Arrivals{Process: Poisson, Rate: 24},
		PromptTokens:     profile.LengthDist{Mean: 500, SD: 300, Max: 1536},
		OutputTokens:     &profile.LengthDist{Mean: 200, SD: 150, Max: 512},
		ContiguousMaxLen: []int{2048, 1024},
		Tenants:          []Tenant{{Name: "support", Share: 3}, {Name: "batch-jobs", Share: 1, Priority: -1}},
		Versions: []Version{
			{Name: "v42", GPUs: 6, Weight: 90, Profile: v42, Claims: Claims{TPOTP99Ms: 22}},
			{Name: "v43", GPUs: 1, Weight: 10, Profile: v43, Claims: Claims{TPOTP99Ms: 41}},
		},
		Rollout: &Rollout{Candidate: "v43", Incumbent: "v42", Start: 10 * time.Second,
			Interval: 10 * time.Second, Window: 30 * time.Second,
			Steps:        []RolloutStep{{10, 20 * time.Second}, {50, 20 * time.Second}, {100, 0}},
			Criteria:     judge.Criteria{MaxP99TPOTMS: 30, MaxRegression: 0.2, MaxErrorRateDelta: 0.5, MinRequests: 20},
			SamplingRate: 1, DriftMinSamples: stat.DefaultMinSamples},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Parse(example.yaml) =\n%+v\nwant\n%+v", s, want)
	}
	roundTrip(t, s)
}

// roundTrip checks that Marshal writes what Parse reads back unchanged.
func roundTrip(t *testing.T, s Scenario) {
	t.Helper()
	out, err := Marshal(s)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(s)): %v\n%s", err, out)
	}
	if !reflect.DeepEqual(again, s) {
		t.Fatalf("round trip changed the scenario:\n%+v\n%+v\n%s", s, again, out)
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal): %v", err)
	}
	if s.Arrivals.Process != Poisson {
		t.Errorf("process %q; want poisson by default", s.Arrivals.Process)
	}
	if !reflect.DeepEqual(s.ContiguousMaxLen, []int{DefaultContiguousMaxLen}) {
		t.Errorf("contiguous_max_len %v; want [%d]", s.ContiguousMaxLen, DefaultContiguousMaxLen)
	}
	if v := s.Versions[0]; v.Weight != 1 || v.Profile.PageTokens != profile.DefaultPageTokens || v.Profile.MaxBatch != profile.DefaultMaxBatch {
		t.Errorf("version %+v; want weight 1 and the profile's defaults", v)
	}
	if s.OutputTokens != nil || s.Tenants != nil {
		t.Errorf("output_tokens %v, tenants %v; want none", s.OutputTokens, s.Tenants)
	}
	roundTrip(t, s)
}

// TestParseErrors: every error wraps ErrInvalidScenario and names the
// offending key by its path.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(minimal, old) {
			panic("minimal has no " + old)
		}
		return strings.Replace(minimal, old, new, 1)
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"not yaml", "duration: [", "did not find expected node content"},
		{"empty", "", "empty document"},
		{"not a mapping", "- 1\n- 2\n", "document (line 1): want a mapping"},
		{"unknown key", minimal + "durations: 1m\n", "durations (line 9): unknown key"},
		{"key twice", minimal + "duration: 1m\n", "duration (line 9): given twice"},
		{"missing duration", edit("duration: 30s", ""), "duration: required"},
		{"missing rate", edit("arrivals: {rate: 10}", "arrivals: {process: constant}"), "arrivals.rate: required"},
		{"missing versions", edit("versions:", "other:"), "other (line 5): unknown key"},
		{"no versions", strings.SplitAfter(minimal, "prompt_tokens: 100\n")[0], "versions: required"},
		{"duration without unit", edit("30s", "30"), "duration (line 2): want a duration"},
		{"warmup too long", minimal + "warmup: 30s\n", "warmup: want 0s or more, less than the duration"},
		{"bad process", edit("{rate: 10}", "{process: bursty, rate: 10}"), `arrivals.process: want "poisson" or "constant"`},
		{"negative rate", edit("rate: 10", "rate: -1"), "arrivals.rate: want requests per second above 0"},
		{"rate not a number", edit("rate: 10", "rate: fast"), "arrivals.rate (line 3): want a number"},
		{"too many requests", edit("rate: 10", "rate: 10000000") + "drain: true\n", "arrivals.rate: 1e+07 req/s for 30s"},
		{"prompt mean", edit("prompt_tokens: 100", "prompt_tokens: {mean: 0.5}"), "prompt_tokens: mean: want 1 to"},
		{"prompt sd type", edit("prompt_tokens: 100", "prompt_tokens: {mean: 100, sd: wide}"), "prompt_tokens.sd (line 4): want a number"},
		{"prompt max type", edit("prompt_tokens: 100", "prompt_tokens: {mean: 100, max: 1.5}"), "prompt_tokens.max (line 4): want a whole number"},
		{"prompt unknown key", edit("prompt_tokens: 100", "prompt_tokens: {mean: 100, median: 90}"), "prompt_tokens.median (line 4): unknown key"},
		{"gpus not a number", edit("gpus: 2", "gpus: two"), "versions[0].gpus (line 7): want a whole number"},
		{"gpus zero", edit("gpus: 2", "gpus: 0"), "versions[0].gpus: want 1 to"},
		{"weight negative", edit("gpus: 2", "gpus: 2\n    weight: -1"), "versions[0].weight: want 0 to 1e9"},
		{"all weights zero", edit("gpus: 2", "gpus: 2\n    weight: 0"), "versions: every weight is 0"},
		{"version name", edit("name: v1", "name: 'v 1'"), "versions[0].name: want 1 to 63 letters"},
		{"version twice", minimal + "  - name: v1\n    gpus: 1\n    profile: {decode_base_ms: 1, kv_mb_per_token: 1, usable_gb: 1}\n", `versions[1].name: version "v1" listed twice`},
		{"second version gpus", minimal + "  - name: v2\n    gpus: [1]\n", "versions[1].gpus (line 10): want a whole number"},
		{"no profile", minimal + "  - name: v2\n    gpus: 1\n", "versions[1].profile: required"},
		{"profile unknown key", edit("usable_gb: 1}", "usable_gb: 1, decode_ms: 3}"), `versions[0].profile: invalid sim profile: json: unknown field "decode_ms"`},
		{"profile key in another case", edit("usable_gb: 1}", "Usable_GB: 1}"), "versions[0].profile.Usable_GB (line 8): unknown key; keys are lower case: usable_gb"},
		{"nested profile key in another case", edit("usable_gb: 1}", "usable_gb: 1, output_tokens: {Mean: 3}}"), "versions[0].profile.output_tokens.Mean (line 8): unknown key; keys are lower case: mean"},
		{"profile bad value", edit("usable_gb: 1}", "usable_gb: 1, kv_reserve: later}"), "versions[0].profile: invalid sim profile: kv_reserve"},
		{"profile neither LLM nor classic", edit("{decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}", "{error_rate: 0.1}"), "versions[0].profile: want an LLM profile (decode_base_ms, kv_mb_per_token, usable_gb, ...) or a classifier's"},
		{"profile mixes LLM and classic keys", edit("usable_gb: 1}", "usable_gb: 1, score: {mean: 0.1, sd: 0.1}}"), "versions[0].profile: invalid sim profile: mixes LLM keys"},
		{"classic score not on (0, 1)", edit("{decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}", "{score: {mean: 1.5, sd: 0.1}}"), "versions[0].profile.score: want 0 < mean < 1 and sd > 0"},
		{"classic score without spread", edit("{decode_base_ms: 10, kv_mb_per_token: 0.8, usable_gb: 1}", "{score: {mean: 0.5, sd: 0}}"), "versions[0].profile.score: want 0 < mean < 1 and sd > 0"},
		{"prompt_tokens still required for an LLM", strings.Replace(minimal, "prompt_tokens: 100\n", "", 1), "prompt_tokens: required"},
		{"profile timestamp", edit("usable_gb: 1}", "usable_gb: 2001-12-14}"), "versions[0].profile: line 8: a !!timestamp value has no JSON form"},
		{"claims key", edit("gpus: 2", "gpus: 2\n    claims: {tpot_p50_ms: 3}"), "versions[0].claims.tpot_p50_ms (line 8): unknown key"},
		{"tenant share", minimal + "tenants: [{name: a, share: 0}]\n", "tenants[0].share: want a weight above 0"},
		{"tenant twice", minimal + "tenants: [{name: a, share: 1}, {name: a, share: 1}]\n", `tenants[1].name: tenant "a" listed twice`},
		{"tenants not a list", minimal + "tenants: {name: a}\n", "tenants (line 9): want a list"},
		{"contiguous length", minimal + "contiguous_max_len: [2048, 0]\n", "contiguous_max_len[1]: want 1 to"},
		{"seed negative", minimal + "seed: -1\n", "seed (line 9): want a whole number"},
		{"drain not a bool", minimal + "drain: yes please\n", "drain (line 9): want true or false"},
		{"alias", minimal + "description: &d x\nname: *d\n", "aliases (*d) are not supported"},
		{"non-string key", minimal + "1: x\n", "1 (line 9): want keys that are plain strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded; want an error with %q", tt.want)
			}
			if !errors.Is(err, ErrInvalidScenario) {
				t.Errorf("error %v does not wrap ErrInvalidScenario", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	all, err := Builtins()
	if err != nil {
		t.Fatalf("Builtins: %v", err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
		if s.Autoscale == nil { // autoscaling has no YAML keys yet
			roundTrip(t, s)
		}
	}
	if want := []string{"burst", "noise", "noise-inside", "prefill-heavy", "seed-canary", "seed-capacity", "seed-fleet",
		"seed-fleet-autoscale", "seed-garbage", "thrash", "weekly"}; !reflect.DeepEqual(names, want) {
		t.Errorf("built-ins %v; want %v", names, want)
	}
	if _, err := Builtin("seed-fleet"); err != nil {
		t.Errorf("Builtin(seed-fleet): %v", err)
	}
	if _, err := Builtin("nope"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Builtin(nope) = %v; want ErrUnknown", err)
	}
}
