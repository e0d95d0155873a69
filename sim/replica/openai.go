package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The LLM routes answer errors in OpenAI's shape, as vLLM does, so that the
// gateway passes them to an OpenAI client as they are.

// openAIError is OpenAI's error: {"error":{"message","type","param","code"}}.
type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func ptr[T any](v T) *T { return &v }

func writeOpenAIError(w http.ResponseWriter, status int, e openAIError) {
	b, _ := json.Marshal(struct {
		Error openAIError `json:"error"`
	}{e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeAPIError answers status with message: a 4xx is an
// invalid_request_error (a 429 a rate_limit_error) naming the field the
// message starts with, a 5xx a server_error.
func writeAPIError(w http.ResponseWriter, status int, message string) {
	e := openAIError{Message: message, Type: "invalid_request_error"}
	switch {
	case status >= 500:
		e.Type = "server_error"
	case status == http.StatusTooManyRequests:
		e.Type = "rate_limit_error"
	default:
		e.Param = fieldOf(message)
	}
	writeOpenAIError(w, status, e)
}

// fieldOf is the request field a message starts with ("max_tokens must
// be ...", "messages[0].role is required", "n: ..."), nil when none.
func fieldOf(message string) *string {
	end := strings.IndexFunc(message, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '[' || r == ']')
	})
	if end <= 0 {
		return nil
	}
	f := message[:end]
	switch f {
	case "body", "reading", "request", "simulated", "replica", "rejected", "generation":
		return nil
	}
	return &f
}

// completionRequest is the part of an OpenAI text completion request the
// replica reads.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	User          string          `json:"user"`
	N             *int            `json:"n"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

// parseCompletion reads and validates a text completion body: the prompt is
// a string or an array of strings, joined. Its errors are safe to show.
func parseCompletion(body []byte, defaultMax, maxTokens int) (chatParams, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var req completionRequest
	if err := dec.Decode(&req); err != nil {
		return chatParams{}, fmt.Errorf("body must be a JSON completion request: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return chatParams{}, errors.New("body must hold one JSON object")
	}
	var prompt string
	raw := bytes.TrimSpace(req.Prompt)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &prompt); err != nil {
			return chatParams{}, errors.New("prompt must be a string or an array of strings")
		}
	case len(raw) > 0 && raw[0] == '[':
		var parts []string
		if err := json.Unmarshal(raw, &parts); err != nil {
			return chatParams{}, errors.New("prompt must be a string or an array of strings")
		}
		prompt = strings.Join(parts, "")
	case len(raw) > 0 && string(raw) != "null":
		return chatParams{}, errors.New("prompt must be a string or an array of strings")
	}
	if prompt == "" {
		return chatParams{}, errors.New("prompt must not be empty")
	}
	p, err := commonParams(req.Model, req.Stream, req.User, req.N, req.StreamOptions, req.MaxTokens, nil, defaultMax, maxTokens)
	if err != nil {
		return chatParams{}, err
	}
	p.text = true
	p.promptTokens = max(1, (utf8.RuneCountInString(prompt)+charsPerToken-1)/charsPerToken)
	p.key = append([]byte("prompt\x00"), prompt...)
	return p, nil
}

// OpenAI text completion shapes.
type (
	textCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []textChoice `json:"choices"`
		Usage   *usage       `json:"usage,omitempty"`
	}
	textChoice struct {
		Index        int       `json:"index"`
		Text         string    `json:"text"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	// usageChunk is a stream's last chunk with include_usage: no choices.
	usageChunk struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []struct{} `json:"choices"`
		Usage   *usage     `json:"usage"`
	}
)
