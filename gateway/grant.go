package gateway

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"modelplane/busapi"
)

// grant is one consumer team's call access to a route (busapi.RouteGrant),
// ready to serve.
type grant struct {
	src busapi.RouteGrant
	// limiter is the team's token bucket at this gateway; nil when
	// unlimited. It outlives route updates, as the endpoint's does.
	limiter *rate.Limiter
}

// newGrants builds a route's grants by team, keeping prev's buckets with
// the tokens they hold (a changed rate or burst applies from now).
func newGrants(src []busapi.RouteGrant, prev *route, d routeDefaults) map[string]*grant {
	if len(src) == 0 {
		return nil
	}
	out := make(map[string]*grant, len(src))
	for _, s := range src {
		g := &grant{src: s}
		if s.RateLimitRPS > 0 {
			burst := s.RateLimitBurst
			if burst <= 0 {
				burst = max(1, int(math.Ceil(s.RateLimitRPS)))
			}
			lim := rate.Limit(s.RateLimitRPS)
			var old *grant
			if prev != nil {
				old = prev.grants[s.Team]
			}
			if old != nil && old.limiter != nil {
				g.limiter = old.limiter
				if g.limiter.Limit() != lim || g.limiter.Burst() != burst {
					now := time.Now()
					if d.clock != nil {
						now = d.clock.Now()
					}
					g.limiter.SetLimitAt(now, lim)
					g.limiter.SetBurstAt(now, burst)
				}
			} else {
				g.limiter = rate.NewLimiter(lim, burst)
			}
		}
		out[s.Team] = g
	}
	return out
}

// grantOf returns the grant through which who may call rt, nil when none:
// an API key's team's grant, or the first of a user's teams that holds one.
func (rt *route) grantOf(who *caller) *grant {
	if len(rt.grants) == 0 {
		return nil
	}
	if !who.token {
		return rt.grants[who.team]
	}
	for _, m := range who.teams {
		if g := rt.grants[m.Team]; g != nil {
			return g
		}
	}
	return nil
}

// callable reports whether who may call rt: its owners (or a platform
// admin), or a team it was granted to.
func (rt *route) callable(who *caller) bool {
	return who.may(rt.src.Team) || rt.grantOf(who) != nil
}

// DefaultQuotaGateways is how many gateways Config.QuotaGateways assumes
// share grants' daily quotas when it is 0.
const DefaultQuotaGateways = 8

// quotaShare is the part of a daily quota, in percent, that the chunks
// all gateways may hold unused at once add up to at most: the quota holds
// within it (docs/sharing.md).
const quotaShare = 5

// quotaTimeout bounds one reservation's NATS round trips.
const quotaTimeout = 2 * time.Second

// quotaAttempts bounds a reservation's compare-and-set retries when other
// gateways reserve at the same moment.
const quotaAttempts = 16

// quotas counts grants' daily quotas at this gateway. The shared counter
// of a team's quota on an endpoint and day is a key of BucketGrantQuota
// holding how many requests all gateways have reserved; a gateway
// reserves a chunk at a time by compare-and-set and admits requests from
// it until it is spent. No gateway reserves past the quota, so all of them
// together never admit more than it; at most one chunk per gateway is held
// unused when the counter reaches the quota, and a chunk is at most 5 % of
// the quota divided by the gateways, so at least 95 % of it is served.
type quotas struct {
	js       jetstream.JetStream
	gateways int

	mu       sync.Mutex
	kv       jetstream.KeyValue
	counters map[string]*quotaCounter
}

// quotaCounter is this gateway's part of one shared counter.
type quotaCounter struct {
	mu sync.Mutex
	// left is what the gateway reserved and has not admitted yet.
	left int64
	// spent is set once the shared counter reached quota; a changed quota
	// (the grant edited) clears it.
	spent bool
	quota int64
	day   string
}

func newQuotas(js jetstream.JetStream, gateways int) *quotas {
	return &quotas{js: js, gateways: max(1, gateways), counters: map[string]*quotaCounter{}}
}

// chunk is how many requests one reservation takes of a quota.
func (q *quotas) chunk(quota int64) int64 {
	return max(1, quota*quotaShare/100/int64(q.gateways))
}

// errQuotaSpent says the shared counter reached the quota.
var errQuotaSpent = errors.New("daily quota spent")

