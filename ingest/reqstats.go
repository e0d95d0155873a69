package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// ReqStatsConfig configures the request statistics consumer: the stream
// defaults to busapi.StreamReqStats, the durable to "ingest-reqstats", the
// batch to 10,000 messages and MaxBytes to reqStatsFetchBytes.
type ReqStatsConfig = PullConfig

// reqStatsFetchBytes bounds a fetch of MP_REQSTATS: a message holds up to
// a gateway's batch of windows (busapi.BatchMaxBytes), so a count of
// messages bounds nothing. 8 MiB is about 10,000 of `modelplane bench
// ingest`'s windows, which carry one histogram each.
const reqStatsFetchBytes = 8 << 20

// ReqStats consumes MP_REQSTATS into ClickHouse request_stats exactly once:
// before it inserts a fetched set it asks request_stats which of their
// windows' ids it already holds (within the set's endpoints and windows,
// the table's sort key) and skips those, and it acks only after the
// insert. A message redelivered after its insert succeeded (the ack lost,
// the process killed in between) or published again after the duplicate
// window is therefore stored once. One goroutine inserts, so no two
// inserts of the same id can race. A message is a gateway's
// busapi.ReqStatsBatch in binary (busapi.StatsBody), in JSON from a
// gateway older than that, or a lone busapi.ReqStats in JSON from one
// older than batches.
type ReqStats struct {
	cfg   ReqStatsConfig
	log   *slog.Logger
	stats reqStatsCounters

	pullLoop[heldStats]
}

type reqStatsCounters struct {
	rows, duplicates, poison, refused, insertFailures atomic.Uint64
}

// ReqStatsStats is a snapshot of the consumer's counters.
type ReqStatsStats struct {
	// Rows is the number of rows inserted into request_stats.
	Rows uint64
	// Duplicates is the number of windows not inserted because their id
	// was stored already or repeated in the same fetch.
	Duplicates uint64
	// Poison is the number of messages terminated because they do not
	// decode, hold no window that can be stored or came on a subject not
	// theirs; Refused the number of windows left out of a message whose
	// other windows were stored.
	Poison, Refused uint64
	// InsertFailures is the number of fetched sets ClickHouse refused; their
	// messages are redelivered.
	InsertFailures uint64
}

// NewReqStats checks cfg and fills defaults. It starts nothing; call Start.
func NewReqStats(cfg ReqStatsConfig) (*ReqStats, error) {
	if err := cfg.defaults("reqstats", busapi.StreamReqStats, "ingest-reqstats", 10_000); err != nil {
		return nil, err
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = reqStatsFetchBytes
	}
	c := &ReqStats{cfg: cfg, log: cfg.Log.With("consumer", cfg.Durable)}
	c.pullLoop = newPullLoop(cfg, "reqstats", c.log, c.decode, c.store)
	return c, nil
}

// Stats returns the counters so far.
func (c *ReqStats) Stats() ReqStatsStats {
	s := &c.stats
	return ReqStatsStats{Rows: s.rows.Load(), Duplicates: s.duplicates.Load(), Poison: s.poison.Load(),
		Refused: s.refused.Load(), InsertFailures: s.insertFailures.Load()}
}

// heldStats are the windows of one message.
type heldStats = held[busapi.ReqStats]

// decodeStats parses one MP_REQSTATS message published on subject: a
// binary batch, or JSON from a gateway older than the binary form.
func decodeStats(subject string, data []byte) ([]busapi.ReqStats, error) {
	if busapi.IsBinaryReqStats(data) {
		b, err := busapi.DecodeReqStats(data)
		switch {
		case err != nil:
			return nil, err
		case len(b.Stats) == 0:
			return nil, errors.New("a batch of no windows")
		case subject != busapi.ReqStatsBatchSubject:
			return nil, fmt.Errorf("a batch of statistics published on %s", subject)
		}
		return b.Stats, nil
	}
	var b busapi.ReqStatsBatch
	if err := decodeExact(data, &b); err != nil {
		return nil, err
	}
	if len(b.Stats) > 0 {
		if subject != busapi.ReqStatsBatchSubject {
			return nil, fmt.Errorf("a batch of statistics published on %s", subject)
		}
		return b.Stats, nil
	}
	// A gateway older than batches: one window, on its endpoint's subject.
	var s busapi.ReqStats
	if err := decodeExact(data, &s); err != nil {
		return nil, err
	}
	if subject != busapi.ReqStatsSubject(s.Endpoint) {
		return nil, fmt.Errorf("statistics of endpoint %q published on %s", s.Endpoint, subject)
	}
	return []busapi.ReqStats{s}, nil
}

