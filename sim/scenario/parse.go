package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"modelplane/judge"
	"modelplane/sim/profile"
)

// MaxFileBytes is the largest scenario file Parse reads.
const MaxFileBytes = 1 << 20

// Parse reads a scenario from YAML, fills the defaults and validates it.
// Every error wraps ErrInvalidScenario and names the offending key by its
// path (versions[1].gpus, arrivals.rate); unknown keys are refused, so a
// misspelt key fails loudly instead of silently taking a default. A key
// whose value is null is treated as absent. YAML aliases are refused.
func Parse(data []byte) (Scenario, error) {
	if len(data) > MaxFileBytes {
		return Scenario{}, fmt.Errorf("%w: %d bytes; want at most %d", ErrInvalidScenario, len(data), MaxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Scenario{}, fmt.Errorf("%w: %w", ErrInvalidScenario, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return Scenario{}, fmt.Errorf("%w: empty document; want a mapping with duration, arrivals, prompt_tokens and versions", ErrInvalidScenario)
	}
	root := doc.Content[0]
	if err := noAliases(root, 0); err != nil {
		return Scenario{}, err
	}
	var s Scenario
	err := eachKey("", root, fields{
		"name":        toString(&s.Name),
		"description": toString(&s.Description),
		"seed": func(p string, n *yaml.Node) error {
			const want = "want a whole number from 0 to 18446744073709551615"
			if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
				return wrong(p, n, want)
			}
			v, err := strconv.ParseUint(n.Value, 0, 64)
			if err != nil {
				return wrong(p, n, want)
			}
			s.Seed = v
			return nil
		},
		"duration": toDuration(&s.Duration),
		"warmup":   toDuration(&s.Warmup),
		"drain": func(p string, n *yaml.Node) (err error) {
			s.Drain, err = boolean(p, n)
			return err
		},
		"arrivals": func(p string, n *yaml.Node) error {
			return eachKey(p, n, fields{
				"process": func(p string, n *yaml.Node) error {
					v, err := str(p, n)
					s.Arrivals.Process = Process(v)
					return err
				},
				"rate": toNumber(&s.Arrivals.Rate),
			})
		},
		"prompt_tokens": func(p string, n *yaml.Node) (err error) {
			s.PromptTokens, err = length(p, n)
			return err
		},
		"output_tokens": func(p string, n *yaml.Node) error {
			d, err := length(p, n)
			s.OutputTokens = &d
			return err
		},
		"max_tokens":       toInt(&s.MaxTokens),
		"shed_outstanding": toInt(&s.ShedOutstanding),
		"contiguous_max_len": func(p string, n *yaml.Node) error {
			if n.Kind == yaml.ScalarNode {
				s.ContiguousMaxLen = []int{0}
				return toInt(&s.ContiguousMaxLen[0])(p, n)
			}
			return eachItem(p, n, func(p string, n *yaml.Node) error {
				s.ContiguousMaxLen = append(s.ContiguousMaxLen, 0)
				return toInt(&s.ContiguousMaxLen[len(s.ContiguousMaxLen)-1])(p, n)
			})
		},
		"tenants": func(p string, n *yaml.Node) error {
			return eachItem(p, n, func(p string, n *yaml.Node) error {
				var t Tenant
				err := eachKey(p, n, fields{
					"name":     toString(&t.Name),
					"share":    toNumber(&t.Share),
					"priority": toInt(&t.Priority),
				})
				s.Tenants = append(s.Tenants, t)
				return err
			})
		},
		"versions": func(p string, n *yaml.Node) error {
			return eachItem(p, n, func(p string, n *yaml.Node) error {
				v := Version{Weight: 1}
				missing := fmt.Errorf("%w: %s.profile: required, the version's sim profile", ErrInvalidScenario, p)
				err := eachKey(p, n, fields{
					"name":   toString(&v.Name),
					"gpus":   toInt(&v.GPUs),
					"weight": toNumber(&v.Weight),
					"profile": func(p string, n *yaml.Node) (err error) {
						missing = nil
						v.Profile, err = parseProfile(p, n)
						return err
					},
					"claims": func(p string, n *yaml.Node) error {
						return eachKey(p, n, fields{
							"paged_sequences_per_gpu":      toNumber(&v.Claims.PagedSequencesPerGPU),
							"contiguous_sequences_per_gpu": toNumber(&v.Claims.ContiguousSequencesPerGPU),
							"tpot_p99_ms":                  toNumber(&v.Claims.TPOTP99Ms),
						})
					},
				})
				s.Versions = append(s.Versions, v)
				if err == nil {
					err = missing
				}
				return err
			})
		},
		"rollout": func(p string, n *yaml.Node) (err error) {
			s.Rollout, err = rollout(p, n)
			return err
		},
	})
	if err != nil {
		return Scenario{}, err
	}
	for _, req := range []struct {
		path string
		set  bool
	}{
		{"duration", s.Duration != 0},
		{"arrivals.rate", s.Arrivals.Rate != 0},
		{"prompt_tokens", s.PromptTokens != (profile.LengthDist{}) || !anyLLM(s.Versions)},
		{"versions", len(s.Versions) > 0},
	} {
		if !req.set {
			return Scenario{}, fmt.Errorf("%w: %s: required", ErrInvalidScenario, req.path)
		}
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return Scenario{}, err
	}
	return s, nil
}

// anyLLM reports whether any version has an LLM profile: only those read
// prompt_tokens.
func anyLLM(vs []Version) bool {
	for _, v := range vs {
		if v.Profile.IsLLM() {
			return true
		}
	}
	return false
}

// wrong is a type error at path, with the line it is on.
func wrong(path string, n *yaml.Node, want string) error {
	return fmt.Errorf("%w: %s (line %d): %s", ErrInvalidScenario, path, n.Line, want)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// noAliases refuses YAML aliases anywhere in the document: a scenario has
// no use for them, and expanding them is how a small file becomes a huge
// one.
func noAliases(n *yaml.Node, depth int) error {
	if depth > 64 {
		return fmt.Errorf("%w: line %d: nested more than 64 levels", ErrInvalidScenario, n.Line)
	}
	if n.Kind == yaml.AliasNode {
		return fmt.Errorf("%w: line %d: aliases (*%s) are not supported", ErrInvalidScenario, n.Line, n.Value)
	}
	for _, c := range n.Content {
		if err := noAliases(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// fields maps each key of a YAML mapping to the function that reads its
// value; the function gets the key's path for its errors.
type fields map[string]func(path string, n *yaml.Node) error

func toString(dst *string) func(string, *yaml.Node) error {
	return func(p string, n *yaml.Node) (err error) { *dst, err = str(p, n); return err }
}

func toInt(dst *int) func(string, *yaml.Node) error {
	return func(p string, n *yaml.Node) (err error) { *dst, err = integer(p, n); return err }
}

func toNumber(dst *float64) func(string, *yaml.Node) error {
	return func(p string, n *yaml.Node) (err error) { *dst, err = number(p, n); return err }
}

func toDuration(dst *time.Duration) func(string, *yaml.Node) error {
	return func(p string, n *yaml.Node) (err error) { *dst, err = duration(p, n); return err }
}

// eachKey calls the field's function for each key of the mapping n, in
// order; a key not in fields, or given twice, is an error. A null value is
// skipped, as if the key were absent.
func eachKey(path string, n *yaml.Node, fs fields) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		if path == "" {
			return wrong("document", n, "want a mapping of keys to values")
		}
		return wrong(path, n, "want a mapping of keys to values")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return wrong(join(path, k.Value), k, "want keys that are plain strings")
		}
		p := join(path, k.Value)
		f := fs[k.Value]
		if f == nil {
			return fmt.Errorf("%w: %s (line %d): unknown key", ErrInvalidScenario, p, k.Line)
		}
		if seen[k.Value] {
			return fmt.Errorf("%w: %s (line %d): given twice", ErrInvalidScenario, p, k.Line)
		}
		seen[k.Value] = true
		if isNull(v) {
			continue
		}
		if err := f(p, v); err != nil {
			return err
		}
	}
	return nil
}

// eachItem calls f for each item of the sequence n, with path[i].
func eachItem(path string, n *yaml.Node, f func(string, *yaml.Node) error) error {
	if n.Kind != yaml.SequenceNode {
		return wrong(path, n, "want a list")
	}
	for i, c := range n.Content {
		if err := f(fmt.Sprintf("%s[%d]", path, i), c); err != nil {
			return err
		}
	}
	return nil
}

func str(path string, n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", wrong(path, n, "want a string")
	}
	return n.Value, nil
}

func integer(path string, n *yaml.Node) (int, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, wrong(path, n, "want a whole number")
	}
	var v int
	if err := n.Decode(&v); err != nil {
		return 0, wrong(path, n, "want a whole number")
	}
	return v, nil
}

