package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
	"modelplane/serveapi"
)

// Serving says how the built-in runtime turns a JSON instance into the
// model's input and its output into an answer: the features in the order
// the model reads them (a categorical one with its categories and
// encoding), the output mapping, and sample inputs run at validation and
// at every replica's warm-up. Sampling and drift read the answers the
// runtime builds from it (score: the positive class's probability, or the
// winning class's; label: by the threshold or argmax over the classes;
// value: a regression's output as is), so they share one mapping.
type Serving struct {
	// Features default to the model's feature_names, all numeric.
	Features []ServingFeature `json:"features,omitempty"`
	// Output is the output mapping: classes (a binary classifier names
	// the negative class first) and threshold; empty for a regression.
	Output ServingOutput `json:"output" required:"false"`
	// SampleInputs are instances in the model's input shape (objects
	// keyed by feature name); each must pass the model's input_schema.
	SampleInputs []json.RawMessage `json:"sample_inputs,omitempty"`
	// LLM are an llm version's runtime settings, from which the agent
	// generates the runtime's command line (vLLM, llama-server); the
	// agent's catalog.LLM reads the same JSON.
	LLM *ServingLLM `json:"llm,omitempty"`
}

// ServingLLM are an llm version's serving settings (docs/llm-runtimes.md).
// Zero values leave the runtime's defaults.
type ServingLLM struct {
	DType                string          `json:"dtype,omitempty" enum:"auto,float16,bfloat16,float32" doc:"Weights' and activations' type."`
	MaxModelLen          int             `json:"max_model_len,omitempty" doc:"Context length, prompt and completion, in tokens."`
	GPUMemoryUtilization float64         `json:"gpu_memory_utilization,omitempty" doc:"Share of each GPU's memory for weights and KV cache, above 0 and at most 1."`
	MaxNumSeqs           int             `json:"max_num_seqs,omitempty" doc:"Sequences in flight at most (the engine's batch)."`
	PrefixCaching        bool            `json:"prefix_caching,omitempty" doc:"Reuse the KV pages of shared prompt prefixes (the built-in runtime always does)."`
	MaxQueuedRequests    int             `json:"max_queued_requests,omitempty" doc:"The built-in runtime's bound on requests waiting for a batch slot, beyond which it answers 429; 0 for its default of 256."`
	Quantization         string          `json:"quantization,omitempty" enum:"awq,gptq,fp8,bitsandbytes" doc:"Weights' quantisation method; empty for none."`
	Speculative          *ServingSpecDec `json:"speculative,omitempty" doc:"Speculative decoding: a draft model or method and tokens per step."`
	TensorParallel       int             `json:"tensor_parallel,omitempty" doc:"Tensor-parallel degree; 0 means the version's gpu_count."`
	RuntimeVersion       string          `json:"runtime_version,omitempty" doc:"Runtime release the version was tested with, as in 0.11.0."`
}

// ServingSpecDec are speculative decoding's settings.
type ServingSpecDec struct {
	Model     string `json:"model,omitempty" doc:"Draft model: a directory of the version's files (a path of its manifest, as in draft), never a hub id or a path on the node."`
	Method    string `json:"method,omitempty" enum:"ngram,eagle,medusa,mlp_speculator" doc:"A drafting method; empty with a draft model."`
	NumTokens int    `json:"num_speculative_tokens" doc:"Tokens proposed per step, 1 to 16."`
}

