package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the one route tree of the control plane.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.observe, securityHeaders)

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Handle("/metrics", promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{}))

	r.Route("/api/v1", func(r chi.Router) {
		r.Use(s.apiAuth, s.idempotency)
		s.newAPI(r)
		r.Post("/models/{model}/versions", s.versionRegister)
	})

	s.portalRoutes(r)
	return r
}
