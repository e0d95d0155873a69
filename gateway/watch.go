package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// bucket names which KV bucket a watch loop follows.
type bucket int

const (
	bucketRoutes bucket = iota
	bucketKeys
	bucketIdentity
)

func (b bucket) String() string {
	switch b {
	case bucketKeys:
		return busapi.BucketKeys
	case bucketIdentity:
		return busapi.BucketIdentity
	}
	return busapi.BucketRoutes
}

// natsCallTimeout bounds each call to NATS outside the watch itself.
const natsCallTimeout = 5 * time.Second

// watchLoop follows one bucket until ctx ends. Each (re)watch first
// delivers every current entry; the gateway collects them and replaces its
// table in one swap, so that keys deleted while it was not watching are
// gone. Later updates are applied one by one. After a reconnect the watch
// starts afresh, since the server side of the old one may be gone.
func (g *Gateway) watchLoop(ctx context.Context, b bucket) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	var (
		w       jetstream.KeyWatcher
		unwatch context.CancelFunc
		updates <-chan jetstream.KeyValueEntry
		initial map[string]jetstream.KeyValueEntry // nil once synced
		waiting bool
	)
	drop := func() {
		if w != nil {
			_ = w.Stop()
			unwatch()
		}
		w, unwatch, updates, initial = nil, nil, nil, nil
	}
	defer drop()
	reconnected := g.nc.StatusChanged(nats.CONNECTED)
	defer g.nc.RemoveStatusListener(reconnected)
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			var err error
			if w, unwatch, err = g.watch(ctx, b); err != nil {
				if !waiting {
					g.log.Warn("gateway cannot watch yet; retrying every second", slog.String("bucket", b.String()), slog.String("error", err.Error()))
					waiting = true
				}
				retry.Reset(time.Second)
				continue
			}
			waiting = false
			updates = w.Updates()
			initial = map[string]jetstream.KeyValueEntry{}
		case e, ok := <-updates:
			switch {
			case !ok:
				drop()
				retry.Reset(time.Second)
			case e == nil:
				g.sync(b, initial)
				initial = nil
			case initial != nil:
				initial[e.Key()] = e
			default:
				g.apply(b, e)
			}
		case <-reconnected:
			drop()
			retry.Reset(0)
		}
	}
}

// watch opens a watcher of every key of the bucket. The bucket is the
// control plane's to create; until it exists this fails and the loop
// retries.
func (g *Gateway) watch(ctx context.Context, b bucket) (jetstream.KeyWatcher, context.CancelFunc, error) {
	if !g.nc.IsConnected() {
		return nil, nil, errors.New("nats is not connected")
	}
	cctx, cancel := context.WithTimeout(ctx, natsCallTimeout)
	defer cancel()
	kv, err := g.js.KeyValue(cctx, b.String())
	if err != nil {
		return nil, nil, fmt.Errorf("bucket %s: %w", b, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	slow := time.AfterFunc(natsCallTimeout, wcancel)
	w, err := kv.WatchAll(wctx)
	if !slow.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		if w != nil {
			_ = w.Stop()
		}
		wcancel()
		return nil, nil, fmt.Errorf("watch %s: %w", b, err)
	}
	return w, wcancel, nil
}

func deleted(e jetstream.KeyValueEntry) bool {
	op := e.Operation()
	return op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge
}

// decodeRoute reads a routing entry; ok is false for a malformed one.
func (g *Gateway) decodeRoute(e jetstream.KeyValueEntry) (busapi.Route, bool) {
	var rt busapi.Route
	if err := json.Unmarshal(e.Value(), &rt); err != nil {
		g.log.Error("gateway: routing entry is not valid JSON; ignoring it", slog.String("endpoint", e.Key()), slog.String("error", err.Error()))
		return busapi.Route{}, false
	}
	if rt.Endpoint == "" {
		rt.Endpoint = e.Key()
	}
	return rt, true
}

// decodeKey reads a key entry; ok is false for a malformed one.
func (g *Gateway) decodeKey(e jetstream.KeyValueEntry) (*key, bool) {
	var ke busapi.KeyEntry
	if err := json.Unmarshal(e.Value(), &ke); err != nil {
		g.log.Error("gateway: key entry is not valid JSON; ignoring it", slog.String("prefix", e.Key()), slog.String("error", err.Error()))
		return nil, false
	}
	if ke.Prefix == "" {
		ke.Prefix = e.Key()
	}
	k, err := newKey(ke)
	if err != nil {
		g.log.Error("gateway: key entry unusable; ignoring it", slog.String("prefix", e.Key()), slog.String("error", err.Error()))
		return nil, false
	}
	return k, true
}

// decodeOIDC builds the token verifier of an entry; a malformed one keeps
// prev.
func (g *Gateway) decodeOIDC(e jetstream.KeyValueEntry, prev *tokenVerifier) *tokenVerifier {
	var oe busapi.OIDCEntry
	err := json.Unmarshal(e.Value(), &oe)
	var v *tokenVerifier
	if err == nil {
		v, err = newTokenVerifier(oe, g.cfg.Clock)
	}
	if err != nil {
		g.log.Error("gateway: oidc entry unusable; keeping the last one", slog.String("error", err.Error()))
		return prev
	}
	return v
}

// decodeMember reads a user's memberships; ok is false for a malformed entry.
func (g *Gateway) decodeMember(e jetstream.KeyValueEntry) (*busapi.MemberEntry, bool) {
	var m busapi.MemberEntry
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		g.log.Error("gateway: member entry is not valid JSON; ignoring it", slog.String("key", e.Key()), slog.String("error", err.Error()))
		return nil, false
	}
	return &m, true
}

