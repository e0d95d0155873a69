package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"modelplane/busapi"
	"modelplane/engine"
)

// chatRequest is the part of an OpenAI chat completion request the replica
// reads; sampling settings (temperature, top_p, ...) are accepted and
// ignored, since the text is drawn from the seed.
type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	User                string         `json:"user"`
	N                   *int           `json:"n"`
	StreamOptions       *streamOptions `json:"stream_options"`
}

// streamOptions is OpenAI's stream_options: include_usage adds a last chunk
// with the usage and no choices.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatParams is a validated chat request.
type chatParams struct {
	model        string
	stream       bool
	user         string
	promptTokens int
	outputTokens int
	// capped is true when the client set max_tokens: reaching it ends the
	// completion with finish_reason "length" instead of "stop".
	capped bool
	// key identifies the conversation (roles and texts) for the seeded draws.
	key []byte
	// includeUsage asks for the usage chunk of a stream (stream_options).
	includeUsage bool
	// text is set for a text completion (POST /v1/completions): the answer
	// has choices[].text instead of a message.
	text bool
}

// charsPerToken is the prompt-length estimate: about four characters
// (Unicode code points) of message text per token, at least one token.
const charsPerToken = 4

// parseChat reads and validates a chat body. Its errors are safe to show.
func parseChat(body []byte, defaultMax, maxTokens int) (chatParams, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var req chatRequest
	if err := dec.Decode(&req); err != nil {
		return chatParams{}, fmt.Errorf("body must be a JSON chat completion request: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return chatParams{}, errors.New("body must hold one JSON object")
	}
	if len(req.Messages) == 0 {
		return chatParams{}, errors.New("messages must not be empty")
	}
	p, err := commonParams(req.Model, req.Stream, req.User, req.N, req.StreamOptions, req.MaxTokens, req.MaxCompletionTokens, defaultMax, maxTokens)
	if err != nil {
		return chatParams{}, err
	}
	var key bytes.Buffer
	chars := 0
	for i, m := range req.Messages {
		if m.Role == "" {
			return chatParams{}, fmt.Errorf("messages[%d].role is required", i)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return chatParams{}, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		chars += utf8.RuneCountInString(text)
		key.WriteString(m.Role)
		key.WriteByte(0)
		key.WriteString(text)
		key.WriteByte(0)
	}
	p.promptTokens = max(1, (chars+charsPerToken-1)/charsPerToken)
	p.key = key.Bytes()
	return p, nil
}

// commonParams checks what chat and text completions share.
func commonParams(model string, stream bool, user string, n *int, opts *streamOptions, maxTok, maxCompletion *int, defaultMax, maxTokens int) (chatParams, error) {
	if n != nil && *n != 1 {
		return chatParams{}, errors.New("n: only 1 is supported")
	}
	p := chatParams{model: model, stream: stream, user: user, outputTokens: defaultMax, includeUsage: opts != nil && opts.IncludeUsage}
	limit := maxTok
	if maxCompletion != nil {
		limit = maxCompletion
	}
	if limit != nil {
		if *limit < 1 || *limit > maxTokens {
			return chatParams{}, fmt.Errorf("max_tokens must be between 1 and %d", maxTokens)
		}
		p.outputTokens, p.capped = *limit, true
	}
	return p, nil
}

// messageText is a message's text: a string, an array of parts whose "text"
// parts count, or null (an assistant message with tool calls).
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
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of parts")
	}
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(part.Text)
	}
	return b.String(), nil
}

// vocabulary is what generated text is made of: token i of a completion is
// vocabulary[splitmix64(hash + i) mod len], so the text is a pure function of
// the seed, the conversation and the position.
var vocabulary = [...]string{
	" the", " model", " request", " replica", " token", " batch", " page", " cache",
	" is", " are", " will", " can", " and", " to", " of", " in",
	" fleet", " gateway", " rollout", " version", " latency", " answer", " we", " it",
	" serves", " streams", " returns", " runs", " quickly", " now", ".", ",",
}

