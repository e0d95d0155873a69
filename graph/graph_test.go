package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"modelplane/graph"
)

// endpoints answer each step from a function of the endpoint and the body:
// the executor's contract, with nothing behind it to stand in for.
type endpoints struct {
	mu    sync.Mutex
	calls map[string]int
	fn    func(endpoint string, body []byte, n int) graph.Answer
}

func (e *endpoints) Call(_ context.Context, s graph.Step, body []byte) graph.Answer {
	e.mu.Lock()
	e.calls[s.Endpoint]++
	n := e.calls[s.Endpoint]
	e.mu.Unlock()
	return e.fn(s.Endpoint, body, n)
}

func ok(body string) graph.Answer {
	return graph.Answer{Status: 200, Body: []byte(body), Version: "v1"}
}

func parse(t *testing.T, s string) *graph.Definition {
	t.Helper()
	d, err := graph.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRetriesOnlyIdempotentStepsOnRetryableStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		idempotent string
		status     int
		wantCalls  int
	}{
		{"idempotent step retried on 503", `"idempotent":true,"retries":2`, 503, 3},
		{"idempotent step retried on 502", `"idempotent":true,"retries":1`, 502, 2},
		{"idempotent step not retried on 500", `"idempotent":true,"retries":2`, 500, 1},
		{"idempotent step not retried on 429", `"idempotent":true,"retries":2`, 429, 1},
		{"other step never retried", `"idempotent":false`, 503, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := &endpoints{calls: map[string]int{}, fn: func(string, []byte, int) graph.Answer {
				return graph.Answer{Status: tc.status, Body: []byte(`{"detail":"down"}`)}
			}}
			d := parse(t, `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"m",`+tc.idempotent+`}]}`)
			_, err := graph.Run(t.Context(), d, []byte(`{"instances":[1]}`), e, graph.Options{})
			var se *graph.StepError
			if !errors.As(err, &se) || se.Node != "a" || se.Status != tc.status {
				t.Fatalf("err %v; want a step error of a with %d", err, tc.status)
			}
			if e.calls["m"] != tc.wantCalls {
				t.Errorf("calls %d; want %d", e.calls["m"], tc.wantCalls)
			}
		})
	}
}