// take admits one request of team on the endpoint of id endpointID
// against its daily quota on now's UTC day: nil when admitted,
// errQuotaSpent when the quota is spent, another error when the counter
// could not be reached.
func (q *quotas) take(ctx context.Context, endpointID int64, team string, quota int64, now time.Time) error {
	day := now.UTC().Format("20060102")
	key := busapi.GrantQuotaKey(endpointID, team, day)
	c := q.counter(key, day)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quota != quota {
		// The grant changed: what was reserved counts, whether the new
		// quota leaves more is the shared counter's to say.
		c.quota, c.spent = quota, false
	}
	if c.left > 0 {
		c.left--
		return nil
	}
	if c.spent {
		return errQuotaSpent
	}
	n, err := q.reserve(ctx, key, quota)
	if err != nil {
		return err
	}
	if n == 0 {
		c.spent = true
		return errQuotaSpent
	}
	c.left = n - 1
	return nil
}

// counter returns the counter of key, creating it; counters of other days
// are forgotten when a new one is made.
func (q *quotas) counter(key, day string) *quotaCounter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.counters[key]; c != nil {
		return c
	}
	for k, c := range q.counters {
		if c.day != day {
			delete(q.counters, k)
		}
	}
	c := &quotaCounter{day: day}
	q.counters[key] = c
	return c
}

func (q *quotas) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.kv != nil {
		return q.kv, nil
	}
	kv, err := q.js.KeyValue(ctx, busapi.BucketGrantQuota)
	if err != nil {
		return nil, err
	}
	q.kv = kv
	return kv, nil
}

// reserve takes a chunk of quota in the shared counter key and returns
// its size: 0 when the counter already holds the whole quota.
func (q *quotas) reserve(ctx context.Context, key string, quota int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, quotaTimeout)
	defer cancel()
	kv, err := q.bucket(ctx)
	if err != nil {
		return 0, err
	}
	for range quotaAttempts {
		var used int64
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, err
		default:
			rev = e.Revision()
			if used, err = strconv.ParseInt(string(e.Value()), 10, 64); err != nil {
				return 0, err
			}
		}
		if used >= quota {
			return 0, nil
		}
		n := min(q.chunk(quota), quota-used)
		val := []byte(strconv.FormatInt(used+n, 10))
		if rev == 0 {
			_, err = kv.Create(ctx, key, val)
		} else {
			_, err = kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return 0, err
		}
	}
	return 0, errors.New("daily quota counter busy")
}

// isWrongSequence reports a compare-and-set that lost to another writer.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// untilMidnight is the time from now to the next UTC midnight, when a
// spent daily quota starts again.
func untilMidnight(now time.Time) time.Duration {
	u := now.UTC()
	next := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	return next.Sub(u)
}

// admitGrantRate applies a granted caller's team's rate limit at this
// gateway, after its key's (admit).
func (g *Gateway) admitGrantRate(w http.ResponseWriter, c *call, now time.Time) bool {
	if c.grant == nil || c.grant.limiter == nil {
		return true
	}
	if ok, d := take(c.grant.limiter, now); !ok {
		g.tooMany(w, c, d, "rate limited", "team "+strconv.Quote(c.team)+" is over its request rate on endpoint "+strconv.Quote(c.endpoint))
		return false
	}
	return true
}

// admitGrantQuota applies a granted caller's daily quota across gateways,
// once every rate limit let the request through, so a refused request
// spends none of it. A counter NATS cannot reach admits the request: the
// data path keeps serving when the control side is down, and the overrun
// is logged.
func (g *Gateway) admitGrantQuota(ctx context.Context, w http.ResponseWriter, c *call, rt *route, now time.Time) bool {
	if c.grant == nil || c.grant.src.DailyQuota <= 0 {
		return true
	}
	err := g.quotas.take(ctx, rt.src.EndpointID, c.team, c.grant.src.DailyQuota, now)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errQuotaSpent):
		g.tooMany(w, c, untilMidnight(now), "quota exceeded", "team "+strconv.Quote(c.team)+" has used its daily quota of "+
			strconv.FormatInt(c.grant.src.DailyQuota, 10)+" requests on endpoint "+strconv.Quote(c.endpoint))
		return false
	default:
		g.log.Warn("gateway: daily quota counter unreachable; request admitted", slog.String("endpoint", c.endpoint),
			slog.String("team", c.team), slog.String("error", err.Error()))
		return true
	}
}
