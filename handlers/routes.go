package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"modelplane/static"
)

// Handler returns the one route tree of the control plane.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.observe, securityHeaders, s.readDeadline)
	r.NotFound(s.notFound)

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)

	r.Route("/api/v1", func(r chi.Router) {
		r.Use(versionHeader, s.apiAuth, s.idempotency)
		s.newAPI(r)
		r.With(keepReading, s.extractModelAPI).Post("/models/{model}/versions", s.versionRegister)
		r.Get("/models/{model}/versions/{version}/files/*", s.versionFileDownload)
		r.Get("/endpoints/{endpoint}/replicas/{replica}/logs", s.replicaLogs)
		r.Get("/rollouts/{rollout}/events", s.rolloutEventStream)
		r.With(keepReading).Put("/uploads/{upload}/chunks/{sha256}", s.uploadChunk)
	})
	// Node agents fetch artifacts with their own credential, not a user's.
	r.Get("/internal/artifacts/{sha256}", s.internalArtifact)

	s.portalRoutes(r)
	return r
}

// AdminHandler serves what only operators may read, on the admin listener
// (MP_ADMIN_ADDR, loopback by default): /metrics, whose labels name every
// team's routes, and the runtimes' scrape targets (/sd/runtimes), beside
// the health checks. The public Handler has neither, so it answers 404
// there.
func (s *Server) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Handle("/metrics", promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	r.Get("/sd/runtimes", s.scrapeTargets)
	return r
}

// portalRoutes mounts the server-rendered portal.
func (s *Server) portalRoutes(r chi.Router) {
	r.Handle("/static/*", http.StripPrefix("/static/", static.Handler()))
	r.Group(func(r chi.Router) {
		r.Use(limitBody(s.MaxBodyBytes))
		r.Get("/login", s.loginPage)
		r.Post("/login", s.loginStart)
		r.Get("/auth/callback", s.loginCallback)
	})
	r.Group(func(r chi.Router) {
		// The body bound goes on before csrfCheck, which is the first to read
		// the body; wrapped later, it would not bound what csrfCheck's form
		// parser or multipart reader reads.
		r.Use(s.session)
		r.With(keepReading, limitBody(s.MaxUploadBytes), s.csrfCheck, s.extractModel).Post("/models/{model}/versions", s.portalVersionCreate)
		r.Group(func(r chi.Router) {
			r.Use(limitBody(s.MaxBodyBytes), s.csrfCheck)
			r.Post("/logout", s.logout)
			r.Get("/", s.portalLanding)
			r.Get("/endpoints", s.portalEndpoints)
			r.Get("/endpoints/new", s.portalEndpointNew)
			r.Post("/endpoints", s.portalEndpointCreate)
			r.Get("/graphs/new", s.portalGraphNew)
			r.Post("/graphs", s.portalGraphCreate)
			// Parameter middleware runs after csrfCheck, so a forged form
			// learns nothing of what exists.
			r.Group(func(r chi.Router) {
				r.Use(s.extractEndpoint)
				r.Get("/endpoints/{endpoint}", s.portalEndpoint)
				r.Get("/endpoints/{endpoint}/replicas", s.portalEndpointReplicas)
				r.Get("/endpoints/{endpoint}/replicas/{replica}/log", s.portalReplicaLog)
				r.Get("/endpoints/{endpoint}/stats", s.portalEndpointStats)
				r.Get("/endpoints/{endpoint}/drift", s.portalDrift)
				r.Post("/endpoints/{endpoint}/traffic", s.portalTrafficSet)
				r.Post("/endpoints/{endpoint}/try", s.portalTryIt)
				r.Post("/endpoints/{endpoint}/delete", s.portalEndpointDelete)
				r.Post("/endpoints/{endpoint}/settings", s.portalEndpointSettings)
				r.Post("/endpoints/{endpoint}/autoscaling", s.portalAutoscalingSet)
				r.Post("/endpoints/{endpoint}/rollouts", s.portalRolloutStart)
				r.Get("/endpoints/{endpoint}/sharing", s.portalSharing)
				r.Post("/endpoints/{endpoint}/grants", s.portalGrantSet)
				r.Post("/endpoints/{endpoint}/grants/{team}/revoke", s.portalGrantRevoke)
				r.Post("/endpoints/{endpoint}/graph/versions", s.portalGraphVersionCreate)
			})
			r.Get("/shared", s.portalShared)
			r.Get("/rollouts", s.portalRollouts)
			r.Group(func(r chi.Router) {
				r.Use(s.extractRollout)
				r.Get("/rollouts/{rollout}", s.portalRollout)
				r.Get("/rollouts/{rollout}/live", s.portalRolloutLive)
				r.Get("/rollouts/{rollout}/events", s.portalRolloutEvents)
				r.Post("/rollouts/{rollout}/{action}", s.portalRolloutAction)
			})
			r.Get("/models", s.portalModels)
			r.Get("/models/new", s.portalModelNew)
			r.Post("/models", s.portalModelCreate)
			r.Group(func(r chi.Router) {
				r.Use(s.extractModel)
				r.Get("/models/{model}", s.portalModel)
				r.Get("/models/{model}/versions/new", s.portalVersionNew)
				r.Get("/models/{model}/versions/{version}", s.portalVersion)
			})
			r.Get("/team", s.portalTeam)
			r.Post("/team/switch", s.portalTeamSwitch)
			r.Post("/teams", s.portalTeamCreate)
			r.Post("/team/members", s.portalMemberSet)
			r.Post("/team/keys", s.portalKeyCreate)
			r.Post("/team/keys/{id}/revoke", s.portalKeyRevoke)
			r.Get("/team/webhooks", s.portalWebhooks)
			r.Post("/team/webhooks", s.portalWebhookCreate)
			r.Get("/team/webhooks/{webhook}", s.portalWebhookDeliveries)
			r.Post("/team/webhooks/{webhook}/delete", s.portalWebhookDelete)
			r.Post("/team/webhooks/{webhook}/deliveries/{delivery}/redeliver", s.portalWebhookRedeliver)
			r.Get("/audit", s.portalAudit)
			r.Get("/fleet", s.portalFleet)
			r.Get("/fleet/{node}", s.portalNode)
			r.Get("/fleet/{node}/gpus", s.portalNodeGPUs)
			r.Post("/fleet/join-tokens", s.portalJoinTokenCreate)
			r.Post("/fleet/{node}/revoke", s.portalNodeRevoke)
			r.Get("/chargeback", s.portalChargeback)
			r.Get("/chargeback/csv", s.portalChargebackCSV)
			r.Get("/cost-rates", s.portalCostRates)
			r.Post("/cost-rates", s.portalCostRateCreate)
			r.Post("/budgets", s.portalBudgetSet)
			r.Get("/quotas", s.portalQuotas)
			r.Post("/quotas", s.portalQuotaSet)
		})
	})
}