func TestSequencePassesPredictionsOnAndSkipsSoftSteps(t *testing.T) {
	t.Parallel()
	e := &endpoints{calls: map[string]int{}, fn: func(ep string, body []byte, _ int) graph.Answer {
		switch ep {
		case "double":
			var in struct{ Instances []float64 }
			_ = json.Unmarshal(body, &in)
			out, _ := json.Marshal(map[string]any{"predictions": []float64{in.Instances[0] * 2}})
			return ok(string(out))
		case "broken":
			return graph.Answer{Status: 500, Body: []byte(`{"detail":"bad"}`)}
		}
		return graph.Answer{Status: 404}
	}}
	d := parse(t, `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","x","b"]},
	 {"id":"a","type":"call","endpoint":"double"},{"id":"x","type":"call","endpoint":"broken","soft":true},{"id":"b","type":"call","endpoint":"double"}]}`)
	res, err := graph.Run(t.Context(), d, []byte(`{"instances":[3]}`), e, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"predictions":[12]}` || len(res.Skipped) != 1 || res.Skipped[0].Node != "x" || res.Skipped[0].Reason != "status 500" {
		t.Errorf("output %s skipped %+v; want 12 with x skipped for its 500", res.Output, res.Skipped)
	}
	if len(res.Steps) != 3 {
		t.Errorf("steps %+v; want 3", res.Steps)
	}
}

func TestEnsembleCombinations(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"a": `{"predictions":[{"label":"fraud","score":0.75},{"label":"legit","score":0.25}]}`,
		"b": `{"predictions":[{"label":"legit","score":0.5},{"label":"legit","score":0.5}]}`,
		"c": `{"predictions":[{"label":"fraud","score":0.25},{"label":"fraud","score":0.75}]}`,
	}
	e := &endpoints{calls: map[string]int{}, fn: func(ep string, _ []byte, _ int) graph.Answer { return ok(answers[ep]) }}
	for _, tc := range []struct{ combine, extra, want string }{
		{"mean", ``, `{"predictions":[0.5,0.5]}`},
		{"weighted_mean", `,"weights":[2,1,1]`, `{"predictions":[0.5625,0.4375]}`},
		{"vote", `,"field":"label"`, `{"predictions":["fraud","legit"]}`},
		{"collect", `,"field":"score"`, `{"predictions":[[0.75,0.5,0.25],[0.25,0.5,0.75]]}`},
	} {
		d := parse(t, `{"entry":"e","nodes":[{"id":"e","type":"ensemble","steps":["a","b","c"],"combine":"`+tc.combine+`"`+tc.extra+`},
		 {"id":"a","type":"call","endpoint":"a"},{"id":"b","type":"call","endpoint":"b"},{"id":"c","type":"call","endpoint":"c"}]}`)
		res, err := graph.Run(t.Context(), d, []byte(`{"instances":[1,2]}`), e, graph.Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.combine, err)
		}
		var got, want any
		_ = json.Unmarshal(res.Output, &got)
		_ = json.Unmarshal([]byte(tc.want), &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Errorf("%s = %s; want %s", tc.combine, gb, wb)
		}
	}
}

func TestValidateSchemasAlongEdges(t *testing.T) {
	t.Parallel()
	targets := map[string]graph.Target{
		"tok":  {Exists: true, Task: "regression", OutputSchema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array"}}}`)},
		"emb":  {Exists: true, Task: "regression", InputSchema: json.RawMessage(`{"type":"object","required":["ids"],"properties":{"ids":{"type":"array"}}}`)},
		"text": {Exists: true, Task: "regression", InputSchema: json.RawMessage(`{"type":"object","required":["ids"],"properties":{"ids":{"type":"string"}}}`)},
		"chat": {Exists: true, Task: "llm"},
	}
	lookup := func(name string) (graph.Target, error) { return targets[name], nil }
	for _, tc := range []struct{ name, def, node string }{
		{"compatible", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","b"]},{"id":"a","type":"call","endpoint":"tok"},{"id":"b","type":"call","endpoint":"emb"}]}`, ""},
		{"type mismatch names the receiving node", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","b"]},{"id":"a","type":"call","endpoint":"tok"},{"id":"b","type":"call","endpoint":"text"}]}`, "b"},
		{"an LLM step needs a template building its chat request", `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"chat"}]}`, "a"},
		{"an LLM endpoint may be the last step", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","l"]},{"id":"a","type":"call","endpoint":"tok"},
		 {"id":"l","type":"call","endpoint":"chat","input":{"messages":[{"role":"user","content":"$a/predictions/0/label"}]}}]}`, ""},
		{"an LLM endpoint is no earlier step", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["l","a"]},{"id":"a","type":"call","endpoint":"tok"},
		 {"id":"l","type":"call","endpoint":"chat","input":{"messages":[]}}]}`, "l"},
		{"an LLM endpoint is no ensemble member", `{"entry":"e","nodes":[{"id":"e","type":"ensemble","combine":"collect","steps":["a","l"]},{"id":"a","type":"call","endpoint":"tok"},
		 {"id":"l","type":"call","endpoint":"chat","input":{"messages":[]}}]}`, "l"},
		{"a soft LLM step is refused", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","l"]},{"id":"a","type":"call","endpoint":"tok"},
		 {"id":"l","type":"call","endpoint":"chat","soft":true,"input":{"messages":[]}}]}`, "l"},
		{"a last LLM step reached twice is refused", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["w","l"]},
		 {"id":"w","type":"switch","cases":[{"field":"request/x","op":"exists","then":"l"}],"default":"a"},{"id":"a","type":"call","endpoint":"tok"},
		 {"id":"l","type":"call","endpoint":"chat","input":{"messages":[]}}]}`, "l"},
		{"unknown type", `{"entry":"a","nodes":[{"id":"a","type":"loop","endpoint":"tok"}]}`, "a"},
		{"missing child", `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["nope"]}]}`, "s"},
	} {
		err := graph.Validate(parse(t, tc.def), "self", lookup)
		var ne *graph.NodeError
		switch {
		case tc.node == "" && err != nil:
			t.Errorf("%s: %v; want valid", tc.name, err)
		case tc.node != "" && (!errors.As(err, &ne) || ne.Node != tc.node):
			t.Errorf("%s: %v; want a refusal naming %q", tc.name, err, tc.node)
		}
	}
}

func TestFormatLabelsTheLargestProbability(t *testing.T) {
	t.Parallel()
	e := &endpoints{calls: map[string]int{}, fn: func(string, []byte, int) graph.Answer {
		return ok(`{"predictions":[{"probabilities":[0.125,0.5,0.25,0.125]},{"probabilities":[[0.75,0.125,0.0625,0.0625]]}]}`)
	}}
	d := parse(t, `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["c","f"]},{"id":"c","type":"call","endpoint":"clf"},
	 {"id":"f","type":"format","field":"probabilities","labels":["invoice","contract","support_ticket","job_application"]}]}`)
	if err := graph.Validate(d, "g", func(string) (graph.Target, error) { return graph.Target{Exists: true}, nil }); err != nil {
		t.Fatal(err)
	}
	res, err := graph.Run(t.Context(), d, []byte(`{"instances":[{"text":"a"},{"text":"b"}]}`), e, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"predictions":[{"label":"contract","probabilities":{"contract":0.5,"invoice":0.125,"job_application":0.125,"support_ticket":0.25},"score":0.5},` +
		`{"label":"invoice","probabilities":{"contract":0.125,"invoice":0.75,"job_application":0.0625,"support_ticket":0.0625},"score":0.75}]}`
	if string(res.Output) != want {
		t.Errorf("format = %s; want %s", res.Output, want)
	}
}

func TestNumbersPassOnAsWritten(t *testing.T) {
	t.Parallel()
	var got []byte
	e := &endpoints{calls: map[string]int{}, fn: func(_ string, body []byte, _ int) graph.Answer {
		got = body
		return ok(`{"predictions":[{"input_ids":[101,9007199254740993,102]}]}`)
	}}
	d := parse(t, `{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["a","b"]},
	 {"id":"a","type":"call","endpoint":"tok"},{"id":"b","type":"call","endpoint":"emb"}]}`)
	if _, err := graph.Run(t.Context(), d, []byte(`{"instances":[{"text":"x","n":1.50}]}`), e, graph.Options{}); err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"instances":[{"input_ids":[101,9007199254740993,102]}]}` {
		t.Errorf("the embedder got %s; want the tokenizer's ids as written", got)
	}
}
