package handlers

import (
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"modelplane/replicalog"
	"modelplane/web"
)

// portalLogLines is how many of its last lines a replica's log page shows.
const portalLogLines = 200

// portalReplicaLog shows a replica's last lines, read from its node; with
// fragment=1 only the log section, which the page polls.
func (s *Server) portalReplicaLog(w http.ResponseWriter, r *http.Request) {
	e, f := endpointParam(r), pageFrame(r)
	p := web.ReplicaLogProps{Endpoint: e.Name, Replica: chi.URLParam(r, "replica"), Lines: portalLogLines}
	if s.Logs == nil {
		p.Problem = "Replica logs are unavailable: the control plane has no NATS connection."
	} else {
		c, err := s.Logs.Read(r.Context(), f.user, e.Name, p.Replica, -1, portalLogLines)
		switch {
		case err == nil:
			p.Text = c.Data
		case errors.Is(err, replicalog.ErrNodeSilent):
			p.Problem = "The replica's node did not answer; its agent may be down."
		case errors.Is(err, replicalog.ErrNoLog):
			p.Problem = strings.TrimPrefix(err.Error(), replicalog.ErrNoLog.Error()+": ")
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
