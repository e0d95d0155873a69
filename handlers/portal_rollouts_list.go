package handlers

import (
	"net/http"
	"slices"

	"modelplane/field"
	"modelplane/rollout"
	"modelplane/web"
)

// rolloutsListLimit is how many rollouts the list shows.
const rolloutsListLimit = 200

// portalRollouts is the rollouts list of every endpoint the user may see,
// filtered by the state parameters (any number; none is every state).
func (s *Server) portalRollouts(w http.ResponseWriter, r *http.Request) {
	f := pageFrame(r)
	props := web.RolloutsListProps{Layout: f.layout(w, "Rollouts", "rollouts"), States: rollout.States}
	for _, st := range r.URL.Query()["state"] {
		if !slices.Contains(rollout.States, st) {
			var errs field.Errors
			errs.Add("state", "unknown state %q", st)
			s.portalError(w, r, errs)
			return
		}
		if !slices.Contains(props.Picked, st) {
			props.Picked = append(props.Picked, st)
		}
	}
	rs, err := s.Rollouts.ListAll(r.Context(), f.user, props.Picked, rolloutsListLimit+1)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if len(rs) > rolloutsListLimit {
		rs, props.More = rs[:rolloutsListLimit], true
	}
	for _, ro := range rs {
		props.Rows = append(props.Rows, rolloutRow(ro))
	}
	s.render(w, r, http.StatusOK, web.RolloutsListPage(props))
}
