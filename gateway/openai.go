package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The OpenAI routes: POST /v1/chat/completions and /v1/completions name the
// endpoint in the body's "model", so that any OpenAI client given the
// gateway's /v1 as its base URL works unchanged, and GET /v1/models lists
// the LLM endpoints the caller may call. A request on them takes the same
// path as on /v1/endpoints/{endpoint}/...: authentication, rate limits,
// split, pins, shadows, sampling and statistics; only the errors differ, in
// OpenAI's shape.

// openaiErrorBody is OpenAI's error document.
type openaiErrorBody struct {
	Error openaiErrorDetail `json:"error"`
}

type openaiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// openaiError writes the gateway's error of status and title in OpenAI's
// shape: the type and code from the status and title, the parameter from
// a detail that starts with a field's name ("n: only 1 is supported").
// A 202 of an endpoint scaled to zero becomes 503 with its Retry-After:
// an OpenAI client takes any 2xx for an answer, and retries a 503 after
// the delay it is given.
func openaiError(w http.ResponseWriter, status int, title, detail string) {
	if status == http.StatusAccepted {
		status = http.StatusServiceUnavailable
	}
	msg := detail
	if msg == "" {
		msg = title
	}
	e := openaiErrorDetail{Message: msg, Type: "invalid_request_error"}
	code := ""
	switch {
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusNotFound:
		code = "model_not_found"
		e.Param = ptr("model")
	case status == http.StatusTooManyRequests:
		e.Type, code = "rate_limit_error", "rate_limit_exceeded"
		if title == "overloaded" {
			code = "overloaded"
		}
	case status == http.StatusRequestEntityTooLarge:
		code = "request_too_large"
	case status >= 500:
		e.Type = "server_error"
		code = strings.ReplaceAll(title, " ", "_")
	case status == http.StatusBadRequest:
		e.Param = errorParam(detail)
	}
	if code != "" {
		e.Code = &code
	}
	writeOpenAI(w, status, openaiErrorBody{Error: e})
}

// errorParam is the field a detail names first ("messages/0/content: ..."
// from the input schema, "n: ..." from decoding), nil when it names none.
func errorParam(detail string) *string {
	field, _, ok := strings.Cut(detail, ": ")
	if !ok || field == "" || field == "body" {
		return nil
	}
	for _, r := range field {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '/' || r == '.' || r == '[' || r == ']') {
			return nil
		}
	}
	return &field
}

func ptr[T any](v T) *T { return &v }

func writeOpenAI(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// modelOf reads the endpoint's name from the body's model, answering 400
// naming the field when there is none.
func (g *Gateway) modelOf(w http.ResponseWriter, c *call, body []byte) (string, bool) {
	var m struct {
		Model *string `json:"model"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		g.fail(w, c, http.StatusBadRequest, "bad request", badJSON(err).Error()[len(errBadRequest.Error())+1:])
		return "", false
	}
	if m.Model == nil || *m.Model == "" {
		g.fail(w, c, http.StatusBadRequest, "bad request", "model: is required, the name of the endpoint to call")
		return "", false
	}
	return *m.Model, true
}

// openaiModel is one entry of GET /v1/models.
type openaiModel struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	// Created is when the entry was made, in Unix seconds; the routing
	// table does not carry it, so it is 0.
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type openaiModelList struct {
	Object string        `json:"object"`
	Data   []openaiModel `json:"data"`
}

// models answers GET /v1/models: the LLM endpoints the caller may call,
// sorted by name, owned by their team.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	c := &call{id: requestID(r.Header.Get("X-Request-Id")), openai: true}
	w.Header().Set("X-Request-Id", c.id)
	who, ok := g.authenticate(w, c, r)
	if !ok {
		return
	}
	list := openaiModelList{Object: "list", Data: []openaiModel{}}
	for name, rt := range g.routes.Load().byName {
		if rt.src.Task == "llm" && rt.callable(who) {
			list.Data = append(list.Data, openaiModel{ID: name, Object: "model", OwnedBy: rt.src.Team})
		}
	}
	slices.SortFunc(list.Data, func(a, b openaiModel) int { return strings.Compare(a.ID, b.ID) })
	writeOpenAI(w, http.StatusOK, list)
}

// model answers GET /v1/models/{model}: the endpoint's entry, or 404
// model_not_found for one the caller may not call or that is no LLM's.
func (g *Gateway) model(w http.ResponseWriter, r *http.Request) {
	c := &call{id: requestID(r.Header.Get("X-Request-Id")), openai: true, endpoint: r.PathValue("model")}
	w.Header().Set("X-Request-Id", c.id)
	who, ok := g.authenticate(w, c, r)
	if !ok {
		return
	}
	rt := g.routes.Load().byName[c.endpoint]
	if rt == nil || rt.src.Task != "llm" || !rt.callable(who) {
		g.fail(w, c, http.StatusNotFound, "not found", "no LLM endpoint "+strconv.Quote(c.endpoint))
		return
	}
	writeOpenAI(w, http.StatusOK, openaiModel{ID: c.endpoint, Object: "model", OwnedBy: rt.src.Team})
}
