package gateway

import (
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"maps"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"modelplane/agent/proto"
)

// routeTable is an immutable view of mp_routes; writers build a new one and
// swap it in, so the hot path reads it without a lock.
type routeTable struct {
	byName map[string]*route
}

// route is one endpoint's entry, ready to serve.
type route struct {
	src      proto.Route
	versions []*version
	byName   map[string]*version
	// totalWeight is the sum of the versions' weights.
	totalWeight int
	// schema validates inputs; nil accepts anything.
	schema *inputSchema
}

// version is one version of an endpoint with its ready replicas.
type version struct {
	name      string
	weight    int
	upstreams []*upstream
}

// upstream is one ready replica. inFlight is shared by every table that
// holds the replica, so least-outstanding choice survives table swaps.
type upstream struct {
	id       string
	addr     string
	inFlight atomic.Int64
}

// newRoute builds a route from its entry, reusing the upstream objects (and
// so the in-flight counters) of prev where the replica is the same.
func newRoute(src proto.Route, prev *route) *route {
	old := map[string]*upstream{}
	if prev != nil {
		for _, v := range prev.versions {
			for _, u := range v.upstreams {
				old[u.id+"\x00"+u.addr] = u
			}
		}
	}
	rt := &route{src: src, byName: make(map[string]*version, len(src.Versions))}
	// The schema is compiled here, once per change of it, never on the
	// request path.
	if prev != nil && prev.schema.sameSchema(src.InputSchema) {
		rt.schema = prev.schema
	} else {
		rt.schema = compileSchema(src.InputSchema)
	}
	for _, sv := range src.Versions {
		v := &version{name: sv.Name, weight: max(sv.Weight, 0)}
		for _, r := range sv.Replicas {
			if r.Addr == "" {
				continue
			}
			u := old[r.ID+"\x00"+r.Addr]
			if u == nil {
				u = &upstream{id: r.ID, addr: r.Addr}
			}
			v.upstreams = append(v.upstreams, u)
		}
		rt.versions = append(rt.versions, v)
		rt.byName[v.name] = v
		rt.totalWeight += v.weight
	}
	return rt
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
// skip; ties go to a random one so that idle replicas share the load.
func (v *version) pick(skip *upstream) *upstream {
	n := len(v.upstreams)
	if n == 0 {
		return nil
	}
	start := 0
	if n > 1 {
		start = rand.IntN(n)
	}
	var best *upstream
	var bestLoad int64
	for i := range n {
		u := v.upstreams[(start+i)%n]
		if u == skip {
			continue
		}
		if l := u.inFlight.Load(); best == nil || l < bestLoad {
			best, bestLoad = u, l
		}
	}
	return best
}

// acquire chooses the replica with the fewest outstanding requests, as pick
// does, and counts the request on it. With bound > 0 it takes no replica
// that already has bound requests outstanding: nil and saturated when every
// one has, so that the caller sheds the request instead of queueing it.
func (v *version) acquire(skip *upstream, bound int64) (u *upstream, saturated bool) {
	for {
		u = v.pick(skip)
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
func (t *routeTable) with(name string, src *proto.Route) *routeTable {
	m := maps.Clone(t.byName)
	if src == nil {
		delete(m, name)
	} else {
		m[name] = newRoute(*src, t.byName[name])
	}
	return &routeTable{byName: m}
}

// keyTable is an immutable view of mp_keys.
type keyTable struct {
	byPrefix map[string]*key
}

// key is one active API key's digest.
type key struct {
	src       proto.KeyEntry
	sum       [32]byte
	team      string
	role      string
	expiresAt *time.Time
}

var errBadDigest = errors.New("key digest is not 64 hex characters")

func newKey(e proto.KeyEntry) (*key, error) {
	b, err := hex.DecodeString(e.SHA256)
	if err != nil || len(b) != 32 {
		return nil, errBadDigest
	}
	k := &key{src: e, team: e.Team, role: e.Role, expiresAt: e.ExpiresAt}
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
	return &keyTable{byPrefix: m}
}
