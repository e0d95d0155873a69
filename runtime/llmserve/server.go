package llmserve

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/engine"
	"modelplane/llm"
)

// Message is one chat message.
type Message struct {
	Role    string
	Content string
}

// Tokenizer is the model's vocabulary and chat template.
type Tokenizer interface {
	// Encode turns plain text into tokens; control tokens written in it
	// stay text.
	Encode(text string) []int
	Decode(tokens []int) string
	// TokenBytes is the bytes one token adds to the text (none for a
	// control token); first says it starts the completion.
	TokenBytes(id int, first bool) []byte
	// Prompt is Encode for a request: a text of more than limit tokens
	// is llm.ErrTooLong, found in time linear in its length (its bytes are
	// checked before any work), and encoding stops when ctx is done.
	Prompt(ctx context.Context, text string, limit int) ([]int, error)
	// Chat renders messages with the model's chat template, opening the
	// assistant's turn, and returns the tokens and the texts that end the
	// turn, with Prompt's limit and ctx. Only the template's own markers
	// become control tokens: the messages are text.
	Chat(ctx context.Context, msgs []Message, limit int) (prompt []int, stops []string, err error)
}

// Options configure a Server.
type Options struct {
	// Model is the name answered in /v1/models and responses.
	Model string
	// Token, when set, is required in busapi.ReplicaTokenHeader on all but
	// the probes (health, readiness, models, metrics).
	Token string
	// MaxBodyBytes bounds a request body; default 8 MiB.
	MaxBodyBytes int64
	// ReplicaID and Version are reported on /v2/stats.
	ReplicaID, Version string
}

// Server answers the OpenAI-shaped replica API on an Engine.
type Server struct {
	eng     *Engine
	tok     Tokenizer
	opt     Options
	metrics *metrics
	nextID  atomic.Uint64
	ready   atomic.Bool
}

// NewServer returns a server of eng; it is ready at once.
func NewServer(eng *Engine, tok Tokenizer, opt Options) *Server {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 8 << 20
	}
	s := &Server{eng: eng, tok: tok, opt: opt}
	s.metrics = newMetrics(opt.Model, eng)
	s.ready.Store(true)
	return s
}

// Drain makes readiness fail while requests in flight are answered.
func (s *Server) Drain() { s.ready.Store(false) }

