package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"modelplane/busapi"
)

// snapshot is the last good routing table and key digests, as kept on disk.
// It holds digests, never keys; the file is readable by its owner only.
type snapshot struct {
	SavedAt time.Time         `json:"saved_at"`
	Routes  []busapi.Route    `json:"routes"`
	Keys    []busapi.KeyEntry `json:"keys"`
	// OIDC and Members are mp_identity, for OIDC bearer tokens.
	OIDC    *busapi.OIDCEntry              `json:"oidc,omitempty"`
	Members map[string]*busapi.MemberEntry `json:"members,omitempty"`
}

func snapshotPath(dir string) string { return filepath.Join(dir, "snapshot.json") }

// saveDebounce bounds how often the snapshot is written during a burst of
// updates.
const saveDebounce = 100 * time.Millisecond

// saveLoop writes the snapshot after changes, at most every saveDebounce.
func (g *Gateway) saveLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.save:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(saveDebounce):
		}
		if !g.ready.Load() {
			continue // never overwrite a good snapshot with a partial table
		}
		if err := g.writeSnapshot(); err != nil {
			g.log.Warn("gateway snapshot", slog.String("error", err.Error()))
		}
	}
}

// writeSnapshot writes the current tables to a temporary file and renames
// it over the snapshot, so that a crash leaves the old one or the new one.
func (g *Gateway) writeSnapshot() error {
	s := snapshot{SavedAt: time.Now().UTC()}
	for _, rt := range g.routes.Load().byName {
		s.Routes = append(s.Routes, rt.src)
	}
	for _, k := range g.keys.Load().byPrefix {
		s.Keys = append(s.Keys, k.src)
	}
	id := g.identity.Load()
	if id.oidc != nil {
		s.OIDC = &id.oidc.src
	}
	s.Members = id.members
	sort.Slice(s.Routes, func(i, j int) bool { return s.Routes[i].Endpoint < s.Routes[j].Endpoint })
	sort.Slice(s.Keys, func(i, j int) bool { return s.Keys[i].Prefix < s.Keys[j].Prefix })
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(g.snapPath), ".snapshot-*.tmp")
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, g.snapPath)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write snapshot: %w", werr)
	}
	return nil
}

// loadSnapshot fills the tables from the snapshot on disk, if any, and
// makes the gateway ready: it serves from it until NATS answers.
func (g *Gateway) loadSnapshot() error {
	b, err := os.ReadFile(g.snapPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var s snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("snapshot %s: %w", g.snapPath, err)
	}
	rt := &routeTable{byName: make(map[string]*route, len(s.Routes))}
	for _, r := range s.Routes {
		rt.byName[r.Endpoint] = newRoute(r, nil, g.routeDefaults())
	}
	byPrefix := make(map[string]*key, len(s.Keys))
	for _, e := range s.Keys {
		k, err := newKey(e)
		if err != nil {
			continue
		}
		byPrefix[e.Prefix] = k
	}
	id := &identityTable{members: map[string]*busapi.MemberEntry{}}
	if s.OIDC != nil {
		if v, err := newTokenVerifier(*s.OIDC, g.cfg.Clock); err == nil {
			id.oidc = v
		}
	}
	for k, m := range s.Members {
		if m != nil {
			id.members[k] = m
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.routes.Store(rt)
	g.keys.Store(newKeyTable(byPrefix))
	g.identity.Store(id)
	g.ready.Store(true)
	g.log.Info("gateway serving from its snapshot until NATS answers", slog.Time("saved_at", s.SavedAt),
		slog.Int("routes", len(s.Routes)), slog.Int("keys", len(s.Keys)))
	return nil
}