// checkLLM checks an llm version's runtime settings against its
// resources: every field named in its error.
func checkLLM(errs *field.Errors, l *ServingLLM, gpus int) {
	const f = "metadata.serving.llm"
	if l.DType != "" {
		field.OneOf(errs, f+".dtype", l.DType, "auto", "float16", "bfloat16", "float32")
	}
	if l.MaxModelLen < 0 || l.MaxModelLen > 1<<21 {
		errs.Add(f+".max_model_len", "must be between 1 and %d tokens (0 for the model's own)", 1<<21)
	}
	if l.GPUMemoryUtilization < 0 || l.GPUMemoryUtilization > 1 {
		errs.Add(f+".gpu_memory_utilization", "must be above 0 and at most 1 (0 for the runtime's default)")
	}
	if l.MaxNumSeqs < 0 || l.MaxNumSeqs > 4096 {
		errs.Add(f+".max_num_seqs", "must be between 1 and 4096 (0 for the runtime's default)")
	}
	if l.MaxQueuedRequests < 0 || l.MaxQueuedRequests > 1<<20 {
		errs.Add(f+".max_queued_requests", "must be between 1 and %d (0 for the runtime's default)", 1<<20)
	}
	if l.Quantization != "" {
		field.OneOf(errs, f+".quantization", l.Quantization, "awq", "gptq", "fp8", "bitsandbytes")
	}
	switch {
	case l.TensorParallel < 0:
		errs.Add(f+".tensor_parallel", "must not be negative (0 means the version's gpu_count)")
	case l.TensorParallel > 0 && gpus > 0 && gpus%l.TensorParallel != 0:
		errs.Add(f+".tensor_parallel", "%d does not divide the version's gpu_count %d", l.TensorParallel, gpus)
	case l.TensorParallel > 1 && gpus == 0:
		errs.Add(f+".tensor_parallel", "needs gpu_count of at least %d", l.TensorParallel)
	}
	if l.RuntimeVersion != "" && !runtimeVersion(l.RuntimeVersion) {
		errs.Add(f+".runtime_version", "must be a release such as 0.11.0, not %q", l.RuntimeVersion)
	}
	if sp := l.Speculative; sp != nil {
		if (sp.Model == "") == (sp.Method == "") {
			errs.Add(f+".speculative", "needs a draft model or a method, not both")
		}
		if sp.Method != "" {
			field.OneOf(errs, f+".speculative.method", sp.Method, "ngram", "eagle", "medusa", "mlp_speculator")
		}
		if len(sp.Model) > 1024 {
			errs.Add(f+".speculative.model", "must be at most 1024 characters")
		}
		if sp.NumTokens < 1 || sp.NumTokens > 16 {
			errs.Add(f+".speculative.num_speculative_tokens", "must be between 1 and 16")
		}
	}
}

// checkDraftModel holds speculative.model to the version's manifest: it
// is handed to vLLM as the draft model, which would otherwise load a hub
// id (a download outside the artifact pipeline, unchecked and unscanned)
// or any directory of the node (another team's cache). It must name a
// directory holding files of the manifest; the agent joins it to the
// replica's model directory and runs vLLM offline.
func checkDraftModel(errs *field.Errors, l *ServingLLM, man artifact.Manifest) {
	if l == nil || l.Speculative == nil || l.Speculative.Model == "" {
		return
	}
	const f = "metadata.serving.llm.speculative.model"
	m := l.Speculative.Model
	if err := artifact.CheckPath(m); err != nil {
		errs.Add(f, "must be a directory of the version's files (a clean relative path), not %q", m)
		return
	}
	for p := range man {
		if strings.HasPrefix(p, m+"/") {
			return
		}
	}
	errs.Add(f, "%q is not a directory of the version's files: the manifest lists no file under %s/", m, m)
}

// LLMSettings is the JSON of a version's serving.llm block from its
// stored serving metadata, nil when it has none.
func LLMSettings(serving []byte) json.RawMessage {
	var sv struct {
		LLM json.RawMessage `json:"llm"`
	}
	if json.Unmarshal(serving, &sv) != nil || len(sv.LLM) == 0 || string(sv.LLM) == "null" {
		return nil
	}
	return sv.LLM
}

