package enrollment

import (
	"context"
	"log/slog"
	"time"

	"github.com/coder/quartz"

	"modelplane/service"
)

// SweepInterval is how often the control plane revokes rotated credentials
// whose grace is over.
const SweepInterval = 15 * time.Second

// Sweeper runs Sweep every SweepInterval; run it once per control plane
// (under a lease).
type Sweeper struct {
	service.Runner
	svc   *Service
	log   *slog.Logger
	clock quartz.Clock
}

// Sweeper returns the service that runs s.Sweep on clock.
func (s *Service) Sweeper(log *slog.Logger, clock quartz.Clock) *Sweeper {
	return &Sweeper{svc: s, log: log, clock: clock}
}

// Start sweeps at once, then every SweepInterval until Stop.
func (w *Sweeper) Start(ctx context.Context) error {
	return w.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, w.clock, SweepInterval, nil, func(ctx context.Context) {
			if n, err := w.svc.Sweep(ctx); err != nil {
				w.log.WarnContext(ctx, "sweep rotated node credentials", slog.String("error", err.Error()))
			} else if n > 0 {
				w.log.InfoContext(ctx, "revoked rotated node credentials", slog.Int("nodes", n))
			}
		})
	})
}