func number(path string, n *yaml.Node) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return 0, wrong(path, n, "want a number")
	}
	var v float64
	if err := n.Decode(&v); err != nil || !finite(v) {
		return 0, wrong(path, n, "want a finite number")
	}
	return v, nil
}

func boolean(path string, n *yaml.Node) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, wrong(path, n, "want true or false")
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		return false, wrong(path, n, "want true or false")
	}
	return v, nil
}

func duration(path string, n *yaml.Node) (time.Duration, error) {
	const want = "want a duration such as 90s, 3m or 1h30m"
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return 0, wrong(path, n, want)
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, wrong(path, n, want)
	}
	return d, nil
}

// rollout reads a rollout section. Criteria it does not name take the
// judge's defaults (judge.DefaultCriteria with no SLA ceilings).
func rollout(path string, n *yaml.Node) (*Rollout, error) {
	r := &Rollout{Criteria: judge.DefaultCriteria("", 0, 0)}
	var minRequests int
	minSet := false
	err := eachKey(path, n, fields{
		"candidate": toString(&r.Candidate),
		"incumbent": toString(&r.Incumbent),
		"start":     toDuration(&r.Start),
		"interval":  toDuration(&r.Interval),
		"window":    toDuration(&r.Window),
		"compare_naive": func(p string, n *yaml.Node) (err error) {
			r.CompareNaive, err = boolean(p, n)
			return err
		},
		// 0 would read as "the default" after parsing: refuse it here.
		"sampling_rate": func(p string, n *yaml.Node) (err error) {
			r.SamplingRate, err = number(p, n)
			if err == nil && r.SamplingRate == 0 {
				err = wrong(p, n, "want a share above 0, at most 1")
			}
			return err
		},
		"drift_min_samples": func(p string, n *yaml.Node) (err error) {
			r.DriftMinSamples, err = integer(p, n)
			if err == nil && r.DriftMinSamples == 0 {
				err = wrong(p, n, "want 1 to 10000000")
			}
			return err
		},
		"steps": func(p string, n *yaml.Node) error {
			r.Steps = []RolloutStep{}
			return eachItem(p, n, func(p string, n *yaml.Node) error {
				var st RolloutStep
				err := eachKey(p, n, fields{"weight": toNumber(&st.Weight), "bake": toDuration(&st.Bake)})
				r.Steps = append(r.Steps, st)
				return err
			})
		},
		"criteria": func(p string, n *yaml.Node) error {
			return eachKey(p, n, fields{
				"max_p99_ms":           toNumber(&r.Criteria.MaxP99MS),
				"max_p99_tpot_ms":      toNumber(&r.Criteria.MaxP99TPOTMS),
				"max_regression":       toNumber(&r.Criteria.MaxRegression),
				"max_error_rate_delta": toNumber(&r.Criteria.MaxErrorRateDelta),
				"drift": func(p string, n *yaml.Node) (err error) {
					r.Criteria.Drift, err = boolean(p, n)
					return err
				},
				"min_requests": func(p string, n *yaml.Node) (err error) {
					minSet = true
					minRequests, err = integer(p, n)
					if err == nil && minRequests < 1 {
						err = wrong(p, n, "want a whole number of at least 1")
					}
					return err
				},
			})
		},
	})
	if minSet {
		r.Criteria.MinRequests = uint64(minRequests)
	}
	return r, err
}

