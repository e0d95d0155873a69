package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Task is the model task of a graph endpoint's model, and Runtime the
// runtime of its versions: a graph is stored as a model whose versions are
// definitions instead of artifacts (docs/decisions.md), so routing rules,
// rollouts and the judge serve graph versions as they serve model versions.
const (
	Task    = "graph"
	Runtime = "graph"
)

// Node types.
const (
	TypeCall     = "call"
	TypeSequence = "sequence"
	TypeSwitch   = "switch"
	TypeEnsemble = "ensemble"
	TypeSplitter = "splitter"
	TypeRouter   = "router"
	TypeFormat   = "format"
)

// Ensemble combinations.
const (
	CombineMean         = "mean"
	CombineWeightedMean = "weighted_mean"
	CombineVote         = "vote"
	CombineCollect      = "collect"
)

// Limits enforced at save.
const (
	// MaxDepth is how deeply composite nodes may nest.
	MaxDepth = 8
	// MaxFanOut is how many children one node may have.
	MaxFanOut = 8
	// MaxCalls is how many calls one request of the graph may make at most
	// (every branch counted, each node as often as it is reached).
	MaxCalls = 32
	// MaxNodes bounds a definition's size.
	MaxNodes = 64
	// MaxRetries bounds a call node's retries.
	MaxRetries = 3
	// MaxTimeoutMS bounds a call node's timeout (5 minutes).
	MaxTimeoutMS = 300_000
)

// Definition is one graph version: its nodes and the one a request enters.
type Definition struct {
	// Entry is the id of the node a request enters.
	Entry string   `json:"entry"`
	Nodes []Vertex `json:"nodes"`
}

// Vertex is one node of a graph; which fields apply depends on Type. (Not
// Node: the API's schemas are named by type, and the fleet has a Node.)
type Vertex struct {
	ID   string `json:"id"`
	Type string `json:"type"`

	// Endpoint is what a call node calls, and a router node's router model.
	Endpoint string `json:"endpoint,omitempty"`
	// Input, for a call or router node, is a JSON template of the body it
	// sends: a string "$input/..." is replaced by that part of what the node
	// received, "$request/..." by part of the graph's request, "$<node>/..."
	// by part of an earlier node's output. Empty: what the node received.
	Input json.RawMessage `json:"input,omitempty"`
	// Output, for a call node, is the path of the part of the answer that
	// is the node's output ("predictions/0"); empty: the whole answer.
	Output string `json:"output,omitempty"`
	// TimeoutMS bounds one attempt of a call or router node; 0 leaves the
	// gateway's request timeout.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// Soft marks a node whose failure or timeout leaves it out of the
	// answer instead of failing the graph.
	Soft bool `json:"soft,omitempty"`
	// Idempotent allows Retries after a 502, 503, 504 or a connect error.
	Idempotent bool `json:"idempotent,omitempty"`
	Retries    int  `json:"retries,omitempty"`

	// Steps are a sequence's nodes in order, or an ensemble's members.
	Steps []string `json:"steps,omitempty"`
	// Combine is how an ensemble merges its members' predictions; Weights
	// are weighted_mean's, one per member; Field, when set, is the path of
	// the number (mean) or value (vote) inside each prediction (a router's:
	// of the branch name in its answer; a format node's: of the
	// probabilities inside each prediction).
	Combine string    `json:"combine,omitempty"`
	Weights []float64 `json:"weights,omitempty"`
	Field   string    `json:"field,omitempty"`

	// Cases are a switch's conditions, tried in order; Default is the node
	// taken when none holds (a switch or router without one fails then).
	Cases   []Case `json:"cases,omitempty"`
	Default string `json:"default,omitempty"`

	// Branches are a splitter's weighted choices.
	Branches []Branch `json:"branches,omitempty"`

	// Routes map the branch name a router model answers (at Field of its
	// answer, "predictions/0" when empty) to the node that then runs.
	Routes map[string]string `json:"routes,omitempty"`

	// Labels, on a format node, name the positions of a probability
	// vector (at Field of each prediction, or the prediction itself): each
	// prediction becomes {"label", "score", "probabilities"} by its
	// largest value. A format node calls nothing: its output is its Input
	// template filled (what it received when empty), then labelled.
	Labels []string `json:"labels,omitempty"`
}

