package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"modelplane/enrollment"
	"modelplane/web"
)

// enrollmentProps fills the fleet page's enrollment section: shown to
// platform admins when enrollment is configured, to nobody else.
func (s *Server) enrollmentProps(r *http.Request, csrf string) web.EnrollmentProps {
	p := pageFrame(r).user
	if s.Enrollment == nil || p == nil || !p.PlatformAdmin() {
		return web.EnrollmentProps{}
	}
	props := web.EnrollmentProps{Admin: true, CSRF: csrf}
	ns, err := s.Enrollment.Nodes(r.Context(), p)
	if err != nil {
		s.Log.WarnContext(r.Context(), "list enrolled nodes", "error", err.Error())
		return props
	}
	for _, n := range ns {
		row := web.EnrolledNode{Node: n.Node, Enrolled: n.EnrolledAt.UTC().Format("2006-01-02 15:04 UTC"), Revoked: n.RevokedAt != nil}
		if n.RotatedAt != nil {
			row.Rotated = n.RotatedAt.UTC().Format("2006-01-02 15:04 UTC")
		}
		props.Nodes = append(props.Nodes, row)
	}
	return props
}

// portalJoinTokenCreate handles the fleet page's Add node form: it makes a
// join token and shows it once, with the command line that enrolls the
// node. The page is not cached.
func (s *Server) portalJoinTokenCreate(w http.ResponseWriter, r *http.Request) {
	if s.Enrollment == nil {
		writeProblem(w, http.StatusServiceUnavailable, "node enrollment is not configured (MP_NATS_AUTHORITY)")
		return
	}
	form := web.JoinTokenForm{Node: strings.TrimSpace(r.PostFormValue("node")), Host: strings.TrimSpace(r.PostFormValue("host")),
		PortFirst: strings.TrimSpace(r.PostFormValue("port_first")), PortLast: strings.TrimSpace(r.PostFormValue("port_last"))}
	req := enrollment.JoinRequest{Node: form.Node, Host: form.Host, TTL: DefaultJoinTTL}
	for _, f := range []struct {
		name, v string
		to      *int
	}{{"port_first", form.PortFirst, &req.PortFirst}, {"port_last", form.PortLast, &req.PortLast}} {
		if f.v == "" {
			continue
		}
		n, err := strconv.Atoi(f.v)
		if err != nil {
			s.joinTokenFormFailed(w, r, form, validateErr(f.name, "must be a port number"))
			return
		}
		*f.to = n
	}
	token, jt, err := s.Enrollment.CreateJoinToken(r.Context(), pageFrame(r).user, req)
	if err != nil {
		s.joinTokenFormFailed(w, r, form, err)
		return
	}
	t, err := s.fleetTable(r)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	l := pageFrame(r).layout(w, "Fleet", "fleet")
	e := s.enrollmentProps(r, l.CSRF)
	e.NewToken, e.NewTokenNode, e.NewCommand = token, jt.Node, s.joinCommand(token)
	e.NewTokenExpires = jt.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, http.StatusOK, web.FleetPage(web.FleetProps{Layout: l, Table: t, Enrollment: e}))
}

func (s *Server) joinTokenFormFailed(w http.ResponseWriter, r *http.Request, form web.JoinTokenForm, err error) {
	errs, ok := fieldErrors(err)
	if !ok {
		s.portalError(w, r, err)
		return
	}
	t, terr := s.fleetTable(r)
	if terr != nil {
		s.portalError(w, r, terr)
		return
	}
	l := pageFrame(r).layout(w, "Fleet", "fleet")
	e := s.enrollmentProps(r, l.CSRF)
	e.Form, e.Errors = form, errs
	s.render(w, r, http.StatusUnprocessableEntity, web.FleetPage(web.FleetProps{Layout: l, Table: t, Enrollment: e}))
}

// portalNodeRevoke handles a node's revoke button: its NATS and artifact
// credentials end at once.
func (s *Server) portalNodeRevoke(w http.ResponseWriter, r *http.Request) {
	if s.Enrollment == nil {
		writeProblem(w, http.StatusServiceUnavailable, "node enrollment is not configured (MP_NATS_AUTHORITY)")
		return
	}
	node := chi.URLParam(r, "node")
	if err := s.Enrollment.Revoke(r.Context(), pageFrame(r).user, node); err != nil {
		s.portalError(w, r, err)
		return
	}
	redirectFlash(w, r, "/fleet", "Revoked "+node+": its NATS connection is closed and its artifact token refused.")
}
