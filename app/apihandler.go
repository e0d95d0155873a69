package app

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/handlers"
)

// APIHandler builds the portal and API that `server` and `dev` serve, over
// PostgreSQL alone: without ClickHouse and NATS there is no meter, no cost
// report, traffic, drift or rollout service, and the readiness checks of
// the absent stores fail (a caller that serves it without them clears
// Ready). `bench api` drives it over HTTP; it exists so that the benchmark
// measures the same assembly rather than a copy, until the control plane
// has one constructor.
func APIHandler(log *slog.Logger, pool *pgxpool.Pool, artifactDir string, maxUploadBytes int64, sessions auth.SessionConfig) (*handlers.Server, error) {
	return controlPlane{Log: log, Pool: pool, ArtifactDir: artifactDir, MaxUploadBytes: maxUploadBytes, Sessions: sessions}.handler()
}