// length reads a length distribution: a number (every draw is that many
// tokens) or a mapping of mean, sd and max (log-normal; see
// profile.LengthDist).
func length(path string, n *yaml.Node) (profile.LengthDist, error) {
	var d profile.LengthDist
	if n.Kind == yaml.ScalarNode {
		v, err := number(path, n)
		d.Mean = v
		return d, err
	}
	if n.Kind != yaml.MappingNode {
		return d, wrong(path, n, "want a number of tokens, or a mapping of mean, sd and max")
	}
	err := eachKey(path, n, fields{"mean": toNumber(&d.Mean), "sd": toNumber(&d.SD), "max": toInt(&d.Max)})
	return d, err
}

// parseProfile reads a version's sim profile: the registry's JSON object,
// written as YAML. It is turned into JSON, key order kept, and read by
// profile.Parse, so a scenario accepts exactly the profiles the
// registry does.
func parseProfile(path string, n *yaml.Node) (profile.Profile, error) {
	if n.Kind != yaml.MappingNode {
		return profile.Profile{}, wrong(path, n, "want a mapping: the version's sim profile")
	}
	if err := exactKeys(path, n, reflect.TypeFor[profile.Profile]()); err != nil {
		return profile.Profile{}, err
	}
	b, err := nodeJSON(n)
	if err != nil {
		return profile.Profile{}, fmt.Errorf("%w: %s: %w", ErrInvalidScenario, path, err)
	}
	p, err := profile.Parse(b)
	if err != nil {
		return profile.Profile{}, fmt.Errorf("%w: %s: %w", ErrInvalidScenario, path, err)
	}
	return p, nil
}