// Handler serves:
//
//	POST /v1/chat/completions, /v1/completions   OpenAI shapes, SSE with stream
//	GET  /v1/models                              the served model
//	GET  /health, /v2/health/live, /v2/health/ready
//	GET  /metrics                                vllm:* series
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.serveReady)
	mux.HandleFunc("GET /v2/health/ready", s.serveReady)
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /v2/stats", s.serveStats)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", "", "no such route on this runtime")
	})
	if s.opt.Token == "" {
		return mux
	}
	want := []byte(s.opt.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !probe(r) && subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
			writeError(w, http.StatusUnauthorized, "authentication_error", "", "this replica answers only its gateways")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func probe(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	switch r.URL.Path {
	case "/health", "/v2/health/live", "/v2/health/ready", "/v1/models", "/metrics", "/v2/stats":
		return true
	}
	return false
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "runtime is draining")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// serveStats is GET /v2/stats in the simulated LLM replica's shape
// (sim/replica.Stats), so the agent observes this runtime unchanged.
func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	st := s.eng.SchedulerStats()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	writeJSON(w, http.StatusOK, map[string]any{
		"replica_id": s.opt.ReplicaID, "endpoint": s.opt.Model, "version": s.opt.Version, "task": "llm",
		"ready": s.ready.Load(), "queue_depth": st.Waiting, "in_flight": st.Waiting + st.Running, "batch_size": st.Running,
		"kv_pages_used": st.KVPagesUsed, "kv_pages_total": st.KVPagesTotal, "kv_utilization": st.KVUtilization,
		"tokens_per_second": st.TokensPerSecond,
		"ttft_p50_ms":       ms(st.TTFT.P50), "ttft_p99_ms": ms(st.TTFT.P99), "tpot_p50_ms": ms(st.TPOT.P50), "tpot_p99_ms": ms(st.TPOT.P99),
		"requests": st.Submitted, "cancelled": st.Cancelled, "window_seconds": engine.StatsWindow.Seconds(),
	})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
		{"id": s.opt.Model, "object": "model", "owned_by": "modelplane", "max_model_len": s.eng.m.Context()},
	}})
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	var p, code any
	if param != "" {
		p = param
	}
	if status == http.StatusBadRequest {
		code = "invalid_request"
		if strings.Contains(msg, "context length") {
			code = "context_length_exceeded"
		}
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// params are the fields both completion shapes share.
type params struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Seed                *int64          `json:"seed"`
	N                   *int            `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	User                string          `json:"user"`
	// IgnoreEOS is vLLM's extra sampling parameter: generate to max_tokens
	// (or a stop string) past the model's end of sequence.
	IgnoreEOS bool `json:"ignore_eos"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatBody struct {
	params
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type completionBody struct {
	params
	Prompt json.RawMessage `json:"prompt"`
}

// badRequest is an invalid request, naming its field.
type badRequest struct{ param, msg string }

func (e *badRequest) Error() string { return e.msg }

func bad(param, format string, a ...any) error {
	return &badRequest{param: param, msg: fmt.Sprintf(format, a...)}
}

func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return bad("", "body must be a JSON object: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("", "body must hold one JSON object")
	}
	return nil
}

// job is a validated request ready for the engine.
type job struct {
	kind   string // "chat" or "text"
	p      params
	prompt []int
	stops  []string
	req    Request
}

// build checks the parameters of a request whose prompt, in the field
// field, is prompt.
func (s *Server) build(p params, field string, prompt []int) (*job, error) {
	if p.N != nil && *p.N != 1 {
		return nil, bad("n", "n: only 1 is supported")
	}
	j := &job{p: p, prompt: prompt}
	ctx := s.eng.m.Context()
	if len(prompt) >= ctx {
		return nil, bad(field, "the prompt is %d tokens; this model's context length is %d", len(prompt), ctx)
	}
	maxTokens := ctx - len(prompt)
	limit := p.MaxTokens
	if p.MaxCompletionTokens != nil {
		limit = p.MaxCompletionTokens
	}
	if limit != nil {
		if *limit < 1 {
			return nil, bad("max_tokens", "max_tokens must be at least 1")
		}
		if len(prompt)+*limit > ctx {
			return nil, bad("max_tokens", "%d prompt tokens and max_tokens %d exceed the context length of %d", len(prompt), *limit, ctx)
		}
		maxTokens = *limit
	}
	samp := Sampling{Temperature: 1, TopP: 1, Seed: p.Seed}
	if t := p.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return nil, bad("temperature", "temperature must be between 0 and 2")
		}
		samp.Temperature = *t
	}
	if t := p.TopP; t != nil {
		if *t <= 0 || *t > 1 {
			return nil, bad("top_p", "top_p must be above 0 and at most 1")
		}
		samp.TopP = *t
	}
	if len(p.Stop) > 0 && string(p.Stop) != "null" {
		var one string
		if err := json.Unmarshal(p.Stop, &one); err == nil {
			j.stops = []string{one}
		} else if err := json.Unmarshal(p.Stop, &j.stops); err != nil {
			return nil, bad("stop", "stop must be a string or an array of strings")
		}
		if len(j.stops) > 4 {
			return nil, bad("stop", "stop takes at most 4 strings")
		}
		for _, st := range j.stops {
			if st == "" {
				return nil, bad("stop", "stop strings must not be empty")
			}
		}
	}
	j.req = Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: samp, IgnoreEOS: p.IgnoreEOS}
	if len(j.stops) > 0 {
		j.req.Stop = func(c []int) bool { _, hit := cutStop(s.tok.Decode(c), j.stops); return hit }
	}
	return j, nil
}

// cutStop cuts text at the first stop string.
func cutStop(text string, stops []string) (string, bool) {
	cut := -1
	for _, st := range stops {
		if i := strings.Index(text, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return text, false
	}
	return text[:cut], true
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "body too large or unreadable")
		return nil, false
	}
	return b, true
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	j, err := s.parseChat(r.Context(), body)
	if err != nil {
		s.refuse(w, err)
		return
	}
	j.kind = "chat"
	s.run(w, r, j)
}

