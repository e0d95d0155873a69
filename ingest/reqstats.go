package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// ReqStatsConfig configures the request statistics consumer: the stream
// defaults to busapi.StreamReqStats, the durable to "ingest-reqstats" and the
// batch to 500 (gateways send one message per endpoint version every few
// seconds, so one fetch usually takes everything waiting).
type ReqStatsConfig = PullConfig

// ReqStats consumes MP_REQSTATS into ClickHouse request_stats exactly once:
// before it inserts a fetched set it asks request_stats which of their
// message ids it already holds (within the set's endpoints and windows, the
// table's sort key) and skips those, and it acks only after the insert. A
// message redelivered after its insert succeeded (the ack lost, the process
// killed in between) or published again after the duplicate window is
// therefore stored once. One goroutine inserts, so no two inserts of the
// same id can race.
type ReqStats struct {
	cfg   ReqStatsConfig
	log   *slog.Logger
	stats reqStatsCounters

	pullLoop
}

type reqStatsCounters struct {
	rows, duplicates, poison, insertFailures atomic.Uint64
}

// ReqStatsStats is a snapshot of the consumer's counters.
type ReqStatsStats struct {
	// Rows is the number of rows inserted into request_stats.
	Rows uint64
	// Duplicates is the number of messages acked without an insert because
	// their id was stored already or repeated in the same fetch.
	Duplicates uint64
	// Poison is the number of messages terminated because they do not
	// decode or do not describe the endpoint of their subject.
	Poison uint64
	// InsertFailures is the number of fetched sets ClickHouse refused; their
	// messages are redelivered.
	InsertFailures uint64
}

// NewReqStats checks cfg and fills defaults. It starts nothing; call Start.
func NewReqStats(cfg ReqStatsConfig) (*ReqStats, error) {
	if err := cfg.defaults("reqstats", busapi.StreamReqStats, "ingest-reqstats", 10_000); err != nil {
		return nil, err
	}
	c := &ReqStats{cfg: cfg, log: cfg.Log.With("consumer", cfg.Durable)}
	c.pullLoop = cfg.loop("reqstats", c.log, c.store)
	return c, nil
}

// Stats returns the counters so far.
func (c *ReqStats) Stats() ReqStatsStats {
	s := &c.stats
	return ReqStatsStats{Rows: s.rows.Load(), Duplicates: s.duplicates.Load(), Poison: s.poison.Load(),
		InsertFailures: s.insertFailures.Load()}
}

type heldStats struct {
	msg jetstream.Msg
	seq uint64
	s   busapi.ReqStats
}

// store decodes msgs, terminates poison, inserts what request_stats does
// not hold yet and acks; on a ClickHouse failure it naks every valid
// message with a growing delay and returns the error.
func (c *ReqStats) store(ctx context.Context, msgs []jetstream.Msg) error {
	var held []heldStats
	for _, m := range msgs {
		var s busapi.ReqStats
		err := json.Unmarshal(m.Data(), &s)
		switch {
		case err != nil:
		case s.ID == "" || s.Endpoint == "" || s.Version == "":
			err = errors.New("missing id, endpoint or version")
		case m.Subject() != busapi.ReqStatsSubject(s.Endpoint):
			err = fmt.Errorf("endpoint %q published on %s", s.Endpoint, m.Subject())
		case !histogram(s.Latency) || !histogram(s.TTFT) || !histogram(s.TPOT) || !histogram(s.Overhead):
			err = fmt.Errorf("a histogram does not have %d buckets", busapi.LatencyBuckets)
		case s.WindowEnd < s.WindowStart || s.WindowStart < 0:
			err = errors.New("window ends before it starts")
		case len(s.Notable) > busapi.MaxNotable:
			err = fmt.Errorf("%d notable requests, more than %d", len(s.Notable), busapi.MaxNotable)
		}
		if err != nil {
			c.stats.poison.Add(1)
			c.log.Error("reqstats message terminated", "subject", m.Subject(), "err", err)
			if terr := m.TermWithReason(err.Error()); terr != nil {
				c.log.Warn("terminate reqstats message", "err", terr)
			}
			continue
		}
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		held = append(held, heldStats{msg: m, seq: seq, s: s})
	}
	if len(held) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	err := c.insertNew(cctx, held)
	if err != nil {
		c.stats.insertFailures.Add(1)
		c.log.Warn("reqstats insert failed; retrying by redelivery", "err", err)
		for _, h := range held {
			if nerr := h.msg.NakWithDelay(c.nakDelay(h.msg)); nerr != nil {
				c.log.Debug("nak reqstats message", "err", nerr)
			}
		}
		return err
	}
	for _, h := range held {
		if aerr := h.msg.Ack(); aerr != nil {
			c.log.Debug("ack reqstats message", "err", aerr)
		}
	}
	return nil
}

func histogram(h []uint64) bool { return len(h) == 0 || len(h) == busapi.LatencyBuckets }