// exactKeys refuses a mapping key that matches a JSON field of t only when
// case is ignored: encoding/json would take "Decode_Base_MS" for
// decode_base_ms, and a key the registry's JSON would not spell so should
// fail here as loudly as any other misspelling. Keys matching nothing are
// left to profile.Parse to refuse.
func exactKeys(path string, n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		for j := range t.NumField() {
			f := t.Field(j)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == k.Value {
				if err := exactKeys(join(path, k.Value), n.Content[i+1], f.Type); err != nil {
					return err
				}
				break
			}
			if strings.EqualFold(name, k.Value) {
				return fmt.Errorf("%w: %s (line %d): unknown key; keys are lower case: %s", ErrInvalidScenario, join(path, k.Value), k.Line, name)
			}
		}
	}
	return nil
}

// nodeJSON writes a YAML node as JSON, keeping the order of mapping keys.
func nodeJSON(n *yaml.Node) ([]byte, error) {
	switch n.Kind {
	case yaml.MappingNode:
		out := []byte{'{'}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return nil, fmt.Errorf("line %d: want keys that are plain strings", k.Line)
			}
			if i > 0 {
				out = append(out, ',')
			}
			kb, _ := json.Marshal(k.Value) // a string always marshals
			v, err := nodeJSON(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out = append(append(append(out, kb...), ':'), v...)
		}
		return append(out, '}'), nil
	case yaml.SequenceNode:
		out := []byte{'['}
		for i, c := range n.Content {
			if i > 0 {
				out = append(out, ',')
			}
			v, err := nodeJSON(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
		}
		return append(out, ']'), nil
	case yaml.ScalarNode:
		var v any
		switch n.Tag {
		case "!!null":
			return []byte("null"), nil
		case "!!str":
			v = n.Value
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			v = b
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || !finite(f) {
				return nil, fmt.Errorf("line %d: want a finite number", n.Line)
			}
			v = f
		default:
			return nil, fmt.Errorf("line %d: a %s value has no JSON form", n.Line, n.Tag)
		}
		return json.Marshal(v)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// Marshal writes a scenario as YAML that Parse reads back to the same
// scenario.
func Marshal(s Scenario) ([]byte, error) {
	type lengthOut struct {
		Mean float64 `yaml:"mean"`
		SD   float64 `yaml:"sd,omitempty"`
		Max  int     `yaml:"max,omitempty"`
	}
	lengthNode := func(d profile.LengthDist) any {
		if d.SD == 0 && d.Max == 0 {
			return d.Mean
		}
		return lengthOut{d.Mean, d.SD, d.Max}
	}
	type arrivalsOut struct {
		Process string  `yaml:"process"`
		Rate    float64 `yaml:"rate"`
	}
	type tenantOut struct {
		Name     string  `yaml:"name"`
		Share    float64 `yaml:"share"`
		Priority int     `yaml:"priority,omitempty"`
	}
	type claimsOut struct {
		Paged      float64 `yaml:"paged_sequences_per_gpu,omitempty"`
		Contiguous float64 `yaml:"contiguous_sequences_per_gpu,omitempty"`
		TPOTP99Ms  float64 `yaml:"tpot_p99_ms,omitempty"`
	}
	type versionOut struct {
		Name    string     `yaml:"name"`
		GPUs    int        `yaml:"gpus"`
		Weight  float64    `yaml:"weight"`
		Profile *yaml.Node `yaml:"profile"`
		Claims  *claimsOut `yaml:"claims,omitempty"`
	}
	type stepOut struct {
		Weight float64 `yaml:"weight"`
		Bake   string  `yaml:"bake"`
	}
	type criteriaOut struct {
		MaxP99MS          float64 `yaml:"max_p99_ms"`
		MaxP99TPOTMS      float64 `yaml:"max_p99_tpot_ms"`
		MaxRegression     float64 `yaml:"max_regression"`
		MaxErrorRateDelta float64 `yaml:"max_error_rate_delta"`
		MinRequests       uint64  `yaml:"min_requests"`
		Drift             bool    `yaml:"drift,omitempty"`
	}
	type rolloutOut struct {
		Candidate string      `yaml:"candidate"`
		Incumbent string      `yaml:"incumbent"`
		Start     string      `yaml:"start"`
		Interval  string      `yaml:"interval"`
		Window    string      `yaml:"window"`
		Steps     []stepOut   `yaml:"steps"`
		Criteria  criteriaOut `yaml:"criteria"`
		Naive     bool        `yaml:"compare_naive,omitempty"`
		Sampling  float64     `yaml:"sampling_rate"`
		MinDrift  int         `yaml:"drift_min_samples"`
	}
	type fileOut struct {
		Name            string       `yaml:"name,omitempty"`
		Description     *yaml.Node   `yaml:"description,omitempty"`
		Seed            uint64       `yaml:"seed"`
		Duration        string       `yaml:"duration"`
		Warmup          string       `yaml:"warmup,omitempty"`
		Drain           bool         `yaml:"drain,omitempty"`
		Arrivals        arrivalsOut  `yaml:"arrivals"`
		PromptTokens    any          `yaml:"prompt_tokens"`
		OutputTokens    any          `yaml:"output_tokens,omitempty"`
		MaxTokens       int          `yaml:"max_tokens,omitempty"`
		ShedOutstanding int          `yaml:"shed_outstanding,omitempty"`
		ContiguousMax   []int        `yaml:"contiguous_max_len,flow,omitempty"`
		Tenants         []tenantOut  `yaml:"tenants,omitempty"`
		Versions        []versionOut `yaml:"versions"`
		Rollout         *rolloutOut  `yaml:"rollout,omitempty"`
	}
	f := fileOut{
		Name: s.Name, Seed: s.Seed, Duration: s.Duration.String(), Drain: s.Drain,
		Arrivals:     arrivalsOut{string(s.Arrivals.Process), s.Arrivals.Rate},
		PromptTokens: lengthNode(s.PromptTokens), MaxTokens: s.MaxTokens, ShedOutstanding: s.ShedOutstanding,
		ContiguousMax: s.ContiguousMaxLen,
	}
	if s.Description != "" {
		// Double-quoted: yaml.v3 writes a block scalar that starts with a
		// blank line so that it reads back without it.
		f.Description = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: s.Description}
	}
	if s.Warmup != 0 {
		f.Warmup = s.Warmup.String()
	}
	if s.OutputTokens != nil {
		f.OutputTokens = lengthNode(*s.OutputTokens)
	}
	for _, t := range s.Tenants {
		f.Tenants = append(f.Tenants, tenantOut(t))
	}
	for _, v := range s.Versions {
		b, err := json.Marshal(v.Profile)
		if err != nil {
			return nil, fmt.Errorf("version %s: profile: %w", v.Name, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Content) != 1 {
			return nil, errors.Join(fmt.Errorf("version %s: profile json is not yaml", v.Name), err)
		}
		vo := versionOut{Name: v.Name, GPUs: v.GPUs, Weight: v.Weight, Profile: doc.Content[0]}
		if v.Claims != (Claims{}) {
			vo.Claims = &claimsOut{v.Claims.PagedSequencesPerGPU, v.Claims.ContiguousSequencesPerGPU, v.Claims.TPOTP99Ms}
		}
		f.Versions = append(f.Versions, vo)
	}
	if r := s.Rollout; r != nil {
		c := r.Criteria
		ro := &rolloutOut{Candidate: r.Candidate, Incumbent: r.Incumbent, Start: r.Start.String(),
			Interval: r.Interval.String(), Window: r.Window.String(), Steps: []stepOut{},
			Criteria: criteriaOut{c.MaxP99MS, c.MaxP99TPOTMS, c.MaxRegression, c.MaxErrorRateDelta, c.MinRequests, c.Drift},
			Naive:    r.CompareNaive, Sampling: r.SamplingRate, MinDrift: r.DriftMinSamples}
		for _, st := range r.Steps {
			ro.Steps = append(ro.Steps, stepOut{st.Weight, st.Bake.String()})
		}
		f.Rollout = ro
	}
	return yaml.Marshal(f)
}
