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

// RepushInterval is how often every control plane pushes the revocation
// list again, whatever happened: a NATS server that restarted reloads the
// account from its trust file, which lists no revocations, and one in a
// cluster may restart without this process's connection noticing.
const RepushInterval = time.Minute

// repushTimeout bounds one push.
const repushTimeout = 10 * time.Second

// Repusher pushes every revocation PostgreSQL lists at start, every
// RepushInterval and whenever wake receives: the control plane's
// system-user connection sends on it at each reconnect, so a restarted
// server learns them as soon as it takes connections again. Every control
// plane runs one (no lease): each pushes on its own connection.
type Repusher struct {
	service.Runner
	svc   *Service
	log   *slog.Logger
	clock quartz.Clock
	wake  <-chan struct{}
}

// repushTries is how often one round tries to push before it waits for
// the next.
const repushTries = 10

// Repusher returns the service that pushes s's revocations again on clock
// and on wake (nil: only on clock).
func (s *Service) Repusher(log *slog.Logger, clock quartz.Clock, wake <-chan struct{}) *Repusher {
	return &Repusher{svc: s, log: log, clock: clock, wake: wake}
}

// Start pushes at once, then every RepushInterval and on wake until Stop.
func (w *Repusher) Start(ctx context.Context) error {
	return w.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, w.clock, RepushInterval, w.wake, func(ctx context.Context) {
			// A push right after a reconnect can meet a server still
			// loading its accounts, or one that has not loaded this
			// account yet and skips the update (its first client would
			// then load the trust file's JWT, which lists no
			// revocations): it is tried again a few times, a second
			// apart (wall-clock time: it waits on the server).
			for attempt := 1; ; attempt++ {
				pctx, cancel := context.WithTimeout(ctx, repushTimeout)
				err := w.svc.pushRevocationsLanded(pctx)
				cancel()
				if err == nil || ctx.Err() != nil {
					return
				}
				if attempt == repushTries {
					w.log.WarnContext(ctx, "push node revocations again", slog.String("error", err.Error()))
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		})
	})
}