// Case is one condition of a switch: Field (rooted at request, input or an
// earlier node's id, "request/instances/0/amount") compared by Op (eq, ne,
// gt, gte, lt, lte, exists) with Value; Then is the node taken.
type Case struct {
	Field string          `json:"field"`
	Op    string          `json:"op"`
	Value json.RawMessage `json:"value,omitempty"`
	Then  string          `json:"then"`
}

// Branch is one weighted choice of a splitter.
type Branch struct {
	Weight int    `json:"weight"`
	Node   string `json:"node"`
}

// Parse decodes a definition, refusing unknown fields, so that a typo is
// the caller's 400 rather than a silently ignored setting.
func Parse(b []byte) (*Definition, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("graph definition: %w", err)
	}
	return &d, nil
}

// Node returns the node with id, nil when there is none.
func (d *Definition) Node(id string) *Vertex {
	for i := range d.Nodes {
		if d.Nodes[i].ID == id {
			return &d.Nodes[i]
		}
	}
	return nil
}

// Last is the id of the node whose output is the graph's answer as it
// is: the entry, or, for a sequence, its last step (followed down nested
// sequences). Only it may call an LLM endpoint, whose answer may then
// stream to the graph's caller.
func (d *Definition) Last() string {
	id := d.Entry
	for range MaxDepth + 1 {
		n := d.Node(id)
		if n == nil || n.Type != TypeSequence || len(n.Steps) == 0 {
			return id
		}
		id = n.Steps[len(n.Steps)-1]
	}
	return id
}

// children are the ids a node refers to, in order.
func (n *Vertex) children() []string {
	var c []string
	c = append(c, n.Steps...)
	for _, k := range n.Cases {
		c = append(c, k.Then)
	}
	for _, b := range n.Branches {
		c = append(c, b.Node)
	}
	keys := make([]string, 0, len(n.Routes))
	for k := range n.Routes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c = append(c, n.Routes[k])
	}
	if n.Default != "" {
		c = append(c, n.Default)
	}
	return c
}

// Endpoints are the endpoints the definition calls, sorted, each once.
func (d *Definition) Endpoints() []string {
	var out []string
	for _, n := range d.Nodes {
		if n.Endpoint != "" && !slices.Contains(out, n.Endpoint) {
			out = append(out, n.Endpoint)
		}
	}
	slices.Sort(out)
	return out
}

// NodeError is a definition refused at save; Node names the node at fault
// ("" when the fault is the definition's as a whole).
type NodeError struct {
	Node string
	Msg  string
}

func (e *NodeError) Error() string {
	if e.Node == "" {
		return "graph: " + e.Msg
	}
	return fmt.Sprintf("graph node %q: %s", e.Node, e.Msg)
}

func nodeErr(node, format string, args ...any) error {
	return &NodeError{Node: node, Msg: fmt.Sprintf(format, args...)}
}

// Target is what validation learns about an endpoint a node calls.
type Target struct {
	// Exists is false for an endpoint that does not exist or that the
	// graph's team may not call: both are refused alike, so a definition
	// cannot probe for other teams' endpoints.
	Exists bool
	// Task is the endpoint's model task; an LLM endpoint may be called
	// only by the graph's last step (Definition.Last), at chat/completions.
	Task string
	// Calls are, for a graph endpoint, the endpoints its routed versions
	// call, for finding cycles across graphs.
	Calls []string
	// InputSchema and OutputSchema are the endpoint's model's JSON Schemas
	// for one instance and one prediction; empty when undeclared.
	InputSchema, OutputSchema json.RawMessage
}

// Lookup returns what validation needs of endpoint, as the graph's team
// may see it.
type Lookup func(endpoint string) (Target, error)