func (s *Server) parseChat(ctx context.Context, body []byte) (*job, error) {
	var b chatBody
	if err := decode(body, &b); err != nil {
		return nil, err
	}
	if len(b.Messages) == 0 {
		return nil, bad("messages", "messages must not be empty")
	}
	msgs := make([]Message, len(b.Messages))
	for i, m := range b.Messages {
		if m.Role == "" {
			return nil, bad(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return nil, bad(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		msgs[i] = Message{Role: m.Role, Content: text}
	}
	prompt, turnStops, err := s.tok.Chat(ctx, msgs, s.eng.m.Context()-1)
	if err != nil {
		return nil, s.encodeError("messages", err)
	}
	j, err := s.build(b.params, "messages", prompt)
	if err != nil {
		return nil, err
	}
	j.stops = append(j.stops, turnStops...)
	if j.req.Stop == nil && len(j.stops) > 0 {
		j.req.Stop = func(c []int) bool { _, hit := cutStop(s.tok.Decode(c), j.stops); return hit }
	}
	return j, nil
}

func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errors.New("must be a string or an array of parts")
		}
		return s, nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var b completionBody
	if err := decode(body, &b); err != nil {
		s.refuse(w, err)
		return
	}
	var text string
	if err := json.Unmarshal(b.Prompt, &text); err != nil {
		var one []string
		if json.Unmarshal(b.Prompt, &one) != nil || len(one) != 1 {
			s.refuse(w, bad("prompt", "prompt must be a string (or an array of one string)"))
			return
		}
		text = one[0]
	}
	if text == "" {
		s.refuse(w, bad("prompt", "prompt must not be empty"))
		return
	}
	prompt, err := s.tok.Prompt(r.Context(), text, s.eng.m.Context()-1)
	if err != nil {
		s.refuse(w, s.encodeError("prompt", err))
		return
	}
	j, err := s.build(b.params, "prompt", prompt)
	if err != nil {
		s.refuse(w, err)
		return
	}
	j.kind = "text"
	s.run(w, r, j)
}

// encodeError is a prompt's encoding failure: one that cannot fit the
// context is the caller's (400 on param), a cancelled one is left
// unanswered (the caller has gone).
func (s *Server) encodeError(param string, err error) error {
	if errors.Is(err, llm.ErrTooLong) {
		return bad(param, "the prompt is longer than this model's context length of %d tokens", s.eng.m.Context())
	}
	return err
}

func (s *Server) refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // the caller has gone; encoding stopped
	}
	var br *badRequest
	if errors.As(err, &br) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", br.param, br.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, "server_error", "", "generation failed")
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// run submits the job and relays its tokens. The tenant is the team the
// gateway vouches for, never the body's user: the key of the tenant caps
// and the prefix cache's salt, so teams never share a cached page.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job) {
	if !s.ready.Load() {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "runtime is draining")
		return
	}
	j.req.Tenant = r.Header.Get(busapi.TeamHeader)
	id, events, err := s.eng.Submit(j.req)
	if err != nil {
		if errors.Is(err, ErrTooLong) {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "messages", err.Error())
			return
		}
		if errors.Is(err, ErrQueueFull) {
			// Not 503: the gateway takes a 503 for a broken replica, and
			// a full queue is a busy one. An OpenAI client retries a 429
			// after Retry-After.
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
				"message": "the runtime's waiting queue is full; retry later", "type": "rate_limit_error",
				"param": nil, "code": "overloaded"}})
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "server_error", "", err.Error())
		return
	}
	st := &relay{s: s, j: j, created: time.Now().Unix(), model: j.p.Model,
		id: fmt.Sprintf("%s-%d", map[string]string{"chat": "chatcmpl", "text": "cmpl"}[j.kind], s.nextID.Add(1))}
	st.trace.on = trace.SpanFromContext(r.Context()).IsRecording()
	defer st.trace.spans(r.Context(), len(j.prompt))
	if st.model == "" {
		st.model = s.opt.Model
	}
	ctx := r.Context()
	var first Event
	select {
	case first = <-events:
	case <-ctx.Done():
		s.eng.Cancel(id)
		return
	}
	if first.Err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", first.Err.Error())
		return
	}
	if j.p.Stream {
		st.stream(w, r, id, first, events)
		return
	}
	ev := first
	for {
		if ev.Done {
			break
		}
		st.add(ev)
		select {
		case ev = <-events:
		case <-ctx.Done():
			s.eng.Cancel(id)
			return
		}
	}
	if ev.Err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "", ev.Err.Error())
		return
	}
	text, reason := st.final(ev)
	u := st.usage()
	if j.kind == "chat" {
		writeJSON(w, http.StatusOK, map[string]any{"id": st.id, "object": "chat.completion", "created": st.created, "model": st.model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": reason}},
			"usage":   u})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": st.id, "object": "text_completion", "created": st.created, "model": st.model,
		"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": reason}}, "usage": u})
}

