package billing

import (
	"context"
	"fmt"
	"time"

	"modelplane/db"
	"modelplane/ingest"
)

// AllocationReader reads allocation intervals; *db.Queries is one.
type AllocationReader interface {
	AllocationIntervalSnapshotXmin(ctx context.Context) (int64, error)
	AllocationIntervalListSince(ctx context.Context, since time.Time) ([]db.AllocationIntervalListSinceRow, error)
	AllocationIntervalListWritten(ctx context.Context, xmin int64) ([]db.AllocationIntervalListWrittenRow, error)
}

// LoadAllocations is the usage consumer's view of who held what when
// (ingest.UsageConfig.LoadAllocations): the intervals placement leaves in
// allocation_intervals. The cursor is the xmin of the snapshot before each
// read: every transaction that had not committed by then has an id at least
// that, so the next read, of rows written by such transactions, misses no
// interval opened or closed in between, whatever order they commit in.
func LoadAllocations(q AllocationReader) ingest.LoadAllocations {
	return func(ctx context.Context, cursor int64, since time.Time) ([]ingest.Allocation, int64, error) {
		xmin, err := q.AllocationIntervalSnapshotXmin(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("allocation snapshot: %w", err)
		}
		if cursor == 0 {
			rows, err := q.AllocationIntervalListSince(ctx, since)
			if err != nil {
				return nil, 0, fmt.Errorf("list allocation intervals: %w", err)
			}
			out := make([]ingest.Allocation, len(rows))
			for i, r := range rows {
				out[i] = allocation(db.AllocationIntervalListWrittenRow(r))
			}
			return out, xmin, nil
		}
		rows, err := q.AllocationIntervalListWritten(ctx, cursor)
		if err != nil {
			return nil, 0, fmt.Errorf("list allocation intervals: %w", err)
		}
		out := make([]ingest.Allocation, len(rows))
		for i, r := range rows {
			out[i] = allocation(r)
		}
		return out, xmin, nil
	}
}

func allocation(r db.AllocationIntervalListWrittenRow) ingest.Allocation {
	a := ingest.Allocation{ID: r.ID, Node: r.Node, Replica: r.Replica, GPU: int(r.GPU), Slice: int(r.Slice), CPUCores: int(r.CPUCores),
		Team: r.Team, Endpoint: r.Endpoint, Model: r.Model, Version: r.Version, GPUType: r.GPUType, Profile: r.Profile, From: r.StartedAt}
	if r.EndedAt != nil {
		a.To = *r.EndedAt
	}
	return a
}

// RecordAllocations writes intervals directly into allocation_intervals,
// for a benchmark or test that meters a synthetic fleet; placement records
// its own by trigger.
func RecordAllocations(ctx context.Context, q *db.Queries, allocs []ingest.Allocation) error {
	var p db.AllocationIntervalInsertManyParams
	for _, a := range allocs {
		p.Nodes = append(p.Nodes, a.Node)
		p.GPUs = append(p.GPUs, int32(a.GPU))
		p.Slices = append(p.Slices, int32(a.Slice))
		p.CPUCores = append(p.CPUCores, int32(a.CPUCores))
		p.Replicas = append(p.Replicas, a.Replica)
		p.Teams = append(p.Teams, a.Team)
		p.Endpoints = append(p.Endpoints, a.Endpoint)
		p.Models = append(p.Models, a.Model)
		p.Versions = append(p.Versions, a.Version)
		p.GPUTypes = append(p.GPUTypes, a.GPUType)
		p.Profiles = append(p.Profiles, a.Profile)
		p.StartedAt = append(p.StartedAt, a.From)
		// The zero time is the query's "still open".
		p.EndedAt = append(p.EndedAt, a.To.UTC())
	}
	if err := q.AllocationIntervalInsertMany(ctx, p); err != nil {
		return fmt.Errorf("record allocation intervals: %w", err)
	}
	return nil
}