// Validate checks a definition of the graph endpoint self before it is
// saved: node ids, types and fields, no cycle (within the definition or
// through graph endpoints it calls), every target existing and callable by
// the graph's team (lookup), JSON types compatible along each edge where
// both sides declare schemas, and the depth and fan-out limits. A refusal
// is a *NodeError naming the node; lookup's own errors pass through.
func Validate(d *Definition, self string, lookup Lookup) error {
	if len(d.Nodes) == 0 {
		return nodeErr("", "a graph needs at least one node")
	}
	if len(d.Nodes) > MaxNodes {
		return nodeErr("", "at most %d nodes", MaxNodes)
	}
	ids := map[string]*Vertex{}
	for i := range d.Nodes {
		n := &d.Nodes[i]
		if n.ID == "" || strings.ContainsAny(n.ID, "/$ ") {
			return nodeErr(n.ID, "a node id is required and may not hold '/', '$' or spaces")
		}
		if n.ID == "request" || n.ID == "input" {
			return nodeErr(n.ID, "the ids request and input are reserved")
		}
		if ids[n.ID] != nil {
			return nodeErr(n.ID, "duplicate node id")
		}
		ids[n.ID] = n
	}
	if ids[d.Entry] == nil {
		return nodeErr(d.Entry, "the entry node does not exist")
	}
	for i := range d.Nodes {
		if err := checkNode(&d.Nodes[i], ids); err != nil {
			return err
		}
	}
	// Cycles, depth and the calls a request may make, from the entry.
	if _, err := walk(d, ids, d.Entry, nil, map[string]walked{}); err != nil {
		return err
	}
	targets := map[string]Target{}
	for _, n := range d.Nodes {
		if n.Endpoint == "" {
			continue
		}
		if n.Endpoint == self {
			return nodeErr(n.ID, "calls its own graph %q: a cycle", self)
		}
		t, err := lookup(n.Endpoint)
		if err != nil {
			return err
		}
		if !t.Exists {
			return nodeErr(n.ID, "endpoint %q does not exist or the graph's team may not call it", n.Endpoint)
		}
		if t.Task == "llm" {
			if err := checkLLMStep(d, &n); err != nil {
				return err
			}
		}
		if err := graphCycle(n.ID, self, n.Endpoint, t, lookup, map[string]bool{}); err != nil {
			return err
		}
		targets[n.Endpoint] = t
	}
	return checkSchemas(d, ids, targets)
}

// checkLLMStep checks a node calling an LLM endpoint: only the graph's
// last step, a hard call node that no other node refers to, may, with an
// input template that builds its chat request (an earlier step's answer
// is not one).
func checkLLMStep(d *Definition, n *Vertex) error {
	if n.Type != TypeCall || n.ID != d.Last() {
		return nodeErr(n.ID, "endpoint %q is an LLM endpoint; only the graph's last step may call one", n.Endpoint)
	}
	if n.Soft || n.Output != "" {
		return nodeErr(n.ID, "a step calling an LLM endpoint may not be soft or pick an output: its answer is the graph's")
	}
	if len(n.Input) == 0 {
		return nodeErr(n.ID, "a step calling an LLM endpoint needs an input template building its chat request ({\"messages\": [...]})")
	}
	refs := 0
	for _, m := range d.Nodes {
		for _, c := range m.children() {
			if c == n.ID {
				refs++
			}
		}
	}
	if refs > 1 {
		return nodeErr(n.ID, "a step calling an LLM endpoint must be reached once, as the graph's last step")
	}
	return nil
}