// relay turns a generation's tokens into text. Each token's bytes go
// through a UTF-8 buffer, so a character split over tokens is held until
// it completes and a byte that can start none is U+FFFD; the text is
// therefore valid UTF-8, the same streamed or not. It holds back what
// could still become a stop string.
type relay struct {
	s       *Server
	j       *job
	id      string
	model   string
	created int64
	tokens  []int
	utf     llm.UTF8Buffer
	text    strings.Builder // the valid text so far
	emitted bool            // a token has added bytes (SentencePiece's first)
	sent    int             // bytes of text sent
	trace   genTrace
}

func (st *relay) add(ev Event) {
	st.trace.event(st.s.eng, ev)
	tok := ev.Token
	st.tokens = append(st.tokens, tok)
	b := st.s.tok.TokenBytes(tok, !st.emitted)
	if len(b) == 0 {
		return
	}
	st.emitted = true
	st.text.WriteString(st.utf.Write(b))
}

// delta is the text safe to send now: complete characters, less what a
// stop string could still claim.
func (st *relay) delta() string {
	text := st.text.String()
	hold := 0
	for _, stop := range st.j.stops {
		hold = max(hold, len(stop)-1)
	}
	end := max(st.sent, len(text)-hold)
	for end > st.sent && end < len(text) && !utf8.RuneStart(text[end]) {
		end--
	}
	d := text[st.sent:end]
	st.sent = end
	return d
}

// final is the whole text, an unfinished character at its end flushed as
// U+FFFD and cut at a stop string, and the finish reason of end, the
// generation's last event.
func (st *relay) final(end Event) (string, string) {
	st.trace.event(st.s.eng, end)
	st.text.WriteString(st.utf.Flush())
	text, _ := cutStop(st.text.String(), st.j.stops)
	return text, end.Reason
}

func (st *relay) usage() usage {
	return usage{PromptTokens: len(st.j.prompt), CompletionTokens: len(st.tokens), TotalTokens: len(st.j.prompt) + len(st.tokens)}
}

func (st *relay) chunk(text string, first bool, reason any) map[string]any {
	if st.j.kind == "chat" {
		delta := map[string]any{}
		if first {
			delta["role"] = "assistant"
		}
		if text != "" || first {
			delta["content"] = text
		}
		return map[string]any{"id": st.id, "object": "chat.completion.chunk", "created": st.created, "model": st.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": reason}}}
	}
	return map[string]any{"id": st.id, "object": "text_completion", "created": st.created, "model": st.model,
		"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": reason}}}
}

// stream sends one chunk per token (page-boundary tokens included), a
// final chunk with finish_reason, the usage chunk when asked, and [DONE].
// A client gone cancels the generation, which frees its pages.
func (st *relay) stream(w http.ResponseWriter, r *http.Request, id string, ev Event, events <-chan Event) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	first := true
	for !ev.Done {
		st.add(ev)
		if !send(st.chunk(st.delta(), first, nil)) {
			st.s.eng.Cancel(id)
			return
		}
		first = false
		select {
		case ev = <-events:
		case <-ctx.Done():
			st.s.eng.Cancel(id)
			return
		}
	}
	if ev.Err != nil {
		send(map[string]any{"error": map[string]any{"message": ev.Err.Error(), "type": "server_error"}})
		return
	}
	text, reason := st.final(ev)
	rest := ""
	if len(text) > st.sent {
		rest = text[st.sent:]
	}
	last := st.chunk(rest, false, reason)
	if !send(last) {
		return
	}
	if st.j.p.StreamOptions != nil && st.j.p.StreamOptions.IncludeUsage {
		u := st.chunk("", false, nil)
		u["choices"] = []any{}
		u["usage"] = st.usage()
		if !send(u) {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}
