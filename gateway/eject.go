package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// Passive ejection defaults (Config.EjectFailures, Config.EjectCooldown).
const (
	DefaultEjectFailures = 5
	DefaultEjectCooldown = 10 * time.Second
)

// replicaFailed tells the statuses that say the replica, not the input, is
// at fault.
func replicaFailed(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// outcome records how a call to u (a replica of v) went. After
// EjectFailures failures in a row (connect errors, broken answers, 502, 503
// or 504) the replica is
// skipped for EjectCooldown, unless every other replica of v is ejected
// already: a version is never left with none, since a replica that fails
// is still better than a 503 for all.
func (g *Gateway) outcome(v *version, u *upstream, failed bool) {
	if !failed {
		if u.fails.Load() != 0 {
			u.fails.Store(0)
		}
		return
	}
	if g.cfg.EjectFailures <= 0 || u.fails.Add(1) < int32(g.cfg.EjectFailures) {
		return
	}
	v.ejectMu.Lock()
	defer v.ejectMu.Unlock()
	now := g.now().UnixNano()
	if u.ejectedUntil.Load() > now {
		return
	}
	others := false
	for _, o := range v.upstreams {
		if o != u && o.ejectedUntil.Load() <= now {
			others = true
			break
		}
	}
	if !others {
		return
	}
	u.ejectedUntil.Store(now + int64(g.cfg.EjectCooldown))
	u.fails.Store(0)
	g.metrics.ejections.Inc()
	g.log.Warn("gateway: replica ejected after consecutive failures", slog.String("version", v.name),
		slog.String("replica", u.id), slog.Duration("cooldown", g.cfg.EjectCooldown))
}
