package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"modelplane/auth"
	"modelplane/endpoint"
	"modelplane/registry"
	"modelplane/web"
)

// tryTimeout bounds one Try it request through the gateway.
const tryTimeout = 30 * time.Second

// tryMaxResponse is how much of the gateway's answer Try it shows.
const tryMaxResponse = 64 << 10

// tryItProps fills the Try it section; body "" is replaced by an example
// built from the model's input schema.
func (s *Server) tryItProps(ctx context.Context, csrf string, e endpoint.Endpoint, p *auth.Principal, body string) (web.TryItProps, error) {
	m, err := s.Registry.Model(ctx, p, e.Model)
	if err != nil {
		return web.TryItProps{}, err
	}
	path := tryPath(e.Name, m.Task)
	if body == "" {
		body = exampleBody(m)
	}
	curl := fmt.Sprintf("curl -sS \"$MP_GATEWAY%s\" \\\n  -H \"Authorization: Bearer $MP_API_KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d '%s'",
		path, strings.ReplaceAll(body, "'", `'\''`))
	return web.TryItProps{Endpoint: e.Name, CSRF: csrf, Body: body, Curl: curl, Configured: s.GatewayURL != "",
		CanSend: s.GatewayURL != "" && s.GatewayKey != "" && p.CanWrite(e.TeamID)}, nil
}

// tryPath is the gateway path an endpoint of the task answers on.
func tryPath(endpoint, task string) string {
	if task == registry.TaskLLM {
		return "/v1/endpoints/" + endpoint + "/chat/completions"
	}
	return "/v1/endpoints/" + endpoint + "/predict"
}

// exampleBody is a request an endpoint of m accepts: a chat for an LLM, and
// otherwise one instance with a zero value for each property of the input
// schema (an empty object when the schema names none).
func exampleBody(m registry.Model) string {
	if m.Task == registry.TaskLLM {
		return `{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 64}`
	}
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	instance := map[string]any{}
	if json.Unmarshal(m.InputSchema, &schema) == nil {
		for name, prop := range schema.Properties {
			t, _ := prop.Type.(string)
			if ts, ok := prop.Type.([]any); ok && len(ts) > 0 {
				t, _ = ts[0].(string)
			}
			switch t {
			case "string":
				instance[name] = ""
			case "boolean":
				instance[name] = false
			case "array":
				instance[name] = []any{}
			case "object":
				instance[name] = map[string]any{}
			default:
				instance[name] = 0
			}
		}
	}
	b, _ := json.Marshal(map[string]any{"instances": []any{instance}})
	return string(b)
}

// portalTryIt sends the edited body through the gateway with the portal's
// key and renders the section with the answer. Only writers of the
// endpoint's team may: the request runs, and is billed, as the platform.
func (s *Server) portalTryIt(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, e := pageFrame(r), endpointParam(r)
	p := f.user
	if !p.CanWrite(e.TeamID) {
		s.portalError(w, r, auth.ErrForbidden)
		return
	}
	body := r.PostFormValue("body")
	props, err := s.tryItProps(ctx, f.session.csrf, e, p, body)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if !props.CanSend {
		props.Error = "the portal cannot send requests here; use the curl command"
		s.render(w, r, http.StatusConflict, web.TryItSection(props))
		return
	}
	if !json.Valid([]byte(body)) {
		props.Error = "the body is not valid JSON"
		s.render(w, r, http.StatusUnprocessableEntity, web.TryItSection(props))
		return
	}
	m, err := s.Registry.Model(ctx, p, e.Model)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Status, props.Response, err = s.sendToGateway(ctx, tryPath(e.Name, m.Task), body)
	if err != nil {
		props.Error = "the gateway did not answer: " + err.Error()
	}
	s.render(w, r, http.StatusOK, web.TryItSection(props))
}

// sendToGateway posts body to the gateway and returns its status and the
// start of its answer.
func (s *Server) sendToGateway(ctx context.Context, path, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, tryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.GatewayURL, "/")+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.GatewayKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, tryMaxResponse))
	if err != nil {
		return resp.StatusCode, string(b), err
	}
	return resp.StatusCode, string(b), nil
}