// checkNode checks one node's own fields.
func checkNode(n *Vertex, ids map[string]*Vertex) error {
	ref := func(id string) error {
		if ids[id] == nil {
			return nodeErr(n.ID, "refers to node %q, which does not exist", id)
		}
		return nil
	}
	if len(n.children()) > MaxFanOut {
		return nodeErr(n.ID, "has %d children; at most %d", len(n.children()), MaxFanOut)
	}
	for _, c := range n.children() {
		if err := ref(c); err != nil {
			return err
		}
	}
	if n.TimeoutMS < 0 || n.TimeoutMS > MaxTimeoutMS {
		return nodeErr(n.ID, "timeout_ms must be between 0 and %d", MaxTimeoutMS)
	}
	if n.Retries < 0 || n.Retries > MaxRetries {
		return nodeErr(n.ID, "retries must be between 0 and %d", MaxRetries)
	}
	if n.Retries > 0 && !n.Idempotent {
		return nodeErr(n.ID, "retries are allowed only for idempotent steps")
	}
	if len(n.Input) > 0 && !json.Valid(n.Input) {
		return nodeErr(n.ID, "input is not JSON")
	}
	calls := n.Type == TypeCall || n.Type == TypeRouter
	if calls != (n.Endpoint != "") {
		if calls {
			return nodeErr(n.ID, "a %s node needs an endpoint", n.Type)
		}
		return nodeErr(n.ID, "only call and router nodes name an endpoint")
	}
	if !calls && (n.TimeoutMS != 0 || n.Retries != 0 || len(n.Input) > 0 && n.Type != TypeFormat) {
		return nodeErr(n.ID, "timeout_ms, retries and input belong on call and router nodes (input on format nodes too)")
	}
	if n.Type != TypeFormat && len(n.Labels) > 0 {
		return nodeErr(n.ID, "labels belong on format nodes")
	}
	switch n.Type {
	case TypeCall:
		if len(n.children()) > 0 {
			return nodeErr(n.ID, "a call node has no children")
		}
	case TypeSequence:
		if len(n.Steps) == 0 {
			return nodeErr(n.ID, "a sequence needs steps")
		}
	case TypeEnsemble:
		if len(n.Steps) < 2 {
			return nodeErr(n.ID, "an ensemble needs at least two members")
		}
		switch n.Combine {
		case CombineMean, CombineVote, CombineCollect:
		case CombineWeightedMean:
			if len(n.Weights) != len(n.Steps) {
				return nodeErr(n.ID, "weighted_mean needs one weight per member")
			}
			for _, w := range n.Weights {
				if w < 0 {
					return nodeErr(n.ID, "weights must not be negative")
				}
			}
		default:
			return nodeErr(n.ID, "combine must be mean, weighted_mean, vote or collect")
		}
	case TypeSwitch:
		if len(n.Cases) == 0 {
			return nodeErr(n.ID, "a switch needs cases")
		}
		for _, c := range n.Cases {
			if _, ok := ops[c.Op]; !ok {
				return nodeErr(n.ID, "op %q: want eq, ne, gt, gte, lt, lte or exists", c.Op)
			}
			root, _, _ := strings.Cut(c.Field, "/")
			if root != "request" && root != "input" && ids[root] == nil {
				return nodeErr(n.ID, "field %q must start with request/, input/ or a node id", c.Field)
			}
			if c.Op != "exists" && !json.Valid(c.Value) {
				return nodeErr(n.ID, "case value is not JSON")
			}
		}
	case TypeSplitter:
		if len(n.Branches) < 2 {
			return nodeErr(n.ID, "a splitter needs at least two branches")
		}
		total := 0
		for _, b := range n.Branches {
			if b.Weight < 0 {
				return nodeErr(n.ID, "weights must not be negative")
			}
			total += b.Weight
		}
		if total == 0 {
			return nodeErr(n.ID, "the branches' weights sum to 0")
		}
	case TypeFormat:
		if len(n.children()) > 0 {
			return nodeErr(n.ID, "a format node has no children")
		}
		if len(n.Input) == 0 && len(n.Labels) == 0 {
			return nodeErr(n.ID, "a format node needs an input template or labels")
		}
	case TypeRouter:
		if len(n.Routes) == 0 {
			return nodeErr(n.ID, "a router needs routes")
		}
	default:
		return nodeErr(n.ID, "type %q: want call, sequence, switch, ensemble, splitter, router or format", n.Type)
	}
	if n.Type != TypeEnsemble && (n.Combine != "" || len(n.Weights) > 0) {
		return nodeErr(n.ID, "combine and weights belong on ensembles")
	}
	if n.Type != TypeEnsemble && n.Type != TypeFormat && n.Type != TypeRouter && n.Field != "" {
		return nodeErr(n.ID, "field belongs on ensembles, routers and format nodes")
	}
	return nil
}

// walked is what walk learnt of a node whose subtree it finished.
type walked struct{ calls, height int }

