package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Caller makes one call of a step: endpoint's /predict (chat/completions
// for an LLM endpoint) with body, as the graph's team.
type Caller interface {
	Call(ctx context.Context, step Step, body []byte) Answer
}

// Step says which node a call is for, so the caller can name it in its
// span and log.
type Step struct {
	Node     string
	Endpoint string
	Attempt  int
	// Last is set on the graph's last step (Definition.Last), whose
	// answer the caller may relay to the graph's caller as it comes (an
	// LLM's stream) instead of returning it.
	Last bool
	// Started, when a relayed answer has begun, is called once: the
	// step's timeout then stops bounding it.
	Started func()
}

// Answer is a step's answer. Err is set when no answer came (Dial when the
// connection could not be made, so nothing was sent).
type Answer struct {
	Status  int
	Body    []byte
	Version string
	Err     error
	Dial    bool
	// Relayed is set when the caller relayed a last step's answer to the
	// graph's caller itself (Body is then empty).
	Relayed bool
}

// Options are an execution's injected parts.
type Options struct {
	// Clock runs the per-node timeouts; the real clock when nil.
	Clock quartz.Clock
	// Intn picks a splitter's branch: a number in [0, n).
	Intn func(n int) int
}

// StepReport is one call made, for an answer that asks for them.
type StepReport struct {
	Node      string  `json:"node"`
	Endpoint  string  `json:"endpoint"`
	Version   string  `json:"version,omitempty"`
	Status    int     `json:"status,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	Attempts  int     `json:"attempts"`
}

// Skip is a soft node left out of the answer.
type Skip struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Result is a finished run.
type Result struct {
	// Output is the entry node's output; nil when Relayed.
	Output json.RawMessage
	// Relayed is set when the last step's answer went to the graph's
	// caller as it came (Answer.Relayed).
	Relayed bool
	Steps   []StepReport
	// Skipped are the soft nodes left out.
	Skipped []Skip
}

// StepError is a hard node's failure, which is the graph's: Status is the
// step's answer (0 when none came), Timeout set when its timeout passed.
type StepError struct {
	Node     string
	Endpoint string
	Status   int
	Timeout  bool
	Detail   string
}

func (e *StepError) Error() string {
	switch {
	case e.Timeout:
		return fmt.Sprintf("step %q (%s) timed out", e.Node, e.Endpoint)
	case e.Status != 0:
		return fmt.Sprintf("step %q (%s) answered %d: %s", e.Node, e.Endpoint, e.Status, e.Detail)
	}
	return fmt.Sprintf("step %q (%s) failed: %s", e.Node, e.Endpoint, e.Detail)
}

// run is one execution's state.
type run struct {
	def     *Definition
	ids     map[string]*Vertex
	caller  Caller
	opt     Options
	request any

	mu      sync.Mutex
	outputs map[string]any
	steps   []StepReport
	skipped []Skip
	// last is the graph's last step (Definition.Last); relayed is set
	// once its answer was relayed.
	last    string
	relayed bool
}

// Run executes d on request (a /predict body) and returns the answer's
// parts, or a *StepError naming the hard node that failed. ctx ends every
// call still in flight.
func Run(ctx context.Context, d *Definition, request []byte, c Caller, opt Options) (*Result, error) {
	if opt.Clock == nil {
		opt.Clock = quartz.NewReal()
	}
	r := &run{def: d, ids: map[string]*Vertex{}, caller: c, opt: opt, outputs: map[string]any{}, last: d.Last()}
	for i := range d.Nodes {
		r.ids[d.Nodes[i].ID] = &d.Nodes[i]
	}
	if !json.Valid(request) {
		return nil, errors.New("graph request: not JSON")
	}
	r.request = raw(request)
	out, err := r.node(ctx, d.Entry, r.request)
	if errors.Is(err, errSkipped) {
		return nil, &StepError{Node: d.Entry, Detail: "the entry node was skipped: nothing answered"}
	}
	if err != nil {
		return nil, err
	}
	if r.relayed {
		return &Result{Relayed: true, Steps: r.steps, Skipped: r.skipped}, nil
	}
	if b, ok := out.(raw); ok {
		return &Result{Output: json.RawMessage(b), Steps: r.steps, Skipped: r.skipped}, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &Result{Output: b, Steps: r.steps, Skipped: r.skipped}, nil
}

// errSkipped is a soft node's failure, which its parent passes over.
var errSkipped = errors.New("skipped")

// node runs id on in. A soft node's failure is recorded and errSkipped
// returned.
func (r *run) node(ctx context.Context, id string, in any) (any, error) {
	n := r.ids[id]
	out, err := r.exec(ctx, n, in)
	if err != nil {
		if errors.Is(err, errSkipped) {
			if !n.Soft {
				// A hard composite whose soft children all failed.
				return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Detail: "every soft member failed"}
			}
			return nil, err
		}
		if n.Soft && ctx.Err() == nil {
			r.skip(n.ID, err)
			return nil, errSkipped
		}
		return nil, err
	}
	r.mu.Lock()
	r.outputs[id] = out
	r.mu.Unlock()
	return out, nil
}

func (r *run) skip(node string, err error) {
	reason := err.Error()
	var se *StepError
	if errors.As(err, &se) {
		switch {
		case se.Timeout:
			reason = "timeout"
		case se.Status != 0:
			reason = "status " + strconv.Itoa(se.Status)
		default:
			reason = se.Detail
		}
	}
	r.mu.Lock()
	r.skipped = append(r.skipped, Skip{Node: node, Reason: reason})
	r.mu.Unlock()
}

func (r *run) exec(ctx context.Context, n *Vertex, in any) (any, error) {
	switch n.Type {
	case TypeCall:
		return r.call(ctx, n, in)
	case TypeSequence:
		cur := in
		for _, s := range n.Steps {
			out, err := r.node(ctx, s, cur)
			if errors.Is(err, errSkipped) {
				continue // a soft step left out passes its input on
			}
			if err != nil {
				return nil, err
			}
			cur = out
		}
		return cur, nil
	case TypeEnsemble:
		return r.ensemble(ctx, n, in)
	case TypeSwitch:
		for _, c := range n.Cases {
			if r.holds(c, in) {
				return r.node(ctx, c.Then, in)
			}
		}
		if n.Default != "" {
			return r.node(ctx, n.Default, in)
		}
		return nil, &StepError{Node: n.ID, Detail: errNoBranch.Error()}
	case TypeSplitter:
		total := 0
		for _, b := range n.Branches {
			total += b.Weight
		}
		k := r.intn(total)
		for _, b := range n.Branches {
			if k < b.Weight {
				return r.node(ctx, b.Node, in)
			}
			k -= b.Weight
		}
		return nil, &StepError{Node: n.ID, Detail: errNoBranch.Error()}
	case TypeFormat:
		out, err := r.format(n, in)
		if err != nil {
			return nil, &StepError{Node: n.ID, Detail: err.Error()}
		}
		return out, nil
	case TypeRouter:
		ans, err := r.call(ctx, n, in)
		if err != nil {
			return nil, err
		}
		field := n.Field
		if field == "" {
			field = "predictions/0"
		}
		v, _ := lookupPath(ans, field)
		name := fmt.Sprint(v)
		if s, ok := v.(string); ok {
			name = s
		}
		if next, ok := n.Routes[name]; ok {
			return r.node(ctx, next, in)
		}
		if n.Default != "" {
			return r.node(ctx, n.Default, in)
		}
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Detail: fmt.Sprintf("router answered %q, which names no route", name)}
	}
	return nil, &StepError{Node: n.ID, Detail: "unknown node type " + n.Type}
}

func (r *run) intn(n int) int {
	if r.opt.Intn != nil {
		return r.opt.Intn(n)
	}
	return int(time.Now().UnixNano() % int64(n))
}

// call sends one call node's request, retrying an idempotent one, and
// returns its output.
func (r *run) call(ctx context.Context, n *Vertex, in any) (any, error) {
	body, err := r.body(n, in)
	if err != nil {
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Detail: err.Error()}
	}
	var a Answer
	var timedOut bool
	start := time.Now()
	attempts := 0
	for attempt := 0; attempt <= n.Retries; attempt++ {
		attempts++
		a, timedOut = r.attempt(ctx, n, body, attempt)
		if !n.Idempotent || timedOut || ctx.Err() != nil || !retryable(a) {
			break
		}
	}
	r.mu.Lock()
	r.steps = append(r.steps, StepReport{Node: n.ID, Endpoint: n.Endpoint, Version: a.Version, Status: a.Status,
		LatencyMS: float64(time.Since(start).Microseconds()) / 1000, Attempts: attempts})
	r.mu.Unlock()
	if timedOut {
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Timeout: true}
	}
	if a.Err != nil {
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Detail: a.Err.Error()}
	}
	if a.Status/100 != 2 {
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Status: a.Status, Detail: detailOf(a.Body)}
	}
	if a.Relayed {
		r.mu.Lock()
		r.relayed = true
		r.mu.Unlock()
		return nil, nil
	}
	if !json.Valid(a.Body) {
		return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Status: a.Status, Detail: "the answer is not JSON"}
	}
	// Kept as written until something needs its parts: a sequence of
	// plain steps passes answers on without decoding them.
	var out any = raw(a.Body)
	if n.Output != "" && n.Type == TypeCall {
		v, ok := lookupPath(out, n.Output)
		if !ok {
			return nil, &StepError{Node: n.ID, Endpoint: n.Endpoint, Status: a.Status, Detail: "the answer has no " + n.Output}
		}
		out = v
	}
	return out, nil
}

// attempt makes one call under the node's timeout, on the injected clock.
func (r *run) attempt(ctx context.Context, n *Vertex, body []byte, attempt int) (Answer, bool) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var expired sync.Once
	var timedOut bool
	var mu sync.Mutex
	step := Step{Node: n.ID, Endpoint: n.Endpoint, Attempt: attempt, Last: n.ID == r.last && n.Type == TypeCall}
	if n.TimeoutMS > 0 {
		t := r.opt.Clock.AfterFunc(time.Duration(n.TimeoutMS)*time.Millisecond, func() {
			expired.Do(func() { mu.Lock(); timedOut = true; mu.Unlock(); cancel() })
		}, "graph", "step")
		defer t.Stop()
		// A relayed answer that has begun is the caller's to end: the
		// timeout bounded the wait for its start.
		step.Started = func() { expired.Do(func() {}) }
	}
	a := r.caller.Call(cctx, step, body)
	mu.Lock()
	defer mu.Unlock()
	return a, timedOut
}

// retryable reports whether an idempotent step may be sent again: nothing
// was sent, or the gateway or replica said it could not serve it.
func retryable(a Answer) bool {
	if a.Err != nil {
		return a.Dial
	}
	return a.Status == http.StatusBadGateway || a.Status == http.StatusServiceUnavailable || a.Status == http.StatusGatewayTimeout
}

// detailOf is a problem+json answer's detail, else the start of the body.
func detailOf(b []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// body builds what a call node sends: its template filled, or what it
// received, whose predictions become instances.
func (r *run) body(n *Vertex, in any) ([]byte, error) {
	var v any
	if len(n.Input) > 0 {
		var tmpl any
		if err := decode(n.Input, &tmpl); err != nil {
			return nil, err
		}
		var err error
		if v, err = r.fill(tmpl, in); err != nil {
			return nil, err
		}
	} else {
		if b, ok := in.(raw); ok {
			// One level only: the answer's parts stay as written.
			var m map[string]json.RawMessage
			if json.Unmarshal(b, &m) == nil {
				if p, ok := m["predictions"]; ok && m["instances"] == nil {
					// Written around the answer's bytes: p is valid JSON,
					// and encoding it again would scan it once more.
					out := make([]byte, 0, len(p)+len(`{"instances":}`))
					out = append(out, `{"instances":`...)
					out = append(out, p...)
					return append(out, '}'), nil
				}
				return b, nil
			}
		}
		v = materialize(in)
		if m, ok := v.(map[string]any); ok {
			if p, ok := m["predictions"]; ok && m["instances"] == nil {
				v = map[string]any{"instances": p}
			}
		}
	}
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{"instances": v}
	}
	return json.Marshal(v)
}

// fill replaces every "$root/path" string of tmpl.
func (r *run) fill(tmpl, in any) (any, error) {
	switch t := tmpl.(type) {
	case string:
		if !strings.HasPrefix(t, "$") {
			return t, nil
		}
		v, ok := r.resolve(t[1:], in)
		if !ok {
			return nil, fmt.Errorf("input %s: no such value", t)
		}
		return v, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			v, err := r.fill(x, in)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			v, err := r.fill(x, in)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return tmpl, nil
}

// resolve reads a path rooted at request, input or a node's output.
func (r *run) resolve(path string, in any) (any, bool) {
	root, rest, _ := strings.Cut(path, "/")
	var base any
	switch root {
	case "request":
		base = r.request
	case "input":
		base = in
	default:
		r.mu.Lock()
		v, ok := r.outputs[root]
		r.mu.Unlock()
		if !ok {
			return nil, false
		}
		base = v
	}
	if rest == "" {
		return materialize(base), true
	}
	return lookupPath(base, rest)
}

// lookupPath reads a slash-separated path of object keys and array
// indexes.
func lookupPath(v any, path string) (any, bool) {
	v = materialize(v)
	for p := range strings.SplitSeq(path, "/") {
		if p == "" {
			continue
		}
		switch t := v.(type) {
		case map[string]any:
			x, ok := t[p]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(t) {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// ops are a switch's comparisons.
var ops = map[string]func(a any, b any) bool{
	"eq":     func(a, b any) bool { return jsonEqual(a, b) },
	"ne":     func(a, b any) bool { return !jsonEqual(a, b) },
	"gt":     func(a, b any) bool { return cmpNum(a, b, func(x, y float64) bool { return x > y }) },
	"gte":    func(a, b any) bool { return cmpNum(a, b, func(x, y float64) bool { return x >= y }) },
	"lt":     func(a, b any) bool { return cmpNum(a, b, func(x, y float64) bool { return x < y }) },
	"lte":    func(a, b any) bool { return cmpNum(a, b, func(x, y float64) bool { return x <= y }) },
	"exists": func(a, _ any) bool { return true },
}

func jsonEqual(a, b any) bool {
	if x, ok := a.(json.Number); ok {
		if y, ok := b.(json.Number); ok {
			fx, err1 := x.Float64()
			fy, err2 := y.Float64()
			return err1 == nil && err2 == nil && fx == fy
		}
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func cmpNum(a, b any, f func(x, y float64) bool) bool {
	x, ok1 := number(a)
	y, ok2 := number(b)
	return ok1 && ok2 && f(x, y)
}

// holds evaluates one case; a field that is absent holds for no op.
func (r *run) holds(c Case, in any) bool {
	v, ok := r.resolve(c.Field, in)
	if !ok {
		return false
	}
	var want any
	if c.Op != "exists" {
		if err := decode(c.Value, &want); err != nil {
			return false
		}
	}
	return ops[c.Op](v, want)
}

// ensemble runs the members at once and combines the predictions of those
// that answered.
func (r *run) ensemble(ctx context.Context, n *Vertex, in any) (any, error) {
	outs := make([]any, len(n.Steps))
	errs := make([]error, len(n.Steps))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for i, s := range n.Steps {
		wg.Go(func() {
			outs[i], errs[i] = r.node(ctx, s, in)
			if errs[i] != nil && !errors.Is(errs[i], errSkipped) {
				// The first hard failure is the ensemble's; the members
				// still running are not needed any more.
				once.Do(func() { first = errs[i]; cancel() })
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	var preds [][]any
	var weights []float64
	for i, err := range errs {
		if err != nil {
			continue // skipped
		}
		preds = append(preds, predictionsOf(outs[i]))
		if len(n.Weights) > i {
			weights = append(weights, n.Weights[i])
		} else {
			weights = append(weights, 1)
		}
	}
	if len(preds) == 0 {
		return nil, errSkipped
	}
	combined, err := combine(n, preds, weights)
	if err != nil {
		return nil, &StepError{Node: n.ID, Detail: err.Error()}
	}
	return map[string]any{"predictions": combined}, nil
}

// predictionsOf is an output's predictions array (the output itself when
// it is an array).
func predictionsOf(v any) []any {
	v = materialize(v)
	if m, ok := v.(map[string]any); ok {
		v = m["predictions"]
	}
	if a, ok := v.([]any); ok {
		return a
	}
	return []any{v}
}

// combine merges the members' predictions instance by instance.
func combine(n *Vertex, preds [][]any, weights []float64) ([]any, error) {
	size := len(preds[0])
	for _, p := range preds {
		if len(p) != size {
			return nil, errors.New("members answered different numbers of predictions")
		}
	}
	out := make([]any, size)
	for i := range size {
		vals := make([]any, len(preds))
		for m := range preds {
			vals[m] = preds[m][i]
			if n.Field != "" {
				vals[m], _ = lookupPath(preds[m][i], n.Field)
			}
		}
		switch n.Combine {
		case CombineCollect:
			out[i] = vals
		case CombineVote:
			out[i] = vote(vals, weights)
		default: // mean, weighted_mean
			sum, wsum := 0.0, 0.0
			for m, v := range vals {
				x, ok := number(v)
				if !ok {
					return nil, fmt.Errorf("prediction %d of member %d is not a number", i, m)
				}
				w := 1.0
				if n.Combine == CombineWeightedMean {
					w = weights[m]
				}
				sum += w * x
				wsum += w
			}
			if wsum == 0 {
				return nil, errors.New("the members' weights sum to 0")
			}
			out[i] = sum / wsum
		}
	}
	return out, nil
}

// number reads a prediction as a number: a number, or an object's score or
// the single-element array a regression model answers.
func number(v any) (float64, bool) {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		return f, err == nil && !math.IsNaN(f)
	case float64:
		return t, !math.IsNaN(t)
	case []any:
		if len(t) == 1 {
			return number(t[0])
		}
	case map[string]any:
		if s, ok := t["score"]; ok {
			return number(s)
		}
	}
	return 0, false
}

// vote returns the value with the most weight, ties to the earliest.
func vote(vals []any, weights []float64) any {
	keys := make([]string, len(vals))
	score := map[string]float64{}
	for i, v := range vals {
		b, _ := json.Marshal(v)
		keys[i] = string(b)
		score[keys[i]] += weights[i]
	}
	best := 0
	for i := range vals {
		if score[keys[i]] > score[keys[best]] {
			best = i
		}
	}
	return vals[best]
}

// format fills a format node's template and labels its predictions.
func (r *run) format(n *Vertex, in any) (any, error) {
	out := materialize(in)
	if len(n.Input) > 0 {
		var tmpl any
		if err := decode(n.Input, &tmpl); err != nil {
			return nil, err
		}
		var err error
		if out, err = r.fill(tmpl, in); err != nil {
			return nil, err
		}
	}
	if len(n.Labels) == 0 {
		return out, nil
	}
	preds := predictionsOf(out)
	labelled := make([]any, len(preds))
	for i, p := range preds {
		v := p
		if n.Field != "" {
			v, _ = lookupPath(p, n.Field)
		}
		vec, ok := v.([]any)
		if ok && len(vec) == 1 {
			// A batch of one: [[p0, p1, ...]].
			if inner, isVec := vec[0].([]any); isVec {
				vec = inner
			}
		}
		if !ok || len(vec) != len(n.Labels) {
			return nil, fmt.Errorf("prediction %d: want %d probabilities at %q", i, len(n.Labels), n.Field)
		}
		probs := make(map[string]any, len(vec))
		best, bestP := 0, math.Inf(-1)
		for k, x := range vec {
			f, ok := number(x)
			if !ok {
				return nil, fmt.Errorf("prediction %d: probability %d is not a number", i, k)
			}
			probs[n.Labels[k]] = f
			if f > bestP {
				best, bestP = k, f
			}
		}
		labelled[i] = map[string]any{"label": n.Labels[best], "score": bestP, "probabilities": probs}
	}
	return map[string]any{"predictions": labelled}, nil
}

// decode reads JSON keeping numbers as they were written (json.Number),
// so that an answer's integers (token ids) and long decimals pass on to
// the next step unchanged.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("invalid character after top-level value")
	}
	return nil
}

// raw is a JSON value kept as it was written (the request, a step's
// answer) until something needs its parts (materialize).
type raw []byte

// MarshalJSON writes the value as it was written.
func (r raw) MarshalJSON() ([]byte, error) { return r, nil }

// materialize decodes a raw value; any other value is returned as it is.
func materialize(v any) any {
	b, ok := v.(raw)
	if !ok {
		return v
	}
	var out any
	if err := decode(b, &out); err != nil {
		return nil
	}
	return out
}
