package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/busapi"
	"modelplane/field"
	"modelplane/replicalog"
)

// logPoll is how often a followed log asks its node for what is new.
const logPoll = time.Second

// replicaLogs serves GET /api/v1/endpoints/{endpoint}/replicas/{replica}/logs
// as text: the log's last tail lines (100 by default), or with offset the
// bytes from there; with follow=1 it keeps the answer open and writes what
// the replica writes until the caller leaves. X-Log-Next names the offset
// to ask from to go on. A pool replica's pod has more than one log:
// previous=1 reads the last terminated run, container= the fetch init
// container or the guard sidecar (a node's replica answers 400). The
// replica is found through the caller's view of the endpoint, so another
// team's answers 404.
func (s *Server) replicaLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tail, offset := 100, int64(-1)
	var bad field.Errors
	previous, container := logSource(q, &bad)
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
	req := busapi.LogRequest{Replica: replica, Offset: offset, Tail: tail, Previous: previous, Container: container}
	c, err := s.Logs.Read(ctx, p, endpoint, req)
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
		req.Offset, req.Tail = c.Next, 0
		if c, err = s.Logs.Read(ctx, p, endpoint, req); err != nil {
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

// logSource reads which of a replica's logs a query names: previous (1 or
// 0) and container (busapi.LogContainers, "" for the runtime's).
func logSource(q url.Values, bad *field.Errors) (previous bool, container string) {
	switch q.Get("previous") {
	case "", "0", "false":
	case "1", "true":
		previous = true
	default:
		bad.Add("previous", "must be 1 or 0")
	}
	container = q.Get("container")
	if container != "" && !slices.Contains(busapi.LogContainers, container) {
		bad.Add("container", "must be one of %s", strings.Join(busapi.LogContainers, ", "))
	}
	return previous, container
}

// logProblem maps a log read's failure: the node's silence is 504, a node
// without the log 404 with its reason, a log the node does not keep (a
// previous run of a node's replica) 400 with its reason.
func (s *Server) logProblem(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, replicalog.ErrUnsupported):
		writeProblem(w, http.StatusBadRequest, err.Error())
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
			"stays open and carries what the replica writes. X-Log-Next is the offset to go on from. A replica of a Kubernetes pool " +
			"is a pod: `previous=1` reads its container's last terminated run (a crash loop's crash, as `kubectl logs --previous`), " +
			"`container` another of its containers (`fetch`, the init container that downloads the version's files; `guard`, the " +
			"token sidecar; `runtime` is the default). A node's replica has one log, every run appended: it answers 400 to either.",
		Parameters: []*huma.Param{{Name: "endpoint", In: "path", Required: true, Schema: str},
			{Name: "replica", In: "path", Required: true, Schema: str},
			{Name: "tail", In: "query", Schema: num}, {Name: "offset", In: "query", Schema: num},
			{Name: "follow", In: "query", Schema: str},
			{Name: "previous", In: "query", Description: "1: the last terminated run of the container (pool replicas)",
				Schema: &huma.Schema{Type: "string", Enum: []any{"0", "1", "false", "true"}}},
			{Name: "container", In: "query", Description: "the pod's container whose log to read (pool replicas); runtime by default",
				Schema: &huma.Schema{Type: "string", Enum: []any{busapi.LogContainerRuntime, busapi.LogContainerFetch, busapi.LogContainerGuard}}}},
		Responses: map[string]*huma.Response{
			"200": {Description: "The log", Content: map[string]*huma.MediaType{"text/plain": {Schema: str}}},
			"400": {Description: "Bad query, or a previous run or container asked of a node's replica", Content: problem},
			"401": {Description: "Unauthorized", Content: problem},
			"404": {Description: "No such endpoint or replica, or no log on its node", Content: problem},
			"503": {Description: "No NATS connection", Content: problem},
			"504": {Description: "The replica's node did not answer", Content: problem},
		},
	}
}