// walk follows the definition from id, refusing a node reached again on
// its own path (a cycle) and nesting deeper than MaxDepth; it returns how
// many calls a request reaching id may make at most. A node shared by
// several parents is walked once (memo), so a definition of branches
// rejoining cannot make validation exponential.
func walk(d *Definition, ids map[string]*Vertex, id string, path []string, memo map[string]walked) (walked, error) {
	if slices.Contains(path, id) {
		return walked{}, nodeErr(id, "is part of a cycle: %s", strings.Join(append(path[slices.Index(path, id):], id), " → "))
	}
	if w, ok := memo[id]; ok {
		if len(path)+w.height > MaxDepth {
			return walked{}, nodeErr(id, "nested deeper than %d", MaxDepth)
		}
		return w, nil
	}
	if len(path) >= MaxDepth {
		return walked{}, nodeErr(id, "nested deeper than %d", MaxDepth)
	}
	n := ids[id]
	path = append(path, id)
	calls, most, height := 0, 0, 0
	if n.Endpoint != "" {
		calls = 1
	}
	for _, c := range n.children() {
		k, err := walk(d, ids, c, path, memo)
		if err != nil {
			return walked{}, err
		}
		height = max(height, k.height)
		switch n.Type {
		case TypeSequence, TypeEnsemble:
			calls += k.calls
		default: // one branch runs
			most = max(most, k.calls)
		}
	}
	calls += most
	if calls > MaxCalls {
		return walked{}, nodeErr(id, "a request may make %d calls through it; at most %d", calls, MaxCalls)
	}
	w := walked{calls: calls, height: height + 1}
	memo[id] = w
	return w, nil
}

// graphCycle follows a graph target's calls, refusing one that reaches the
// graph being saved.
func graphCycle(node, self, endpoint string, t Target, lookup Lookup, seen map[string]bool) error {
	if seen[endpoint] {
		return nil
	}
	seen[endpoint] = true
	for _, c := range t.Calls {
		if c == self {
			return nodeErr(node, "calls graph %q, which calls %q back: a cycle", endpoint, self)
		}
		next, err := lookup(c)
		if err != nil {
			return err
		}
		if err := graphCycle(node, self, c, next, lookup, seen); err != nil {
			return err
		}
	}
	return nil
}

// checkSchemas compares, along each edge of a sequence between two call
// nodes that pass the answer on unmapped, the JSON type of the first's
// output (one prediction) with the second's input (one instance), where
// both endpoints declare one.
func checkSchemas(d *Definition, ids map[string]*Vertex, targets map[string]Target) error {
	for _, n := range d.Nodes {
		if n.Type != TypeSequence {
			continue
		}
		for i := 1; i < len(n.Steps); i++ {
			a, b := ids[n.Steps[i-1]], ids[n.Steps[i]]
			if a.Type != TypeCall || b.Type != TypeCall || a.Output != "" || len(b.Input) > 0 {
				continue
			}
			out, in := targets[a.Endpoint].OutputSchema, targets[b.Endpoint].InputSchema
			if err := compatible(out, in); err != nil {
				return nodeErr(b.ID, "takes the output of %q, whose %v", a.ID, err)
			}
		}
	}
	return nil
}

// schema is the part of a JSON Schema compared along edges.
type schema struct {
	Type       any                        `json:"type"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

// compatible reports why values valid against out may not be valid
// against in, nil when they may be (or either says nothing).
func compatible(out, in json.RawMessage) error {
	var o, i schema
	if json.Unmarshal(out, &o) != nil || json.Unmarshal(in, &i) != nil {
		return nil
	}
	ot, it := types(o.Type), types(i.Type)
	if len(ot) > 0 && len(it) > 0 {
		for _, t := range ot {
			if !slices.Contains(it, t) && !(t == "integer" && slices.Contains(it, "number")) {
				return fmt.Errorf("type %s does not fit the input's %s", strings.Join(ot, "|"), strings.Join(it, "|"))
			}
		}
	}
	for _, name := range i.Required {
		op, ok := o.Properties[name]
		if !ok {
			if len(o.Properties) > 0 {
				return fmt.Errorf("output has no field %q, which the input requires", name)
			}
			continue
		}
		if err := compatible(op, i.Properties[name]); err != nil {
			return fmt.Errorf("field %q: %w", name, err)
		}
	}
	return nil
}

func types(v any) []string {
	switch t := v.(type) {
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

// errNoBranch is a switch or router with no branch for the request.
var errNoBranch = errors.New("no branch matches")
