package auth

import (
	"context"
	"log/slog"
	"time"

	"github.com/coder/quartz"

	"modelplane/service"
)

// IdentityInterval is how often the OIDC signing keys and the memberships
// are published to the gateways: a removed member's tokens stop working on
// every gateway within about this long.
const IdentityInterval = 3 * time.Second

// IdentityLoop publishes identity every IdentityInterval while it runs; it
// is leader-only (run it under db.Lease) and each start is a leadership
// term (BeginTerm).
type IdentityLoop struct {
	service.Runner
	pub *IdentityPublisher
	// bucketKeys lists the keys now in mp_identity (nil: none known).
	bucketKeys func(ctx context.Context) ([]string, error)
	log        *slog.Logger
	clock      quartz.Clock
}

// NewIdentityLoop returns the loop over pub. bucketKeys lists the keys in
// mp_identity at the start of a term, so the term's first pass deletes
// entries of users who lost their memberships while another control plane
// led or none ran. It ticks on clock (quartz.NewReal() when nil).
func NewIdentityLoop(pub *IdentityPublisher, bucketKeys func(ctx context.Context) ([]string, error), log *slog.Logger, clock quartz.Clock) *IdentityLoop {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &IdentityLoop{pub: pub, bucketKeys: bucketKeys, log: log, clock: clock}
}

// Start begins a term and publishes until Stop.
func (l *IdentityLoop) Start(ctx context.Context) error {
	return l.Go(ctx, func(ctx context.Context) {
		var keys []string
		if l.bucketKeys != nil {
			// A failed listing is not fatal: the term still rewrites every
			// current entry; only stale ones wait for a later term.
			keys, _ = l.bucketKeys(ctx)
		}
		l.pub.BeginTerm(keys)
		failing := false
		service.Tick(ctx, l.clock, IdentityInterval, nil, func(ctx context.Context) {
			_, err := l.pub.Publish(ctx)
			if err != nil && ctx.Err() == nil && !failing {
				l.log.Warn("publish identity for the gateways", slog.String("error", err.Error()))
			}
			failing = err != nil
		})
	})
}
