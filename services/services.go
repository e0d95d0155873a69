package services

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/chargeback"
	"modelplane/drift"
	"modelplane/endpoint"
	"modelplane/enrollment"
	"modelplane/fleet"
	"modelplane/grant"
	"modelplane/idempotency"
	"modelplane/notify"
	"modelplane/quota"
	"modelplane/registry"
	"modelplane/replicalog"
	"modelplane/reqstats"
	"modelplane/rollout"
	"modelplane/scrape"
	"modelplane/tenant"
	"modelplane/trust"
)

// Set is every domain service the control plane serves, built once. A
// field the stores cannot back is nil, and its comment says so; a user of
// the Set reads nil as "unavailable", never as a zero service.
type Set struct {
	Log      *slog.Logger
	Keys     *auth.Keys
	OIDC     *auth.OIDC // nil disables SSO sign-in and bearer tokens
	Sessions *auth.Sessions
	Tenant   *tenant.Service
	Registry *registry.Service
	// Endpoints creates, changes and reads endpoints, scoped by team.
	Endpoints *endpoint.Service
	// Grants shares endpoints with other teams (call access).
	Grants *grant.Service
	Fleet  *fleet.Fleet
	// Quotas keeps the teams' quotas and tier grants.
	Quotas *quota.Service
	// Attestations keeps what platform admins attest each node has.
	Attestations *trust.Attestations
	// Rates is the cost-rate history.
	Rates *billing.Book
	// Meter reads metered usage; nil without ClickHouse.
	Meter *billing.Meter
	// Chargeback reads usage and cost reports; nil without ClickHouse.
	Chargeback *chargeback.Service
	// Budgets keeps monthly budgets and their alerts.
	Budgets *chargeback.Budgets
	// Advisor gives right-sizing advice; nil without ClickHouse.
	Advisor *chargeback.Advisor
	// Rollouts starts and drives rollouts.
	Rollouts *rollout.Service
	// Traffic reads the gateways' request statistics; nil without
	// ClickHouse.
	Traffic *reqstats.Reader
	// Drift serves drift reports and stored scores; nil without
	// ClickHouse.
	Drift *drift.Service
	// Audit lists the audit log.
	Audit *audit.Log
	// Enrollment enrolls, rotates and revokes nodes; nil without an
	// enrollment authority.
	Enrollment *enrollment.Service
	// Idempotency keeps the API's Idempotency-Key records.
	Idempotency *idempotency.Store
	// Metrics is the registry every service and the HTTP layer export on.
	Metrics *prometheus.Registry
	// Webhooks manages the teams' webhooks and their delivery logs.
	Webhooks *notify.Webhooks
	// Logs reads replicas' logs from their nodes; nil without NATS.
	Logs *replicalog.Reader
	// Scrape lists the runtimes' metrics targets for Prometheus.
	Scrape *scrape.Discovery
}
