package gateway

import (
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"maps"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/time/rate"

	"modelplane/busapi"
	"modelplane/gateway/kserve"
	"modelplane/graph"
)

// routeTable is an immutable view of mp_routes; writers build a new one and
// swap it in, so the hot path reads it without a lock.
type routeTable struct {
	byName map[string]*route
}

// route is one endpoint's entry, ready to serve.
type route struct {
	src      busapi.Route
	versions []*version
	byName   map[string]*version
	// totalWeight is the sum of the versions' weights.
	totalWeight int
	// schema validates inputs; nil accepts anything.
	schema *inputSchema
	// shadows are the weight-0 versions that get a mirrored share of the
	// requests.
	shadows []*version
	// experiment assigns callers with a user id to arms; nil when none.
	experiment *experiment
	// timeout bounds a request upstream: the endpoint's own or the
	// gateway's default.
	timeout time.Duration
	// limiter is the endpoint's token bucket, across all callers: its own
	// rate or the gateway's default; nil when unlimited. It outlives route
	// updates (see routeLimiter).
	limiter *rate.Limiter
	// grants are the teams granted call access, by team name, with their
	// buckets (grant.go); nil when none.
	grants map[string]*grant
}

// routeDefaults are what a route takes from the gateway's configuration
// where its entry has nothing of its own.
type routeDefaults struct {
	timeout time.Duration
	// rps and burst are the endpoint rate limit (Config.EndpointRPS and
	// EndpointBurst); rps 0 is unlimited.
	rps   float64
	burst int
	// clock is the gateway's clock, for a changed rate limit; the wall
	// clock when nil.
	clock quartz.Clock
}

// routeDefaults returns the defaults of g's routes.
func (g *Gateway) routeDefaults() routeDefaults {
	return routeDefaults{timeout: g.cfg.Timeout, rps: g.cfg.EndpointRPS, burst: g.cfg.EndpointBurst, clock: g.cfg.Clock}
}

// experiment is an endpoint's A/B experiment, ready to assign users.
type experiment struct {
	name string
	// seed is the FNV-64a state after the name and a NUL byte, computed
	// once per route so that assign hashes only the user id.
	seed uint64
	arms []arm
	// total is the sum of the arms' shares (100 for a valid entry).
	total int
}

// arm is one arm; v is nil when its version is not routed (the caller then
// gets the weighted split).
type arm struct {
	share int
	v     *version
}

// version is one version of an endpoint with its ready replicas.
type version struct {
	name string
	// nameHeader is name as a header value, shared by every answer of
	// the version (header values are only read once set).
	nameHeader []string
	weight     int
	// shadow is the percentage of the endpoint's requests mirrored here.
	shadow    float64
	upstreams []*upstream
	// ejectMu serialises ejections, so that two replicas failing at once
	// cannot both be ejected as each other's spare.
	ejectMu sync.Mutex
	// series and metrics are this endpoint × version's statistics series
	// and metric children, found on the first request the version serves
	// and kept, so that later requests look nothing up (a version belongs
	// to one endpoint, so the key never changes).
	series  atomic.Pointer[series]
	metrics atomic.Pointer[metricChildren]
	// pinnedSeries is the series of the version's pinned requests.
	pinnedSeries atomic.Pointer[series]
	// arm is set when the version is an arm of the endpoint's experiment
	// with a share above 0: it takes traffic, so a pin may reach it.
	arm bool
	// v2 translates predict calls for a runtime that speaks only the V2
	// protocol (busapi.ProtocolV2); nil for the others (v2.go).
	v2 *kserve.Translator
	// coldStart is the version's measured cold start, 0 when unknown: the
	// Retry-After of a 202 of an endpoint scaled to zero (hold.go).
	coldStart time.Duration
	// graph is a graph version's definition, parsed once when the routing
	// entry arrives; nil for a model version, and for a graph version whose
	// definition does not parse (graphBad then says why).
	graph    *graph.Definition
	graphBad string
}

// pinnable reports whether a pin may choose v: it takes traffic (weight
// above 0 or an experiment arm), or it is a shadow and the caller asked for
// it explicitly. Other versions (a rollout's candidate before its first
// step, one being drained) are not the caller's to reach.
func (v *version) pinnable(shadow bool) bool {
	return v.weight > 0 || v.arm || (shadow && v.shadow > 0)
}

// metricsOf returns v's metric children, looking them up once.
func (v *version) metricsOf(m *metrics, endpoint string) *metricChildren {
	if c := v.metrics.Load(); c != nil {
		return c
	}
	c := m.of(endpoint, v.name)
	v.metrics.Store(c)
	return c
}

// record counts a finished request of v in its statistics series, keeping
// the series for the next one.
func (v *version) record(r *statsRecorder, o *observation) {
	if o.caller != "" || o.via.endpoint != "" {
		// A granted team's series and a graph's step series are looked
		// up by their key: the version keeps only the owners' direct one.
		r.recordIn(nil, o)
		return
	}
	p := &v.series
	if o.pinned {
		p = &v.pinnedSeries
	}
	s := p.Load()
	if n := r.recordIn(s, o); n != s {
		p.Store(n)
	}
}

