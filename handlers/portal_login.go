package handlers

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"modelplane/auth"
	"modelplane/web"
)

func (s *Server) loginProps(r *http.Request) web.LoginProps {
	p := web.LoginProps{ReturnTo: auth.LocalPath(r.FormValue("return_to"))}
	for _, u := range s.DevUsers {
		p.DevUsers = append(p.DevUsers, web.DevUser{Email: u.Email, Description: u.Description})
	}
	return p
}

// renderLogin shows the sign-in page. A browser applies the CSP's
// form-action to every redirect that follows a form post, so this page also
// allows the identity provider's origin: POST /login answers with a redirect
// to its authorization endpoint.
func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, p web.LoginProps) {
	if s.OIDC != nil {
		if origin := s.OIDC.AuthOrigin(); origin != "" {
			h := w.Header()
			h.Set("Content-Security-Policy", strings.Replace(h.Get("Content-Security-Policy"), "form-action 'self'", "form-action 'self' "+origin, 1))
		}
	}
	s.render(w, r, status, web.LoginPage(p))
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, r, http.StatusOK, s.loginProps(r))
}

// loginStart sends the browser to the identity provider.
func (s *Server) loginStart(w http.ResponseWriter, r *http.Request) {
	if s.OIDC == nil {
		p := s.loginProps(r)
		p.Error = "single sign-on is not configured"
		s.renderLogin(w, r, http.StatusServiceUnavailable, p)
		return
	}
	u, err := s.OIDC.BeginHint(r.Context(), r.PostFormValue("return_to"), r.PostFormValue("login_hint"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, auth.LoginCookieFor(u))
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// loginCallback finishes the sign-in and starts a fresh session; any session
// the browser brought is ended (rotation).
func (s *Server) loginCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if s.OIDC == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "single sign-on is not configured")
		return
	}
	if e := q.Get("error"); e != "" {
		p := s.loginProps(r)
		p.Error = "the identity provider refused the sign-in: " + e
		s.renderLogin(w, r, http.StatusBadRequest, p)
		return
	}
	// The state must also be the one this browser started with: a callback
	// URL sent by someone else must not sign the victim into their account.
	bound, cerr := r.Cookie(auth.LoginCookie)
	http.SetCookie(w, auth.ClearLoginCookie())
	var userID int64
	var returnTo string
	err := auth.ErrLoginFailed
	if cerr == nil && auth.ValidCSRF(bound.Value, q.Get("state")) {
		userID, returnTo, err = s.OIDC.Finish(r.Context(), q.Get("state"), q.Get("code"))
	}
	if err != nil {
		if !errors.Is(err, auth.ErrLoginFailed) {
			s.fail(w, r, err)
			return
		}
		s.Log.InfoContext(r.Context(), "sign-in failed", slog.String("reason", err.Error()), slog.String("request_id", requestID(r.Context())))
		p := s.loginProps(r)
		p.Error = "sign-in failed or expired; please try again"
		s.renderLogin(w, r, http.StatusBadRequest, p)
		return
	}
	old := ""
	if c, err := r.Cookie(auth.SessionCookie); err == nil {
		old = c.Value
	}
	token, _, err := s.Sessions.Rotate(r.Context(), old, userID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, s.Sessions.Cookie(token))
	http.Redirect(w, r, returnTo, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.Sessions.End(r.Context(), pageFrame(r).session.token); err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, auth.ClearSessionCookie())
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
