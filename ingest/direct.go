package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/busapi"
)

// The Store functions write rows that no agent or gateway published, such
// as the week of history `modelplane dev` backfills for its demo, through
// the same checks, pricing and inserts as the consumers: the rows are
// indistinguishable from streamed ones, and the hourly rollup is fed by
// its view as for any insert.

// directChunk is how many statistics or samples one insert of the Store
// functions holds.
const directChunk = 1000

// StoreUsage prices batches at prices and inserts them into gpu_usage, as
// the usage consumer does, and returns the rows written: one per
// slot-second among batches. Unlike the consumer it does not look for rows
// stored already: the caller loads each batch once. Nor does it attribute rows by allocation intervals:
// its caller is the platform itself writing history it made up, whose
// labels are its own, never an agent's. The insert is tagged as this package's write, so a
// concurrent RepairRollup waits for it instead of counting it twice.
func StoreUsage(ctx context.Context, ch driver.Conn, prices Pricer, batches []busapi.UsageBatch) (int, error) {
	if prices == nil {
		return 0, errors.New("store usage: no rate table")
	}
	ptrs := make([]*heldBatch, 0, len(batches))
	for i := range batches {
		b := &batches[i]
		if err := checkBatch(busapi.UsageSubject(b.Node), b); err != nil {
			return 0, fmt.Errorf("store usage: batch %q: %w", b.ID, err)
		}
		ptrs = append(ptrs, &heldBatch{batch: *b})
	}
	u := &Usage{cfg: UsageConfig{CH: ch}, log: slog.New(slog.DiscardHandler)}
	cols, _, _, _ := u.columns(prices, ptrs, make(map[slotSecond]rowID))
	if len(cols.batchID) == 0 {
		return 0, nil
	}
	db, err := u.database(ctx)
	if err != nil {
		return 0, err
	}
	if err := u.insert(ctx, db, cols); err != nil {
		return 0, fmt.Errorf("store usage: %w", err)
	}
	return len(cols.batchID), nil
}

// StoreReqStats inserts request statistics into request_stats as the
// statistics consumer does, skipping ids stored already.
func StoreReqStats(ctx context.Context, ch driver.Conn, stats []busapi.ReqStats) error {
	c := &ReqStats{cfg: ReqStatsConfig{CH: ch}, log: slog.New(slog.DiscardHandler)}
	for len(stats) > 0 {
		chunk := stats[:min(directChunk, len(stats))]
		stats = stats[len(chunk):]
		for _, s := range chunk {
			switch {
			case s.ID == "" || s.Endpoint == "" || s.Version == "":
				return errors.New("store request stats: missing id, endpoint or version")
			case !histogram(s.Latency) || !histogram(s.TTFT) || !histogram(s.TPOT):
				return fmt.Errorf("store request stats %q: a histogram does not have %d buckets", s.ID, busapi.LatencyBuckets)
			case s.WindowEnd < s.WindowStart || s.WindowStart < 0:
				return fmt.Errorf("store request stats %q: window ends before it starts", s.ID)
			}
		}
		held := []heldStats{{items: chunk}}
		if err := c.insertNew(ctx, held); err != nil {
			return err
		}
	}
	return nil
}

// StorePredictionSamples inserts prediction samples into
// prediction_samples as the samples consumer does, skipping samples
// stored already.
func StorePredictionSamples(ctx context.Context, ch driver.Conn, samples []busapi.PredictionSample) error {
	c := &Predictions{cfg: PredictionsConfig{CH: ch}, log: slog.New(slog.DiscardHandler)}
	for len(samples) > 0 {
		chunk := samples[:min(directChunk, len(samples))]
		samples = samples[len(chunk):]
		for i := range chunk {
			if err := checkSample(&chunk[i]); err != nil {
				return fmt.Errorf("store prediction sample %q: %w", chunk[i].ID, err)
			}
		}
		held := []heldSamples{{items: chunk}}
		if err := c.insertNew(ctx, held); err != nil {
			return err
		}
	}
	return nil
}