// upstream is one ready replica. inFlight is shared by every table that
// holds the replica, so least-outstanding choice survives table swaps.
type upstream struct {
	id    string
	addr  string
	token string // sent in busapi.ReplicaTokenHeader
	// serverName is the name its certificate is verified against, when
	// not addr's host (busapi.RouteReplica.ServerName).
	serverName string
	inFlight   atomic.Int64
	// fails counts consecutive failed calls (connect errors, 5xx);
	// ejectedUntil is the Unix nanosecond time until which the replica is
	// skipped (see eject.go).
	fails        atomic.Int32
	ejectedUntil atomic.Int64
	// target is the URL last called on the replica, parsed once and
	// shared by the requests that call the same path (a replica serves
	// one endpoint, so nearly always one path).
	target atomic.Pointer[upstreamTarget]
}

// upstreamTarget is a parsed URL of a replica and the path it was made of.
type upstreamTarget struct {
	path string
	url  *url.URL
}

// urlOf returns the URL of path on u, reached by scheme; requests only
// read it.
func (u *upstream) urlOf(scheme, path string) (*url.URL, error) {
	if t := u.target.Load(); t != nil && t.path == path {
		return t.url, nil
	}
	parsed, err := url.Parse(scheme + u.addr + path)
	if err != nil {
		return nil, err
	}
	u.target.Store(&upstreamTarget{path: path, url: parsed})
	return parsed, nil
}

// newRoute builds a route from its entry, reusing the upstream objects (and
// so the in-flight counters) of prev where the replica is the same, and
// prev's rate-limit bucket.
func newRoute(src busapi.Route, prev *route, d routeDefaults) *route {
	old := map[string]*upstream{}
	if prev != nil {
		for _, v := range prev.versions {
			for _, u := range v.upstreams {
				old[u.id+"\x00"+u.addr+"\x00"+u.token+"\x00"+u.serverName] = u
			}
		}
	}
	rt := &route{src: src, byName: make(map[string]*version, len(src.Versions)), timeout: d.timeout,
		limiter: routeLimiter(src, prev, d), grants: newGrants(src.Grants, prev, d)}
	if src.TimeoutMS > 0 {
		rt.timeout = time.Duration(src.TimeoutMS) * time.Millisecond
	}
	// The schema is compiled here, once per change of it, never on the
	// request path.
	if prev != nil && prev.schema.sameSchema(src.InputSchema) {
		rt.schema = prev.schema
	} else {
		rt.schema = compileSchema(src.InputSchema)
	}
	for _, sv := range src.Versions {
		v := &version{name: sv.Name, nameHeader: []string{sv.Name}, weight: max(sv.Weight, 0), coldStart: time.Duration(max(sv.ColdStartMS, 0)) * time.Millisecond}
		if src.Task == busapi.RouteTaskGraph {
			if d, err := graph.Parse(sv.Graph); err != nil {
				v.graphBad = err.Error()
			} else {
				v.graph = d
			}
		}
		if sv.Protocol == busapi.ProtocolV2 && src.Task != "llm" {
			v.v2 = kserve.New(sv.V2Model, src.FeatureNames, src.Task)
		}
		// Only a version that takes no traffic of its own is a shadow:
		// mirroring to a served version would count its requests twice.
		if v.weight == 0 && sv.Shadow > 0 {
			v.shadow = min(sv.Shadow, 100)
			rt.shadows = append(rt.shadows, v)
		}
		for _, r := range sv.Replicas {
			if r.Addr == "" {
				continue
			}
			u := old[r.ID+"\x00"+r.Addr+"\x00"+r.Token+"\x00"+r.ServerName]
			if u == nil {
				u = &upstream{id: r.ID, addr: r.Addr, token: r.Token, serverName: r.ServerName}
			}
			v.upstreams = append(v.upstreams, u)
		}
		rt.versions = append(rt.versions, v)
		rt.byName[v.name] = v
		rt.totalWeight += v.weight
	}
	if ex := src.Experiment; ex != nil && ex.Name != "" {
		e := &experiment{name: ex.Name, seed: fnvAdd(fnvOffset, ex.Name+"\x00")}
		for _, a := range ex.Arms {
			if a.Share <= 0 {
				continue
			}
			e.arms = append(e.arms, arm{share: a.Share, v: rt.byName[a.Version]})
			e.total += a.Share
		}
		if e.total > 0 {
			rt.experiment = e
			for _, a := range e.arms {
				if a.v != nil {
					a.v.arm = true
				}
			}
		}
	}
	return rt
}

