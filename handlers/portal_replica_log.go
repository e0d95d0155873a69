package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"modelplane/busapi"
	"modelplane/field"
	"modelplane/replicalog"
	"modelplane/web"
)

// portalLogLines is how many of its last lines a replica's log page shows.
const portalLogLines = 200

// portalReplicaLog shows a replica's last lines, read from its node; with
// fragment=1 only the log section, which the page polls. previous and
// container name another of a pool replica's logs, as the API's do.
func (s *Server) portalReplicaLog(w http.ResponseWriter, r *http.Request) {
	e, f := endpointParam(r), pageFrame(r)
	var bad field.Errors
	previous, container := logSource(r.URL.Query(), &bad)
	p := web.ReplicaLogProps{Endpoint: e.Name, Replica: chi.URLParam(r, "replica"), Lines: portalLogLines,
		Previous: previous, Container: container, Containers: busapi.LogContainers}
	switch {
	case bad.Err() != nil:
		p.Problem = bad.Err().Error()
	case s.Logs == nil:
		p.Problem = "Replica logs are unavailable: the control plane has no NATS connection."
	default:
		c, err := s.Logs.Read(r.Context(), f.user, e.Name, busapi.LogRequest{Replica: p.Replica, Offset: -1, Tail: portalLogLines,
			Previous: previous, Container: container})
		switch {
		case err == nil:
			p.Text = c.Data
		case errors.Is(err, replicalog.ErrNodeSilent):
			p.Problem = "The replica's node did not answer; its agent may be down."
		case errors.Is(err, replicalog.ErrNoLog):
			p.Problem = strings.TrimPrefix(err.Error(), replicalog.ErrNoLog.Error()+": ")
		case errors.Is(err, replicalog.ErrUnsupported):
			p.Problem = strings.TrimPrefix(err.Error(), replicalog.ErrUnsupported.Error()+": ")
		default:
			s.portalError(w, r, err)
			return
		}
	}
	if r.URL.Query().Get("fragment") == "1" {
		s.render(w, r, http.StatusOK, web.ReplicaLogText(p))
		return
	}
	p.Layout = f.layout(w, p.Replica+" log", "endpoints")
	s.render(w, r, http.StatusOK, web.ReplicaLogPage(p))
}

// crashLog is the log page query of the crash a pool replica's reason
// names (busapi.CrashedContainer): the previous run of that container,
// which is what a crash-looping container's log holds while it waits to
// start again. "" for any other reason.
func crashLog(reason string) string {
	name, ok := busapi.CrashedContainer(reason)
	if !ok {
		return ""
	}
	q := url.Values{"previous": {"1"}}
	if name != busapi.LogContainerRuntime {
		q.Set("container", name)
	}
	return q.Encode()
}
