package handlers

import (
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/field"
	"modelplane/replicalog"
)

// logPoll is how often a followed log asks its node for what is new.
const logPoll = time.Second

// replicaLogs serves GET /api/v1/endpoints/{endpoint}/replicas/{replica}/logs
// as text: the log's last tail lines (100 by default), or with offset the
// bytes from there; with follow=1 it keeps the answer open and writes what
// the replica writes until the caller leaves. X-Log-Next names the offset
// to ask from to go on. The replica is found through the caller's view of
// the endpoint, so another team's answers 404.
func (s *Server) replicaLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tail, offset := 100, int64(-1)
	var bad field.Errors
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			bad.Add("tail", "must be a number of lines from 1 to 10000")
		}
		tail = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			bad.Add("offset", "must be a byte offset, 0 or more")
		}
		offset = n
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	if err := bad.Err(); err != nil {
		s.problem(w, r, err)
		return
	}
	ctx, p := r.Context(), principal(r.Context())
	endpoint, replica := chi.URLParam(r, "endpoint"), chi.URLParam(r, "replica")
	if s.Logs == nil {
		// Another team's endpoint is not found, with NATS or without.
		if _, err := s.Endpoints.Get(ctx, p, endpoint); err != nil {
			s.problem(w, r, err)
			return
		}
		writeProblem(w, http.StatusServiceUnavailable, "replica logs are unavailable: the control plane has no NATS connection")
		return
	}
	c, err := s.Logs.Read(ctx, p, endpoint, replica, offset, tail)
	if err != nil {
		s.logProblem(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Log-Next", strconv.FormatInt(c.Next, 10))
	_, _ = w.Write([]byte(c.Data))
	if !follow {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	t := s.Clock.NewTicker(logPoll, "api", "replica_logs")
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c, err = s.Logs.Read(ctx, p, endpoint, replica, c.Next, 0); err != nil {
			return // the replica went away or its node fell silent: end the answer
		}
		if c.Data != "" {
			if _, err := w.Write([]byte(c.Data)); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}
}

// logProblem maps a log read's failure: the node's silence is 504, a node
// without the log 404 with its reason.
func (s *Server) logProblem(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, replicalog.ErrNodeSilent):
		writeProblem(w, http.StatusGatewayTimeout, "the replica's node did not answer; its agent may be down")
	case errors.Is(err, replicalog.ErrNoLog):
		writeProblem(w, http.StatusNotFound, err.Error())
	default:
		s.problem(w, r, err)
	}
}

// replicaLogsOperation documents the plain chi route of a replica's log,
// which streams text (follow) and so is not a huma operation.
func replicaLogsOperation(reg huma.Registry) *huma.Operation {
	str, num := &huma.Schema{Type: "string"}, &huma.Schema{Type: "integer"}
	problem := map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}
	return &huma.Operation{
		OperationID: "replica-logs", Method: http.MethodGet, Path: "/endpoints/{endpoint}/replicas/{replica}/logs",
		Tags: []string{"endpoints"}, Summary: "A replica's log, read from its node",
		Description: "The replica's last `tail` lines (100 by default), or with `offset` the bytes from there; with follow=1 the answer " +
			"stays open and carries what the replica writes. X-Log-Next is the offset to go on from.",
		Parameters: []*huma.Param{{Name: "endpoint", In: "path", Required: true, Schema: str},
			{Name: "replica", In: "path", Required: true, Schema: str},
			{Name: "tail", In: "query", Schema: num}, {Name: "offset", In: "query", Schema: num},
			{Name: "follow", In: "query", Schema: str}},
		Responses: map[string]*huma.Response{
			"200": {Description: "The log", Content: map[string]*huma.MediaType{"text/plain": {Schema: str}}},
			"400": {Description: "Bad query", Content: problem}, "401": {Description: "Unauthorized", Content: problem},
			"404": {Description: "No such endpoint or replica, or no log on its node", Content: problem},
			"503": {Description: "No NATS connection", Content: problem},
			"504": {Description: "The replica's node did not answer", Content: problem},
		},
	}
}
