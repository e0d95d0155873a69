package handlers

import (
	"net/http"
	"strings"

	"modelplane/auth"
)

// portalLanding sends each person where their work is: finance, who reads
// every team's cost and owns no endpoint, to chargeback; everyone else to
// the endpoints.
func (s *Server) portalLanding(w http.ResponseWriter, r *http.Request) {
	target := "/endpoints"
	if pageFrame(r).user.PlatformRole == auth.RoleFinance {
		target = "/chargeback"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// notFound answers a path no route serves: the portal's styled error page,
// or for the API and the agents' paths chi's plain 404 as before (the API's
// own not-found answers are problem+json from its handlers).
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/internal/") {
		http.NotFound(w, r)
		return
	}
	s.renderError(w, r, http.StatusNotFound, "no such page")
}
