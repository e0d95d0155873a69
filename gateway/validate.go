package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	jskind "github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// inputSchema is an endpoint's input JSON Schema, compiled once when its
// routing entry arrives and shared by every table that holds the entry
// unchanged. A nil *inputSchema accepts anything.
type inputSchema struct {
	// raw is the schema as the routing entry carried it, to tell whether a
	// later entry changed it.
	raw    json.RawMessage
	schema *jsonschema.Schema
	// err is why the schema did not compile; the endpoint is then served
	// without validation, and warned reports it once.
	err    error
	warned sync.Once
	// fast checks predict bodies from their bytes (validate_fast.go); nil
	// when the schema uses a keyword it does not understand, or did not
	// compile.
	fast *fastNode
}

// schemaURL names the schema inside its compiler; nothing is fetched.
const schemaURL = "mem://input-schema.json"

// errNoLoad refuses every $ref outside the schema: the gateway never reads
// files or the network to compile one.
var errNoLoad = errors.New("external schema references are not allowed")

// noLoader is the compiler's only loader (the library's default opens any
// file: URL). It records that it was asked, so that the schema's error is
// errNoLoad itself whatever the reference pointed at.
type noLoader struct{ asked bool }

func (l *noLoader) Load(string) (any, error) {
	l.asked = true
	return nil, errNoLoad
}

// compileSchema compiles raw. An empty, null, true or {} schema accepts
// anything and gives nil, so that such endpoints pay nothing per request.
func compileSchema(raw json.RawMessage) *inputSchema {
	if acceptsAll(raw) {
		return nil
	}
	s := &inputSchema{raw: raw}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		s.err = err
		return s
	}
	loader := &noLoader{}
	c := jsonschema.NewCompiler()
	c.UseLoader(loader)
	if err := c.AddResource(schemaURL, doc); err != nil {
		s.err = err
		return s
	}
	s.schema, s.err = c.Compile(schemaURL)
	if s.err != nil && loader.asked {
		s.err = errNoLoad
	}
	if s.err == nil {
		s.fast = compileFast(raw)
	}
	return s
}

// acceptsAll reports whether raw is a schema that accepts anything: empty,
// null, true or {}.
func acceptsAll(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return true
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return false
	}
	switch compact.String() {
	case "null", "{}", "true":
		return true
	}
	return false
}

// sameSchema reports whether raw is the schema s was compiled from.
func (s *inputSchema) sameSchema(raw json.RawMessage) bool {
	if s == nil {
		return acceptsAll(raw)
	}
	return bytes.Equal(s.raw, raw)
}

// invalidInput is a body that does not match its endpoint's schema. Path is
// the failing location ("instances/3/amount"), Reason what is wrong; neither
// echoes a value from the body.
type invalidInput struct {
	Path   string
	Reason string
}

func (e *invalidInput) Error() string { return e.Path + ": " + e.Reason }

// validate checks an already decoded body (decodeRequest has accepted it)
// against s: for predict every instance in order, for chat the whole body.
// It reports the first failing instance and, within it, the failing
// location that sorts first, so that the answer is the same every time.
// A predict instance may be a row: an array of the feature values in the
// order of features (the model's feature_names, which a version's serving
// features default to; KServe V1, TF Serving and SageMaker clients send
// rows), checked as the object it stands for. Without features a row is
// checked as it is.
func (s *inputSchema) validate(k kind, body []byte, features []string) *invalidInput {
	if s == nil || s.schema == nil {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return &invalidInput{Path: "body", Reason: "is not valid JSON"}
	}
	if k.llm() {
		return check(s.schema, doc, "")
	}
	obj, _ := doc.(map[string]any)
	instances, _ := obj["instances"].([]any)
	for i, inst := range instances {
		at := "instances/" + strconv.Itoa(i)
		if row, ok := inst.([]any); ok && len(features) > 0 {
			if len(row) != len(features) {
				return &invalidInput{Path: at, Reason: "a row must hold " + strconv.Itoa(len(features)) + " values, one per feature (" + strings.Join(features, ", ") + "), not " + strconv.Itoa(len(row))}
			}
			obj := make(map[string]any, len(row))
			for j, name := range features {
				obj[name] = row[j]
			}
			inst = obj
		}
		if bad := check(s.schema, inst, at); bad != nil {
			return bad
		}
	}
	return nil
}