func tokenText(h uint64, i int) string {
	return vocabulary[splitmix64(h+uint64(i))%uint64(len(vocabulary))]
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// OpenAI response shapes.
type (
	chatCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   *usage       `json:"usage,omitempty"`
	}
	chatChoice struct {
		Index        int        `json:"index"`
		Message      *chatDelta `json:"message,omitempty"`
		Delta        *chatDelta `json:"delta,omitempty"`
		FinishReason *string    `json:"finish_reason"`
	}
	chatDelta struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content,omitempty"`
	}
	usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
)

// chat answers POST /v1/chat/completions: it queues a Sequence for the step
// loop and relays the loop's tokens, streamed as SSE or gathered into one
// completion. The client leaving cancels the sequence in the engine at once.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBodyAs(w, r, writeAPIError)
	if !ok {
		return
	}
	p, err := parseChat(body, s.cfg.DefaultMaxTokens, s.cfg.MaxTokens)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.generate(w, r, p, "chat")
}

// completion answers POST /v1/completions, OpenAI's text completion of a
// prompt, from the same step loop as chat.
func (s *Server) completion(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBodyAs(w, r, writeAPIError)
	if !ok {
		return
	}
	p, err := parseCompletion(body, s.cfg.DefaultMaxTokens, s.cfg.MaxTokens)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.generate(w, r, p, "completion")
}

// generate runs a validated request; what names the call for the seeded
// failure draw.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, p chatParams, what string) {
	// Whether the request fails depends on all of it; the text only on the
	// conversation, so a longer max_tokens extends the same answer.
	fh := hashBytes(s.cfg.Seed, []byte(what), p.key, []byte(p.user), fmt.Appendf(nil, "%d", p.outputTokens))
	if fail, _ := s.model.outcome(newRand(s.cfg.Seed, fh)); fail {
		writeAPIError(w, http.StatusInternalServerError, "simulated model failure")
		return
	}
	if s.queueDepth() >= s.cfg.MaxQueue {
		w.Header().Set("Retry-After", "1")
		writeAPIError(w, http.StatusTooManyRequests, "replica queue is full")
		return
	}
	// The tenant is the team the gateway vouches for, never the body's
	// user: a caller could name any user to take another's share.
	g := &generation{
		seq: Sequence{
			ID:           fmt.Sprintf("chatcmpl-%s-%d", s.cfg.ReplicaID, s.nextID.Add(1)),
			Tenant:       r.Header.Get(busapi.TeamHeader),
			PromptTokens: p.promptTokens,
			OutputTokens: p.outputTokens,
		},
		arrived: s.clock.Now(),
		tokens:  make(chan struct{}, s.cfg.StreamBuffer),
		trace:   traceOf(r.Context()),
	}
	s.inbox.push(op{submit: g})

	h := hashBytes(s.cfg.Seed, []byte("text"), p.key)
	ctx := r.Context()
	finish := "stop"
	if p.capped {
		finish = "length"
	}
	// The spans are written once the loop has closed the tokens, after
	// which it no longer writes the generation; a request left earlier
	// has its span alone.
	closed := false
	defer func() {
		if closed {
			genSpans(ctx, g, p.promptTokens, finish)
		}
	}()
	// Wait for the first token before answering, so a rejection can still
	// be a status code.
	select {
	case _, open := <-g.tokens:
		if !open {
			closed = true
			writeGenerationError(w, g.err, p.text)
			return
		}
	case <-ctx.Done():
		s.inbox.push(op{cancel: g.seq.ID})
		return
	}

	model := p.model
	if model == "" {
		model = s.cfg.Version
	}
	head := chatCompletion{ID: g.seq.ID, Created: s.clock.Now().Unix(), Model: model}
	if p.stream {
		closed = s.stream(w, r, g, p, head, finish, h)
		return
	}

	var text strings.Builder
	text.WriteString(tokenText(h, 0))
	n := 1
	for {
		select {
		case _, open := <-g.tokens:
			if open {
				text.WriteString(tokenText(h, n))
				n++
				continue
			}
		case <-ctx.Done():
			s.inbox.push(op{cancel: g.seq.ID})
			return
		}
		break
	}
	closed = true
	if g.err != nil {
		writeGenerationError(w, g.err, p.text)
		return
	}
	u := &usage{PromptTokens: p.promptTokens, CompletionTokens: n, TotalTokens: p.promptTokens + n}
	if p.text {
		writeJSON(w, http.StatusOK, textCompletion{ID: head.ID, Object: "text_completion", Created: head.Created, Model: head.Model,
			Choices: []textChoice{{Text: text.String(), FinishReason: &finish}}, Usage: u})
		return
	}
	head.Object = "chat.completion"
	head.Choices = []chatChoice{{Message: &chatDelta{Role: "assistant", Content: text.String()}, FinishReason: &finish}}
	head.Usage = u
	writeJSON(w, http.StatusOK, head)
}

