package scrape

import (
	"context"
	"errors"
	"fmt"
	"time"

	"modelplane/agent/catalog"
	"modelplane/db"
)

// Group is one entry of Prometheus's http_sd format: the addresses to
// scrape and the labels they all get. The __metrics_path__ label is the
// path Prometheus scrapes instead of its job's default.
type Group struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// Discovery lists scrape targets from the replicas table.
type Discovery struct {
	q       *db.Queries
	entries map[string]catalog.Entry
}

// New returns a Discovery reading from pool with the shipped catalogue.
func New(pool db.DBTX) *Discovery {
	return &Discovery{q: db.New(pool), entries: catalog.Default()}
}

// Targets returns one group per ready replica whose runtime serves
// Prometheus metrics on the replica's address, in endpoint, version and
// replica order. Replicas on simulated nodes and of runtimes without a
// catalogue entry are left out: they export nothing; so are Triton's,
// whose metrics only their agent reaches. The list is
// never nil, so an empty fleet encodes as [], which Prometheus accepts.
func (d *Discovery) Targets(ctx context.Context) ([]Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := d.q.ReplicaListForScrape(ctx)
	if err != nil {
		return nil, fmt.Errorf("list replicas to scrape: %w", err)
	}
	out := make([]Group, 0, len(rows))
	for _, r := range rows {
		name, err := catalog.Name(r.Runtime, r.GPUCount > 0)
		if errors.Is(err, catalog.ErrUnknown) {
			continue
		}
		e, ok := d.entries[name]
		if !ok || e.Metrics == "" || e.MetricsPort {
			// Triton serves its metrics on a loopback port of their
			// own, for its agent alone: not a target from outside
			// (the heartbeat carries what they say).
			continue
		}
		out = append(out, Group{Targets: []string{r.Addr}, Labels: map[string]string{
			"__metrics_path__": e.Metrics,
			"endpoint":         r.Endpoint,
			"version":          r.Version,
			"team":             r.Team,
			"node":             r.Node,
			"replica":          r.Name,
			"runtime":          name,
		}})
	}
	return out, nil
}