// checkStats reports why a decoded window cannot be stored, nil when it can.
func checkStats(s *busapi.ReqStats) error {
	switch {
	case s.ID == "" || s.Endpoint == "" || s.Version == "":
		return errors.New("missing id, endpoint or version")
	case !histogram(s.Latency) || !histogram(s.TTFT) || !histogram(s.TPOT) || !histogram(s.Overhead):
		return fmt.Errorf("a histogram does not have %d buckets", busapi.LatencyBuckets)
	case s.WindowEnd < s.WindowStart || s.WindowStart < 0:
		return errors.New("window ends before it starts")
	case len(s.Notable) > busapi.MaxNotable:
		return fmt.Errorf("%d notable requests, more than %d", len(s.Notable), busapi.MaxNotable)
	}
	return nil
}

// decode parses and checks msgs (decodeHeld).
func (c *ReqStats) decode(msgs []jetstream.Msg) []heldStats {
	return decodeHeld(msgs, c.log, "reqstats windows", heldCounters{&c.stats.poison, &c.stats.refused}, decodeStats, checkStats)
}

// store inserts what of held request_stats does not hold yet and acks;
// on a ClickHouse failure it naks every message with a growing delay and
// returns the error.
func (c *ReqStats) store(ctx context.Context, held []heldStats) error {
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

// insertNew inserts the held windows whose ids request_stats does not
// hold yet, each id once.
func (c *ReqStats) insertNew(ctx context.Context, held []heldStats) error {
	stored, err := c.storedIDs(ctx, held)
	if err != nil {
		return fmt.Errorf("reqstats stored ids: %w", err)
	}
	var cols statsColumns
	for _, h := range held {
		for i := range h.items {
			s := &h.items[i]
			if stored[s.ID] {
				c.stats.duplicates.Add(1)
				continue
			}
			stored[s.ID] = true
			cols.add(s, h.seq)
		}
	}
	rows := len(cols.msgID)
	if rows == 0 {
		return nil
	}
	if err := SendColumns(ctx, c.cfg.CH, ReqStatsInsert, cols.list()); err != nil {
		return fmt.Errorf("reqstats insert: %w", err)
	}
	c.stats.rows.Add(uint64(rows))
	return nil
}

// statsColumns are request_stats' columns of the rows to insert, in the
// order of ReqStatsInsert: a columnar append costs a fraction of one
// Append per row, which took a third of the consumer's time (`modelplane
// bench ingest`). The notable_* columns are ReqStats.Notable as parallel
// arrays.
type statsColumns struct {
	wStart, wEnd                                                  []time.Time
	wStartMS, wEndMS                                              []uint16
	gateway, endpoint, team, version                              []string
	count, eClient, eUpstream, eTimeout, eShed, canceled          []uint64
	latency, ttft, tpot, overhead                                 [][]uint64
	latencySum, ttftSum, tpotSum, overheadSum                     []float64
	streams, tokens, seq                                          []uint64
	msgID, caller, viaGraph, viaGraphVersion                      []string
	pinned                                                        []uint8
	endpointID                                                    []int64
	notableKind, notableRequestID, notableTraceID, notableReplica [][]string
	notableStatus                                                 [][]uint16
	notableEndMS                                                  [][]int64
	notableLatencyMS, notableUpstreamMS                           [][]float64
}

// add appends s's row, from the message of stream sequence seq.
func (c *statsColumns) add(s *busapi.ReqStats, seq uint64) {
	c.wStart = append(c.wStart, time.UnixMilli(s.WindowStart).UTC())
	c.wStartMS = append(c.wStartMS, uint16(s.WindowStart%1000))
	c.wEnd = append(c.wEnd, time.UnixMilli(s.WindowEnd).UTC())
	c.wEndMS = append(c.wEndMS, uint16(s.WindowEnd%1000))
	c.gateway = append(c.gateway, s.Gateway)
	c.endpoint = append(c.endpoint, s.Endpoint)
	c.team = append(c.team, s.Team)
	c.version = append(c.version, s.Version)
	c.count = append(c.count, s.Count)
	c.eClient = append(c.eClient, s.Errors.Client)
	c.eUpstream = append(c.eUpstream, s.Errors.Upstream)
	c.eTimeout = append(c.eTimeout, s.Errors.Timeout)
	c.eShed = append(c.eShed, s.Errors.Shed)
	c.canceled = append(c.canceled, s.Errors.Canceled)
	c.latency = append(c.latency, buckets(s.Latency))
	c.latencySum = append(c.latencySum, s.LatencySumMS)
	c.streams = append(c.streams, s.Streams)
	c.ttft = append(c.ttft, buckets(s.TTFT))
	c.ttftSum = append(c.ttftSum, s.TTFTSumMS)
	c.tpot = append(c.tpot, buckets(s.TPOT))
	c.tpotSum = append(c.tpotSum, s.TPOTSumMS)
	c.tokens = append(c.tokens, s.Tokens)
	c.msgID = append(c.msgID, s.ID)
	c.seq = append(c.seq, seq)
	c.pinned = append(c.pinned, flag(s.Pinned))
	c.endpointID = append(c.endpointID, s.EndpointID)
	c.caller = append(c.caller, s.CallerTeam)
	c.viaGraph = append(c.viaGraph, s.ViaGraph)
	c.viaGraphVersion = append(c.viaGraphVersion, s.ViaGraphVersion)
	c.overhead = append(c.overhead, buckets(s.Overhead))
	c.overheadSum = append(c.overheadSum, s.OverheadSumMS)
	kind, requestID, traceID, replica := make([]string, 0, len(s.Notable)), make([]string, 0, len(s.Notable)),
		make([]string, 0, len(s.Notable)), make([]string, 0, len(s.Notable))
	status, endMS := make([]uint16, 0, len(s.Notable)), make([]int64, 0, len(s.Notable))
	latencyMS, upstreamMS := make([]float64, 0, len(s.Notable)), make([]float64, 0, len(s.Notable))
	for _, n := range s.Notable {
		kind, requestID, traceID, replica = append(kind, n.Kind), append(requestID, n.RequestID), append(traceID, n.TraceID), append(replica, n.Replica)
		status = append(status, uint16(min(max(n.Status, 0), 999)))
		endMS, latencyMS, upstreamMS = append(endMS, n.EndMS), append(latencyMS, n.LatencyMS), append(upstreamMS, n.UpstreamMS)
	}
	c.notableKind, c.notableRequestID = append(c.notableKind, kind), append(c.notableRequestID, requestID)
	c.notableTraceID, c.notableReplica = append(c.notableTraceID, traceID), append(c.notableReplica, replica)
	c.notableStatus, c.notableEndMS = append(c.notableStatus, status), append(c.notableEndMS, endMS)
	c.notableLatencyMS, c.notableUpstreamMS = append(c.notableLatencyMS, latencyMS), append(c.notableUpstreamMS, upstreamMS)
}

func (c *statsColumns) list() []any {
	return []any{c.wStart, c.wStartMS, c.wEnd, c.wEndMS, c.gateway, c.endpoint, c.team, c.version, c.count,
		c.eClient, c.eUpstream, c.eTimeout, c.eShed, c.canceled, c.latency, c.latencySum, c.streams, c.ttft, c.ttftSum,
		c.tpot, c.tpotSum, c.tokens, c.msgID, c.seq, c.pinned, c.endpointID, c.caller, c.viaGraph, c.viaGraphVersion,
		c.overhead, c.overheadSum, c.notableKind, c.notableRequestID, c.notableTraceID, c.notableReplica, c.notableStatus,
		c.notableEndMS, c.notableLatencyMS, c.notableUpstreamMS}
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
	first := held[0].items[0].WindowStart
	q := idQuery{from: first, to: first}
	for _, h := range held {
		for i := range h.items {
			s := &h.items[i]
			q.add(s.ID, s.Endpoint, s.WindowStart)
		}
	}
	return q.stored(ctx, c.cfg.CH, `SELECT msg_id FROM request_stats
		WHERE endpoint IN ? AND window_start >= toDateTime(?) AND window_start <= toDateTime(?) AND msg_id IN held_ids`)
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