// runtimeVersion reports whether v reads as a release: digits and dots,
// at most three parts (0.11.0).
func runtimeVersion(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) > 3 || len(v) > 32 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// ServingFeature is one model input (runtime/serveapi.Feature): a number, or
// a category among Categories with its encoding.
type ServingFeature struct {
	Name       string   `json:"name" doc:"The instance's key of the feature."`
	Categories []string `json:"categories,omitempty" doc:"Makes the feature categorical: a string among these."`
	Encoding   string   `json:"encoding,omitempty" enum:"onehot,native" doc:"Of a categorical feature: onehot (a column per category, in order; the default) or native (one column holding the category's index, XGBoost's native categorical)."`
}

// ServingOutput is the output mapping (runtime/serveapi.Output).
type ServingOutput struct {
	Classes   []string `json:"classes,omitempty" doc:"A classifier's classes in output order; a binary one names the negative class first."`
	Threshold float64  `json:"threshold,omitempty" doc:"A binary classifier's label threshold on the positive class's probability; 0 means 0.5."`
}

// Limits of what a version's serving metadata may hold.
const (
	maxFeatures     = 4096
	maxCategories   = 10_000
	maxSampleInputs = 64
	maxSampleBytes  = 64 << 10
)

// Encodings a categorical feature may have (runtime/serveapi.Feature).
var encodings = []string{"onehot", "native"}

// schemaProperty is what registration reads of one property of a model's
// input schema.
type schemaProperty struct {
	Type any   `json:"type"`
	Enum []any `json:"enum"`
}