// stream relays the tokens as server-sent events: one chunk per token, then
// a chunk with finish_reason and usage, then [DONE]. The first token has
// already arrived. A failed write (a client gone or stalled past
// WriteTimeout) cancels the generation. It reports whether it saw the
// loop close the tokens.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, g *generation, p chatParams, head chatCompletion, finish string, h uint64) (closed bool) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	head.Object = "chat.completion.chunk"
	if p.text {
		head.Object = "text_completion"
	}
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	chunk := func(d chatDelta) any {
		if p.text {
			return textCompletion{ID: head.ID, Object: head.Object, Created: head.Created, Model: head.Model, Choices: []textChoice{{Text: d.Content}}}
		}
		c := head
		c.Choices = []chatChoice{{Delta: &d}}
		return c
	}

	if !send(chunk(chatDelta{Role: "assistant", Content: tokenText(h, 0)})) {
		s.inbox.push(op{cancel: g.seq.ID})
		return
	}
	n := 1
	for {
		select {
		case _, open := <-g.tokens:
			if open {
				if !send(chunk(chatDelta{Content: tokenText(h, n)})) {
					s.inbox.push(op{cancel: g.seq.ID})
					return
				}
				n++
				continue
			}
		case <-ctx.Done():
			s.inbox.push(op{cancel: g.seq.ID})
			return
		}
		break
	}
	closed = true
	if g.err != nil {
		// The status is sent; say what happened in the stream and stop
		// without [DONE], as OpenAI does.
		s.stats.failedAfterHeaders()
		send(map[string]any{"error": map[string]string{"message": g.err.Error(), "type": "server_error"}})
		return
	}
	// The finish chunk carries the usage too, as it always has: the
	// gateway meters a stream's tokens from it. With include_usage the
	// usage comes, as OpenAI sends it, in a last chunk of no choices.
	u := &usage{PromptTokens: p.promptTokens, CompletionTokens: n, TotalTokens: p.promptTokens + n}
	var last any
	if p.text {
		t := textCompletion{ID: head.ID, Object: head.Object, Created: head.Created, Model: head.Model, Choices: []textChoice{{FinishReason: &finish}}}
		if !p.includeUsage {
			t.Usage = u
		}
		last = t
	} else {
		c := head
		c.Choices = []chatChoice{{Delta: &chatDelta{}, FinishReason: &finish}}
		if !p.includeUsage {
			c.Usage = u
		}
		last = c
	}
	ok := send(last)
	if ok && p.includeUsage {
		ok = send(usageChunk{ID: head.ID, Object: head.Object, Created: head.Created, Model: head.Model, Choices: []struct{}{}, Usage: u})
	}
	if ok {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		_ = rc.Flush()
	}
	return closed
}

// writeGenerationError answers a generation that ended before its first
// token (or, for a non-streamed answer, before its last).
func writeGenerationError(w http.ResponseWriter, err error, text bool) {
	switch {
	case errors.Is(err, engine.ErrTooLarge):
		// The prompt leaves no room in the context window: OpenAI's
		// context_length_exceeded, on the field that holds the prompt.
		param := "messages"
		if text {
			param = "prompt"
		}
		writeOpenAIError(w, http.StatusBadRequest, openAIError{Message: err.Error(), Type: "invalid_request_error",
			Param: &param, Code: ptr("context_length_exceeded")})
	case errors.Is(err, errRejected):
		writeAPIError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errShutdown):
		w.Header().Set("Retry-After", "1")
		writeAPIError(w, http.StatusServiceUnavailable, errShutdown.Error())
	default:
		writeAPIError(w, http.StatusInternalServerError, "generation failed")
	}
}

// queueDepth is the number of chat requests not yet in the batch.
func (s *Server) queueDepth() int {
	return s.inbox.waiting() + s.stats.engineStats().Waiting
}