// ReqStatsInsert is the consumer's INSERT into request_stats; `modelplane
// bench ingest` sends the same rows with it to measure ClickHouse's own
// ceiling.
const ReqStatsInsert = "INSERT INTO request_stats (window_start, window_start_ms, window_end, window_end_ms, " +
	"gateway, endpoint, team, version, requests, errors_client, errors_upstream, errors_timeout, errors_shed, canceled, " +
	"latency_buckets, latency_sum_ms, streams, ttft_buckets, ttft_sum_ms, tpot_buckets, tpot_sum_ms, tokens, msg_id, stream_seq, pinned, endpoint_id, caller_team, via_graph, via_graph_version, " +
	"overhead_buckets, overhead_sum_ms, notable_kind, notable_request_id, notable_trace_id, notable_replica, notable_status, notable_end_ms, notable_latency_ms, notable_upstream_ms)"

// insertNew inserts the held messages whose ids request_stats does not hold
// yet, each id once.
func (c *ReqStats) insertNew(ctx context.Context, held []heldStats) error {
	stored, err := c.storedIDs(ctx, held)
	if err != nil {
		return fmt.Errorf("reqstats stored ids: %w", err)
	}
	batch, err := c.cfg.CH.PrepareBatch(ctx, ReqStatsInsert)
	if err != nil {
		return fmt.Errorf("reqstats insert: %w", err)
	}
	defer batch.Close()
	rows := 0
	for _, h := range held {
		s := &h.s
		if stored[s.ID] {
			c.stats.duplicates.Add(1)
			continue
		}
		stored[s.ID] = true
		n := notableColumns(s.Notable)
		if err := batch.Append(
			time.UnixMilli(s.WindowStart).UTC(), uint16(s.WindowStart%1000),
			time.UnixMilli(s.WindowEnd).UTC(), uint16(s.WindowEnd%1000),
			s.Gateway, s.Endpoint, s.Team, s.Version, s.Count,
			s.Errors.Client, s.Errors.Upstream, s.Errors.Timeout, s.Errors.Shed, s.Errors.Canceled,
			buckets(s.Latency), s.LatencySumMS, s.Streams, buckets(s.TTFT), s.TTFTSumMS, buckets(s.TPOT), s.TPOTSumMS,
			s.Tokens, s.ID, h.seq, flag(s.Pinned), s.EndpointID, s.CallerTeam, s.ViaGraph, s.ViaGraphVersion,
			buckets(s.Overhead), s.OverheadSumMS, n.kind, n.requestID, n.traceID, n.replica, n.status, n.endMS, n.latencyMS, n.upstreamMS,
		); err != nil {
			return fmt.Errorf("reqstats insert: %w", err)
		}
		rows++
	}
	if rows == 0 {
		return nil
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("reqstats insert: %w", err)
	}
	c.stats.rows.Add(uint64(rows))
	return nil
}

// notable is ReqStats.Notable as request_stats' parallel arrays.
type notable struct {
	kind, requestID, traceID, replica []string
	status                            []uint16
	endMS                             []int64
	latencyMS, upstreamMS             []float64
}

func notableColumns(ns []busapi.NotableRequest) notable {
	out := notable{kind: []string{}, requestID: []string{}, traceID: []string{}, replica: []string{}, status: []uint16{},
		endMS: []int64{}, latencyMS: []float64{}, upstreamMS: []float64{}}
	for _, n := range ns {
		out.kind = append(out.kind, n.Kind)
		out.requestID = append(out.requestID, n.RequestID)
		out.traceID = append(out.traceID, n.TraceID)
		out.replica = append(out.replica, n.Replica)
		out.status = append(out.status, uint16(min(max(n.Status, 0), 999)))
		out.endMS = append(out.endMS, n.EndMS)
		out.latencyMS = append(out.latencyMS, n.LatencyMS)
		out.upstreamMS = append(out.upstreamMS, n.UpstreamMS)
	}
	return out
}

// flag is a bool as ClickHouse's UInt8 column holds it.
func flag(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// buckets stores an absent histogram (a predict endpoint's TTFT) as zeros,
// so every row's arrays line up with busapi.LatencyBoundsMS.
func buckets(h []uint64) []uint64 {
	if len(h) == 0 {
		return make([]uint64, busapi.LatencyBuckets)
	}
	return h
}

// storedIDs returns which of the held ids request_stats holds, asked
// within the endpoints and the window range, the table's sort key.
func (c *ReqStats) storedIDs(ctx context.Context, held []heldStats) (map[string]bool, error) {
	q := idQuery{ids: make([]string, 0, len(held)), from: held[0].s.WindowStart, to: held[0].s.WindowStart}
	for _, h := range held {
		q.add(h.s.ID, h.s.Endpoint, h.s.WindowStart)
	}
	return q.stored(ctx, c.cfg.CH, `SELECT msg_id FROM request_stats
		WHERE endpoint IN ? AND window_start >= toDateTime(?) AND window_start <= toDateTime(?) AND msg_id IN ?`)
}

// nakDelay grows with the delivery count so that an outage is retried
// quickly at first and then without hammering ClickHouse.
func (c *ReqStats) nakDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	d := c.cfg.NakDelay
	for i := uint64(1); i < n && d < c.cfg.MaxNakDelay; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxNakDelay)
}
