package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"modelplane/graph"
	"modelplane/tracing"
)

// graphDepth is the context key of how many graphs a step runs inside, so
// that graphs calling graphs end even when a cycle was saved around
// validation (definitions changed under each other).
type graphDepth struct{}

// GraphStepsHeader asks a graph endpoint to list its steps in the answer
// (graph.steps): node, endpoint, version, status and latency of each call.
const GraphStepsHeader = "X-Graph-Steps"

// graphAnswer is what a graph adds to its output's answer: its version, the
// soft steps left out (partial then set) and, when asked, every step.
type graphAnswer struct {
	Version string             `json:"version"`
	Partial bool               `json:"partial,omitempty"`
	Skipped []graph.Skip       `json:"skipped,omitempty"`
	Steps   []graph.StepReport `json:"steps,omitempty"`
}

// graphProblem is the problem document of a graph whose hard step failed:
// it names the node, the endpoint it called and that step's status.
type graphProblem struct {
	problemBody
	Node       string `json:"node"`
	Endpoint   string `json:"step_endpoint,omitempty"`
	StepStatus int    `json:"step_status,omitempty"`
}

// runGraph executes graph version v of rt on body and answers: the entry
// node's output with the graph's notes, or 502 naming the hard step that
// failed. Every step goes through handle, as a call of the graph's team.
func (g *Gateway) runGraph(c *call, rt *route, v *version, body []byte, w http.ResponseWriter, r *http.Request) {
	if v.graph == nil {
		g.log.Error("graph version does not parse", "endpoint", c.endpoint, "version", v.name, "error", v.graphBad)
		g.fail(w, c, http.StatusInternalServerError, "internal error", "graph version "+strconv.Quote(v.name)+" cannot be run")
		return
	}
	depth, _ := r.Context().Value(graphDepth{}).(int)
	if depth >= graph.MaxDepth {
		g.fail(w, c, http.StatusLoopDetected, "graph loop", "graphs call graphs more than "+strconv.Itoa(graph.MaxDepth)+" deep")
		return
	}
	// The endpoint's timeout bounds the graph until its answer is written
	// or, for a last LLM step that streams, until the stream starts: from
	// there the stall timeout guards it, as on an LLM endpoint.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(rt.timeout, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	ctx = context.WithValue(ctx, graphDepth{}, depth+1)
	sc := &stepCalls{g: g, parent: c, who: &caller{name: "graph:" + rt.src.Endpoint, team: rt.src.Team, role: "engineer"},
		via: graphRef{rt.src.Endpoint, v.name}, out: w, stream: strings.Contains(r.Header.Get("Accept"), "text/event-stream"),
		streaming: func() { timer.Stop() }}
	intn := g.cfg.GraphIntn
	if intn == nil {
		intn = rand.IntN
	}
	sent := time.Now()
	res, err := graph.Run(ctx, v.graph, body, sc, graph.Options{Clock: g.cfg.Clock, Intn: intn})
	c.upstream = time.Since(sent)
	if err != nil {
		var se *graph.StepError
		switch {
		case r.Context().Err() != nil:
			c.status = 499
		case timedOut.Load():
			g.fail(w, c, http.StatusGatewayTimeout, "upstream timeout", "the graph did not finish within "+rt.timeout.String())
		case errors.As(err, &se):
			c.status = http.StatusBadGateway
			writeGraphProblem(w, c.id, se)
		default:
			g.fail(w, c, http.StatusBadRequest, "bad request", err.Error())
		}
		return
	}
	if res.Relayed {
		// The last step's stream went to the caller as it came.
		c.status = http.StatusOK
		return
	}
	note := graphAnswer{Version: v.name, Partial: len(res.Skipped) > 0, Skipped: res.Skipped}
	if r.Header.Get(GraphStepsHeader) == "true" {
		note.Steps = res.Steps
	}
	// The output goes out as the last step wrote it; only a note to add,
	// or an output that is no object, opens its top level (one level: its
	// parts stay as written). The output is valid JSON (graph.Run), so an
	// object is told by its first byte without decoding it.
	b := []byte(res.Output)
	noted := note.Partial || note.Steps != nil
	var out map[string]json.RawMessage
	if trimmed := bytes.TrimLeft(b, " \t\r\n"); noted || len(trimmed) == 0 || trimmed[0] != '{' {
		if json.Unmarshal(res.Output, &out) != nil || out == nil {
			out = map[string]json.RawMessage{"predictions": res.Output}
			b = nil
		}
	}
	if noted || b == nil {
		if noted {
			nb, err := json.Marshal(note)
			if err != nil {
				g.fail(w, c, http.StatusBadGateway, "bad gateway", "the graph's answer cannot be encoded")
				return
			}
			out["graph"] = nb
		}
		var err error
		if b, err = json.Marshal(out); err != nil {
			g.fail(w, c, http.StatusBadGateway, "bad gateway", "the graph's answer cannot be encoded")
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if note.Partial {
		h.Set("X-Graph-Partial", "true")
	}
	c.status = http.StatusOK
	if c.sampled && len(b) <= maxSampledAnswer {
		c.sampleOf.answer = b
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func writeGraphProblem(w http.ResponseWriter, id string, se *graph.StepError) {
	detail := "graph step " + strconv.Quote(se.Node)
	switch {
	case se.Timeout:
		detail += " timed out"
	case se.Status != 0:
		detail += " answered " + strconv.Itoa(se.Status)
		if se.Detail != "" {
			detail += ": " + se.Detail
		}
	default:
		detail += " failed: " + se.Detail
	}
	p := graphProblem{problemBody: problemBody{Type: "about:blank", Title: "graph step failed", Status: http.StatusBadGateway, Detail: detail, RequestID: id},
		Node: se.Node, Endpoint: se.Endpoint, StepStatus: se.Status}
	b, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(append(b, '\n'))
}

// graphRef names a graph endpoint and its version; the zero value is no
// graph.
type graphRef struct {
	endpoint, version string
}

// stepCalls makes a graph's steps through the gateway's own request path.
type stepCalls struct {
	g      *Gateway
	parent *call
	who    *caller
	// via is the graph the steps are made for, marked on their statistics.
	via graphRef
	// out is the graph caller's writer and stream whether the caller asked
	// for an event stream (Accept: text/event-stream): a last step calling
	// an LLM endpoint then streams its tokens to out, and streaming is
	// called when that stream starts.
	out       http.ResponseWriter
	stream    bool
	streaming func()
}

// Call serves one step as a request of the graph's team to the step's
// endpoint, in memory: authorisation, input validation, rate limits,
// version choice, statistics, metrics and the log line are the ones every
// request gets, and its span is a child of the graph's. An LLM endpoint is
// called at chat/completions (only the last step may call one: its answer
// is the graph's), streaming to the graph's caller when it asked for a
// stream.
func (s *stepCalls) Call(ctx context.Context, step graph.Step, body []byte) graph.Answer {
	k, path := kindPredict, "/predict"
	llm := false
	if rt := s.g.routes.Load().byName[step.Endpoint]; rt != nil && rt.src.Task == "llm" && step.Last {
		k, path, llm = kindChat, "/chat/completions", true
		body = withStream(body, s.stream)
	}
	ctx, span := s.parent.child(ctx, "ml_serving.graph_step", trace.SpanKindInternal,
		attribute.String("graph.node", step.Node), attribute.String("endpoint", step.Endpoint), attribute.Int("attempt", step.Attempt))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/endpoints/"+step.Endpoint+path, bytes.NewReader(body))
	if err != nil {
		if span != nil {
			span.End()
		}
		return graph.Answer{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Pattern = "graph step"
	tracing.Inject(ctx, req.Header)
	id := s.parent.id + ":" + step.Node
	if len(id) > 128 {
		id = id[:128]
	}
	sw := &streamWriter{stepWriter: stepWriter{h: http.Header{}}}
	var w http.ResponseWriter = &sw.stepWriter
	if llm && s.stream {
		sw.out, sw.rc = s.out, http.NewResponseController(s.out)
		sw.started = func() {
			s.streaming()
			if step.Started != nil {
				step.Started()
			}
		}
		w = sw
	}
	c := &call{id: id, endpoint: step.Endpoint, start: time.Now(), step: true, stepWho: s.who, via: s.via}
	s.g.handle(k, c, w, req)
	if llm {
		// The graph's answer is the LLM's: its statistics and sample
		// count the step's tokens.
		s.parent.llmAnswer, s.parent.tokens = true, c.tokens
		if sw.relayed {
			s.parent.streamed, s.parent.firstEvent = true, c.firstEvent
		}
	}
	if span != nil {
		span.SetAttributes(attribute.String("version", c.versionName()), attribute.Int("http.response.status_code", c.status))
		if c.status >= 500 || c.status == 0 {
			span.SetStatus(codes.Error, http.StatusText(c.status))
		}
		span.End()
	}
	if sw.relayed {
		return graph.Answer{Status: sw.status, Version: c.versionName(), Relayed: true}
	}
	if c.status == 499 || sw.status == 0 {
		return graph.Answer{Err: context.Cause(ctx)}
	}
	return graph.Answer{Status: sw.status, Body: sw.buf.Bytes(), Version: c.versionName()}
}

// withStream sets a chat request's stream flag to on: a graph's LLM step
// streams when, and only when, the graph's caller asked for a stream.
func withStream(body []byte, on bool) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return body // the step's own validation refuses it
	}
	m["stream"] = json.RawMessage(strconv.FormatBool(on))
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}

// streamWriter keeps a step's answer in memory like stepWriter until an
// event stream starts with a 200: from then on it writes to the graph's
// caller (out), with the stream's content headers, flushes and write
// deadlines, so the gateway's relay streams the step to the caller as it
// would an LLM endpoint's answer. An error answer stays in memory, for the
// graph's 502.
type streamWriter struct {
	stepWriter
	out     http.ResponseWriter
	rc      *http.ResponseController
	started func()
	relayed bool
}

func (w *streamWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	if status != http.StatusOK || !strings.HasPrefix(w.h.Get("Content-Type"), "text/event-stream") {
		w.stepWriter.WriteHeader(status)
		return
	}
	w.status, w.relayed = status, true
	w.started()
	h := w.out.Header()
	for _, name := range []string{"Content-Type", "Cache-Control"} {
		if v := w.h.Get(name); v != "" {
			h.Set(name, v)
		}
	}
	h.Del("Content-Length")
	w.out.WriteHeader(status)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if w.relayed {
		return w.out.Write(b)
	}
	return w.stepWriter.Write(b)
}

// FlushError flushes a relayed stream to the caller (http.ResponseController).
func (w *streamWriter) FlushError() error {
	if !w.relayed {
		return nil
	}
	return w.rc.Flush()
}

// SetWriteDeadline bounds the caller's writes of a relayed stream: the
// relay's stall timeout (http.ResponseController).
func (w *streamWriter) SetWriteDeadline(t time.Time) error {
	if !w.relayed {
		return nil
	}
	return w.rc.SetWriteDeadline(t)
}

// stepWriter keeps a step's answer in memory.
type stepWriter struct {
	h      http.Header
	status int
	buf    bytes.Buffer
}

func (w *stepWriter) Header() http.Header { return w.h }

func (w *stepWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *stepWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.buf.Write(b)
}