// The FNV-64a parameters (hash/fnv's), for hashing without an allocation.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// fnvAdd continues the FNV-64a hash h over s.
func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// assign returns the version of the arm user falls in, by a stable hash
// (FNV-64a) of the experiment's name, a NUL byte and the user id: the same
// user gets the same arm on every gateway and after every restart, and
// another experiment name reshuffles the users. nil when the arm's version
// is not routed.
func (e *experiment) assign(user string) *version {
	n := int(fnvAdd(e.seed, user) % uint64(e.total))
	for _, a := range e.arms {
		if n < a.share {
			return a.v
		}
		n -= a.share
	}
	return nil // unreachable: n < total
}

// pick chooses a version for unpinned traffic by weight; nil when no version
// takes unpinned traffic.
func (rt *route) pick() *version {
	if rt.totalWeight <= 0 {
		return nil
	}
	n := rand.IntN(rt.totalWeight)
	for _, v := range rt.versions {
		if n < v.weight {
			return v
		}
		n -= v.weight
	}
	return nil // unreachable: n < totalWeight
}

// pick chooses the replica with the fewest outstanding requests, skipping
// skip; ties go to a random one so that idle replicas share the load. now
// is the gateway's clock in Unix nanoseconds, against which ejections end.
func (v *version) pick(skip *upstream, now int64) *upstream {
	n := len(v.upstreams)
	if n == 0 {
		return nil
	}
	start := 0
	if n > 1 {
		start = rand.IntN(n)
	}
	var best, bestEjected *upstream
	var bestLoad, bestEjectedLoad int64
	for i := range n {
		u := v.upstreams[(start+i)%n]
		if u == skip {
			continue
		}
		l := u.inFlight.Load()
		if u.ejectedUntil.Load() > now {
			// An ejected replica is only the last resort.
			if bestEjected == nil || l < bestEjectedLoad {
				bestEjected, bestEjectedLoad = u, l
			}
			continue
		}
		if best == nil || l < bestLoad {
			best, bestLoad = u, l
		}
	}
	if best == nil {
		return bestEjected
	}
	return best
}

// acquire chooses the replica with the fewest outstanding requests, as pick
// does at now, and counts the request on it. With bound > 0 it takes no replica
// that already has bound requests outstanding: nil and saturated when every
// one has, so that the caller sheds the request instead of queueing it.
func (v *version) acquire(skip *upstream, bound, now int64) (u *upstream, saturated bool) {
	for {
		u = v.pick(skip, now)
		if u == nil {
			return nil, false
		}
		if bound <= 0 {
			u.inFlight.Add(1)
			return u, false
		}
		l := u.inFlight.Load()
		if l >= bound {
			// The least loaded replica is full, so all are.
			return nil, true
		}
		if u.inFlight.CompareAndSwap(l, l+1) {
			return u, false
		}
	}
}

// withRoute returns a copy of t with name set to src (or removed when src is
// nil).
func (t *routeTable) with(name string, src *busapi.Route, d routeDefaults) *routeTable {
	m := maps.Clone(t.byName)
	if src == nil {
		delete(m, name)
	} else {
		m[name] = newRoute(*src, t.byName[name], d)
	}
	return &routeTable{byName: m}
}

// keyTable is an immutable view of mp_keys.
type keyTable struct {
	byPrefix map[string]*key
	// byService are a team's keys by name, the service identities client
	// certificates map onto (service.go): serviceKey(team, name).
	byService map[string][]*key
}

// newKeyTable indexes byPrefix, which it keeps.
func newKeyTable(byPrefix map[string]*key) *keyTable {
	t := &keyTable{byPrefix: byPrefix, byService: map[string][]*key{}}
	for _, k := range byPrefix {
		if k.team != "" && k.src.Name != "" {
			sk := serviceKey(k.team, k.src.Name)
			t.byService[sk] = append(t.byService[sk], k)
		}
	}
	return t
}

// key is one active API key's digest.
type key struct {
	src       busapi.KeyEntry
	sum       [32]byte
	team      string
	role      string
	expiresAt *time.Time
	// who is the caller the key authenticates, built once: requests
	// share it and never change it.
	who caller
}

var errBadDigest = errors.New("key digest is not 64 hex characters")

func newKey(e busapi.KeyEntry) (*key, error) {
	b, err := hex.DecodeString(e.SHA256)
	if err != nil || len(b) != 32 {
		return nil, errBadDigest
	}
	k := &key{src: e, team: e.Team, role: e.Role, expiresAt: e.ExpiresAt, who: caller{name: e.Prefix, team: e.Team, role: e.Role}}
	copy(k.sum[:], b)
	return k, nil
}

// matches reports, in constant time, whether sum is the key's digest.
func (k *key) matches(sum [32]byte) bool {
	return subtle.ConstantTimeCompare(k.sum[:], sum[:]) == 1
}

func (t *keyTable) with(prefix string, k *key) *keyTable {
	m := maps.Clone(t.byPrefix)
	if k == nil {
		delete(m, prefix)
	} else {
		m[prefix] = k
	}
	return newKeyTable(m)
}
