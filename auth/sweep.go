package auth

import (
	"context"
	"log/slog"
	"time"

	"github.com/coder/quartz"

	"modelplane/service"
)

// SweepInterval is how often expired sessions and abandoned sign-ins are
// removed.
const SweepInterval = 5 * time.Minute

// NewSweeper returns the Service that removes expired sessions and, when
// oidc is not nil, abandoned sign-ins every SweepInterval of clock
// (quartz.NewReal() when nil). Every control plane may run one: the
// deletes are idempotent.
func NewSweeper(sessions *Sessions, oidc *OIDC, log *slog.Logger, clock quartz.Clock) service.Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return service.NewFunc(func(ctx context.Context) {
		service.Tick(ctx, clock, SweepInterval, nil, func(ctx context.Context) {
			if _, err := sessions.Sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("sweep sessions", slog.String("error", err.Error()))
			}
			if oidc == nil {
				return
			}
			if _, err := oidc.Sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("sweep logins", slog.String("error", err.Error()))
			}
		})
	})
}