// types lists a property's JSON types ("type" is a string or an array).
func (p schemaProperty) types() []string {
	switch t := p.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (p schemaProperty) numeric() bool {
	ts := p.types()
	return len(ts) > 0 && !slices.Contains(ts, "string") && (slices.Contains(ts, "number") || slices.Contains(ts, "integer"))
}

func (p schemaProperty) text() bool {
	ts := p.types()
	return len(ts) > 0 && !slices.Contains(ts, "number") && !slices.Contains(ts, "integer") && slices.Contains(ts, "string")
}

// checkServing checks and completes a version's serving metadata against
// its model: features default to the model's feature_names; each feature
// must be a property of the input schema where it lists properties, with
// categories exactly when the schema makes it a string; the output mapping
// must fit the task and the output schema's labels; every sample input
// must pass the input schema.
func checkServing(errs *field.Errors, sv *Serving, m Model) {
	const f = "metadata.serving"
	if sv.LLM != nil && m.Task != TaskLLM {
		errs.Add(f+".llm", "is for llm models; a %s version is served from features and output", m.Task)
	}
	if m.Task == TaskLLM {
		if len(sv.Features) > 0 || len(sv.Output.Classes) > 0 || sv.Output.Threshold != 0 || len(sv.SampleInputs) > 0 {
			errs.Add(f, "is for classification and regression models; an llm version is served by its own runtime")
		}
		return
	}
	var in struct {
		Properties map[string]schemaProperty `json:"properties"`
	}
	_ = json.Unmarshal(m.InputSchema, &in)
	// Features defaulted from feature_names are not checked against the
	// schema: versions registered without serving metadata (served by
	// other runtimes, or simulated) register as they did before it existed.
	given := len(sv.Features) > 0
	if !given {
		for _, name := range m.FeatureNames {
			sv.Features = append(sv.Features, ServingFeature{Name: name})
		}
	}
	if len(sv.Features) > maxFeatures {
		errs.Add(f+".features", "must list at most %d features", maxFeatures)
		return
	}
	seen := map[string]bool{}
	for i, ft := range sv.Features {
		at := fmt.Sprintf("%s.features[%d]", f, i)
		switch {
		case ft.Name == "" || len(ft.Name) > 200:
			errs.Add(at+".name", "must be a non-empty name of at most 200 characters")
		case seen[ft.Name]:
			errs.Add(at+".name", "%q is listed twice", ft.Name)
		}
		seen[ft.Name] = true
		prop, inSchema := in.Properties[ft.Name]
		if given && in.Properties != nil && !inSchema && ft.Name != "" {
			errs.Add(at+".name", "%q is not a property of the model's input_schema", ft.Name)
		}
		if ft.Encoding != "" {
			if !slices.Contains(encodings, ft.Encoding) {
				errs.Add(at+".encoding", "must be onehot or native, not %q", ft.Encoding)
			} else if len(ft.Categories) == 0 {
				errs.Add(at+".encoding", "needs categories: only a categorical feature has an encoding")
			}
		}
		if len(ft.Categories) > maxCategories {
			errs.Add(at+".categories", "must list at most %d categories", maxCategories)
			continue
		}
		cats := map[string]bool{}
		for j, c := range ft.Categories {
			if c == "" || cats[c] {
				errs.Add(fmt.Sprintf("%s.categories[%d]", at, j), "must be a non-empty category listed once")
			}
			cats[c] = true
		}
		switch {
		case len(ft.Categories) > 0 && prop.numeric():
			errs.Add(at+".categories", "%q is a number in the model's input_schema: a numeric feature has no categories", ft.Name)
		case given && len(ft.Categories) == 0 && prop.text():
			errs.Add(at+".categories", "%q is a string in the model's input_schema: list its categories (the runtime reads a string feature only as a category)", ft.Name)
		}
	}
	checkOutput(errs, sv.Output, m)
	checkSamples(errs, sv, m)
}

// checkOutput checks the output mapping against the task and the labels
// the output schema allows.
func checkOutput(errs *field.Errors, out ServingOutput, m Model) {
	const f = "metadata.serving.output"
	if m.Task == TaskRegression {
		if len(out.Classes) > 0 {
			errs.Add(f+".classes", "a regression model has no classes: its answer is the model's value as is")
		}
		if out.Threshold != 0 {
			errs.Add(f+".threshold", "a regression model has no threshold")
		}
		return
	}
	if !(out.Threshold >= 0 && out.Threshold < 1) {
		errs.Add(f+".threshold", "must be between 0 and 1 (0 means 0.5)")
	}
	if len(out.Classes) == 1 {
		errs.Add(f+".classes", "must name at least two classes (a binary classifier names the negative class first)")
	}
	if len(out.Classes) > 2 && out.Threshold != 0 {
		errs.Add(f+".threshold", "is for a binary classifier; a multiclass one labels by argmax")
	}
	var schema struct {
		Properties struct {
			Label schemaProperty `json:"label"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(m.OutputSchema, &schema)
	seen := map[string]bool{}
	for i, c := range out.Classes {
		at := fmt.Sprintf("%s.classes[%d]", f, i)
		switch {
		case c == "" || seen[c]:
			errs.Add(at, "must be a non-empty class named once")
		case len(schema.Properties.Label.Enum) > 0 && !slices.Contains(schema.Properties.Label.Enum, any(c)):
			errs.Add(at, "%q is not a label the model's output_schema allows", c)
		}
		seen[c] = true
	}
}

// checkSamples checks every sample input against the input schema and
// the features: an object holding each feature, a category among the
// feature's categories.
func checkSamples(errs *field.Errors, sv *Serving, m Model) {
	const f = "metadata.serving.sample_inputs"
	if len(sv.SampleInputs) > maxSampleInputs {
		errs.Add(f, "must hold at most %d instances", maxSampleInputs)
		return
	}
	total := 0
	for _, s := range sv.SampleInputs {
		total += len(s)
	}
	if total > maxSampleBytes {
		errs.Add(f, "must be at most %d bytes of JSON in all", maxSampleBytes)
		return
	}
	schema, err := CompileSchema(m.InputSchema)
	if err != nil {
		return // the model's own schema was checked when it was created
	}
	for i, raw := range sv.SampleInputs {
		at := fmt.Sprintf("%s[%d]", f, i)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			errs.Add(at, "is not valid JSON")
			continue
		}
		obj, ok := doc.(map[string]any)
		if !ok {
			errs.Add(at, "must be a JSON object keyed by feature name")
			continue
		}
		if schema != nil {
			if err := schema.Validate(doc); err != nil {
				errs.Add(at, "does not match the model's input_schema: %s", SchemaMessage(err))
				continue
			}
		}
		for _, ft := range sv.Features {
			v, ok := obj[ft.Name]
			switch {
			case !ok:
				errs.Add(at+"."+ft.Name, "is missing")
			case len(ft.Categories) > 0:
				if s, ok := v.(string); !ok || !slices.Contains(ft.Categories, s) {
					errs.Add(at+"."+ft.Name, "must be one of the feature's categories")
				}
			default:
				if _, ok := v.(json.Number); !ok {
					if _, ok := v.(float64); !ok {
						errs.Add(at+"."+ft.Name, "must be a number")
					}
				}
			}
		}
	}
}

// SchemaMessage is a JSON Schema failure in one line, without the
// schema's internal URL.
func SchemaMessage(err error) string {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) > 1 {
		lines = lines[1:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
	}
	return strings.Join(lines, "; ")
}

// CompileSchema compiles a model's input or output schema the way
// registration checks it (no external references); nil for an empty one.
func CompileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "{}" || string(t) == "null" {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(&refusingLoader{})
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("mem://schema.json")
}

// Statuses of a version (seed §3): registered when uploaded; validated or
// invalid once the control plane ran it through the built-in runtime.
const (
	StatusRegistered = "registered"
	StatusValidated  = "validated"
	StatusInvalid    = "invalid"
)

// Validation is the outcome of running a version through the built-in
// runtime at registration.
type Validation struct {
	// State is pending, validated or invalid.
	State string `json:"state"`
	// Reason says why a version is invalid (the runtime's message).
	Reason string `json:"reason,omitempty"`
	// Inputs are the instances sent: the sample inputs, or generated
	// from the input schema; Outputs the runtime's answers to them.
	Inputs  json.RawMessage `json:"inputs,omitempty"`
	Outputs json.RawMessage `json:"outputs,omitempty"`
	// LoadMS is the time to load the model; LatencyMS one batch of all
	// inputs.
	LoadMS     *float64   `json:"load_ms,omitempty"`
	LatencyMS  *float64   `json:"latency_ms,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Validation states.
const ValidationPending = "pending"

func validationOf(r db.ModelVersionValidation) *Validation {
	v := &Validation{State: r.State, Reason: r.Reason, LoadMS: r.LoadMs, LatencyMS: r.LatencyMs, FinishedAt: r.FinishedAt}
	if r.State != ValidationPending {
		v.Inputs, v.Outputs = r.Inputs, r.Outputs
	}
	return v
}

// builtinRuntimes are the registry runtimes the built-in runtime serves,
// and builtinFormats the model files it reads.
var (
	builtinRuntimes = []string{"xgboost", "lightgbm", "onnxruntime", "builtin-llm", Tokenizer}
	builtinFormats  = []string{"onnx", "xgboost-json", "lightgbm", "gguf", Tokenizer}
)

// BuiltIn reports whether the built-in runtime serves versions of runtime.
func BuiltIn(runtime string) bool { return slices.Contains(builtinRuntimes, runtime) }

// validatable says whether the control plane can run a version itself:
// built-in runtime and format, files in its own store, no GPU. The others
// (GPU and LLM runtimes, external artifacts) stay registered and are
// validated by their first replica's warm-up.
func validatable(spec VersionSpec, uploaded bool) bool {
	return uploaded && BuiltIn(spec.Runtime) && slices.Contains(builtinFormats, spec.Format) && spec.Resources.GPUCount == 0
}

// Unroutable says why a version may not take traffic or be rolled out,
// or "" when it may: an invalid version never, a version whose validation
// is still pending not yet. q runs in the caller's transaction; p is the
// caller, whose scope the version was loaded with.
func Unroutable(ctx context.Context, q *db.Queries, p *auth.Principal, v db.ModelVersion) (string, error) {
	if v.Status == StatusValidated {
		return "", nil
	}
	all, ids := p.Scope()
	x, err := q.ValidationGet(ctx, db.ValidationGetParams{VersionID: v.ID, AllTeams: all, TeamIDs: ids})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return unroutable(v, nil), nil
	case err != nil:
		return "", fmt.Errorf("validation of %s: %w", v.Name, err)
	}
	return unroutable(v, &x), nil
}

// unroutable is Unroutable's rule for v and its validation x (nil when
// the control plane never validated it).
func unroutable(v db.ModelVersion, x *db.ModelVersionValidation) string {
	switch {
	case v.Status == StatusValidated:
		return ""
	case x == nil && v.Status == StatusInvalid:
		return fmt.Sprintf("version %s is invalid", v.Name)
	case x == nil:
		return "" // not validated by the control plane: its replicas' warm-up checks it
	case v.Status == StatusInvalid || x.State == StatusInvalid:
		return fmt.Sprintf("version %s is invalid: %s", v.Name, x.Reason)
	case x.State == ValidationPending:
		return fmt.Sprintf("version %s is still being validated (status registered); it can take traffic once it is validated", v.Name)
	}
	return ""
}

// Unfit says why version v cannot take traffic on an endpoint beside the
// versions serving it now (serving), or "" when it can. One endpoint
// serves on one kind of hardware: its instance profile sizes the GPU
// versions, and a CPU version (gpu_count 0) is never placed on a GPU, so a
// CPU version on an endpoint whose versions run on GPUs (the demo's CPU
// GGUF beside support-chat's MIG slices), or the reverse, would be
// compared, billed and scaled as something it is not. Forms offer such a
// version disabled with this reason; traffic changes and rollout starts
// refuse it.
func Unfit(v db.ModelVersion, serving []db.ModelVersion) string {
	for _, s := range serving {
		switch {
		case s.ID == v.ID || (s.GPUCount > 0) == (v.GPUCount > 0):
		case v.GPUCount == 0:
			return fmt.Sprintf("version %s runs on CPU (gpu_count 0), and this endpoint serves %s on GPUs: one endpoint serves on one kind of hardware", v.Name, s.Name)
		default:
			return fmt.Sprintf("version %s needs %d GPU(s), and this endpoint serves %s on CPU: one endpoint serves on one kind of hardware", v.Name, v.GPUCount, s.Name)
		}
	}
	return ""
}

// ServingOn returns the versions taking traffic (weight above 0) on the
// endpoint now, in q's transaction; p is the caller, whose scope the
// endpoint was loaded with.
func ServingOn(ctx context.Context, q *db.Queries, p *auth.Principal, endpointID, modelID int64) ([]db.ModelVersion, error) {
	all, ids := p.Scope()
	rules, err := q.RoutingRuleListByEndpoint(ctx, db.RoutingRuleListByEndpointParams{EndpointID: endpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("traffic: %w", err)
	}
	var out []db.ModelVersion
	for _, r := range rules {
		if r.Weight == 0 {
			continue
		}
		v, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: modelID, Name: r.Version, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return nil, fmt.Errorf("serving version %s: %w", r.Version, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// RuntimeConfig is the built-in runtime's configuration of a version
// served under name (an endpoint's, or the validator's): the stored
// serving metadata, with the model's feature names for a version
// registered before it had any. Batching is the caller's to set.
func RuntimeConfig(name, version, format string, serving []byte, featureNames []string) serveapi.Config {
	var sv Serving
	_ = json.Unmarshal(serving, &sv)
	cfg := serveapi.Config{Model: name, Version: version, Format: format, Features: []serveapi.Feature{},
		Output: serveapi.Output{Classes: sv.Output.Classes, Threshold: sv.Output.Threshold}, SampleInputs: sv.SampleInputs}
	for _, f := range sv.Features {
		cfg.Features = append(cfg.Features, serveapi.Feature{Name: f.Name, Categories: f.Categories, Encoding: f.Encoding})
	}
	if len(sv.Features) == 0 {
		for _, f := range featureNames {
			cfg.Features = append(cfg.Features, serveapi.Feature{Name: f})
		}
	}
	cfg.LLM = LLMSettings(serving)
	return cfg
}