// check validates v and turns the library's error tree into one location.
func check(sch *jsonschema.Schema, v any, prefix string) *invalidInput {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &invalidInput{Path: orBody(prefix), Reason: "does not match the schema"}
	}
	var best *invalidInput
	for _, leaf := range leaves(ve, nil) {
		in := describe(leaf, prefix)
		if best == nil || in.Path < best.Path || in.Path == best.Path && in.Reason < best.Reason {
			best = in
		}
	}
	if best == nil {
		return &invalidInput{Path: orBody(prefix), Reason: "does not match the schema"}
	}
	return best
}

func leaves(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return append(out, e)
	}
	for _, c := range e.Causes {
		out = leaves(c, out)
	}
	return out
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// describe words one failure. Values from the body never appear: only the
// schema's bounds, types and property names.
func describe(e *jsonschema.ValidationError, prefix string) *invalidInput {
	loc := slices.Clone(e.InstanceLocation)
	if prefix != "" {
		loc = append([]string{prefix}, loc...)
	}
	reason := ""
	switch k := e.ErrorKind.(type) {
	case *jskind.Type:
		reason = "must be " + strings.Join(k.Want, " or ") + ", not " + k.Got
	case *jskind.Required:
		if len(k.Missing) > 0 {
			loc = append(loc, slices.Min(k.Missing))
		}
		reason = "is required"
	case *jskind.AdditionalProperties:
		if len(k.Properties) > 0 {
			loc = append(loc, slices.Min(k.Properties))
		}
		reason = "is not allowed"
	case *jskind.Minimum:
		reason = "must be >= " + ratString(k.Want)
	case *jskind.Maximum:
		reason = "must be <= " + ratString(k.Want)
	case *jskind.ExclusiveMinimum:
		reason = "must be > " + ratString(k.Want)
	case *jskind.ExclusiveMaximum:
		reason = "must be < " + ratString(k.Want)
	case *jskind.MinLength:
		reason = "must be at least " + strconv.Itoa(k.Want) + " characters"
	case *jskind.MaxLength:
		reason = "must be at most " + strconv.Itoa(k.Want) + " characters"
	case *jskind.MinItems:
		reason = "must have at least " + strconv.Itoa(k.Want) + " items"
	case *jskind.MaxItems:
		reason = "must have at most " + strconv.Itoa(k.Want) + " items"
	case *jskind.Enum, *jskind.Const:
		reason = "is not an allowed value"
	case nil:
		reason = "does not match the schema"
	default:
		reason = "does not satisfy " + strings.Join(k.KeywordPath(), "/")
	}
	return &invalidInput{Path: orBody(strings.Join(loc, "/")), Reason: reason}
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// accepts reports whether body, a call of kind k to rt, is known to pass
// decodeRequest and validate without decoding it (validate_fast.go); false
// means only that the full path must decide.
func (rt *route) accepts(k kind, body []byte) bool {
	if k != kindPredict {
		return false
	}
	if rt.schema == nil {
		return acceptPredict(body, nil)
	}
	return rt.schema.fast != nil && acceptPredict(body, rt.schema.fast)
}

// validate checks body against rt's input schema. An endpoint whose schema
// does not compile is served without validation, and the first request to
// it says so in the log, once per schema.
//
// Each route is held to the shape it serves. An LLM model's input schema
// is its chat request's ("the whole body for LLMs"); a text completion is
// another shape, a prompt and no messages, so it is held to
// decodeRequest's completion checks and not to the chat schema, which
// would refuse every completion ("messages: is required").
func (g *Gateway) validate(rt *route, k kind, body []byte) *invalidInput {
	if k == kindCompletion {
		return nil
	}
	s := rt.schema
	if s == nil {
		return nil
	}
	if s.err != nil {
		s.warned.Do(func() {
			g.log.Warn("gateway: input schema does not compile; serving without validation",
				slog.String("endpoint", rt.src.Endpoint), slog.Int64("generation", rt.src.Generation),
				slog.String("error", s.err.Error()))
		})
		return nil
	}
	return s.validate(k, body, rt.src.FeatureNames)
}