// sync replaces a table with the full content of its bucket. The bucket is
// the truth here, whatever generation the gateway held: an endpoint deleted
// and created again starts its generations afresh.
func (g *Gateway) sync(b bucket, entries map[string]jetstream.KeyValueEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch b {
	case bucketRoutes:
		old := g.routes.Load()
		m := make(map[string]*route, len(entries))
		for name, e := range entries {
			if deleted(e) {
				continue
			}
			rt, ok := g.decodeRoute(e)
			if !ok {
				if prev := old.byName[name]; prev != nil {
					m[name] = prev
				}
				continue
			}
			m[name] = newRoute(rt, old.byName[name], g.routeDefaults())
		}
		g.routes.Store(&routeTable{byName: m})
		g.routesSynced = true
		g.holds.updatedAll()
	case bucketKeys:
		old := g.keys.Load()
		m := make(map[string]*key, len(entries))
		for prefix, e := range entries {
			if deleted(e) {
				continue
			}
			k, ok := g.decodeKey(e)
			if !ok {
				if prev := old.byPrefix[prefix]; prev != nil {
					m[prefix] = prev
				}
				continue
			}
			m[prefix] = k
		}
		g.keys.Store(newKeyTable(m))
		g.keysSynced = true
	case bucketIdentity:
		// Identity is not needed for readiness: API keys work without it.
		id := &identityTable{members: map[string]*busapi.MemberEntry{}}
		old := g.identity.Load()
		for k, e := range entries {
			if deleted(e) {
				continue
			}
			if k == busapi.IdentityOIDCKey {
				id.oidc = g.decodeOIDC(e, old.oidc)
				continue
			}
			if m, ok := g.decodeMember(e); ok {
				id.members[k] = m
			} else if prev := old.members[k]; prev != nil {
				id.members[k] = prev
			}
		}
		g.identity.Store(id)
	}
	g.log.Info("gateway synced", slog.String("bucket", b.String()), slog.Int("entries", len(entries)))
	if g.routesSynced && g.keysSynced {
		g.ready.Store(true)
	}
	g.changed()
}

// apply takes one live update. A routing entry older than the one held is
// a replay and changes nothing; a deletion forgets the endpoint (and its
// generation).
func (g *Gateway) apply(b bucket, e jetstream.KeyValueEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch b {
	case bucketRoutes:
		t := g.routes.Load()
		if deleted(e) {
			if _, ok := t.byName[e.Key()]; !ok {
				return
			}
			g.routes.Store(t.with(e.Key(), nil, g.routeDefaults()))
			g.holds.updated(e.Key())
			break
		}
		rt, ok := g.decodeRoute(e)
		if !ok {
			return
		}
		if prev := t.byName[e.Key()]; prev != nil && rt.Generation < prev.src.Generation {
			g.log.Debug("gateway: stale routing entry ignored", slog.String("endpoint", e.Key()),
				slog.Int64("generation", rt.Generation), slog.Int64("held", prev.src.Generation))
			return
		}
		g.routes.Store(t.with(e.Key(), &rt, g.routeDefaults()))
		g.holds.updated(e.Key())
	case bucketKeys:
		t := g.keys.Load()
		if deleted(e) {
			if _, ok := t.byPrefix[e.Key()]; !ok {
				return
			}
			g.keys.Store(t.with(e.Key(), nil))
			break
		}
		k, ok := g.decodeKey(e)
		if !ok {
			return
		}
		g.keys.Store(t.with(e.Key(), k))
	case bucketIdentity:
		t := g.identity.Load()
		switch {
		case e.Key() == busapi.IdentityOIDCKey && deleted(e):
			g.identity.Store(t.withOIDC(nil))
		case e.Key() == busapi.IdentityOIDCKey:
			g.identity.Store(t.withOIDC(g.decodeOIDC(e, t.oidc)))
		case deleted(e):
			g.identity.Store(t.withMember(e.Key(), nil))
		default:
			if m, ok := g.decodeMember(e); ok {
				g.identity.Store(t.withMember(e.Key(), m))
			}
		}
	}
	g.changed()
}

// changed asks the save loop to write the snapshot; g.mu is held.
func (g *Gateway) changed() {
	select {
	case g.save <- struct{}{}:
	default:
	}
}
