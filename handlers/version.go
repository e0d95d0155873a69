package handlers

import (
	"net/http"

	"modelplane/buildinfo"
)

// versionHeader answers every API request with the server's build, so that
// a client (the modelplane CLI) can warn when it differs from its own.
func versionHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(buildinfo.Header, buildinfo.Version())
		next.ServeHTTP(w, r)
	})
}
