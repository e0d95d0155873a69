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

// PredictionsConfig configures the prediction samples consumer: the stream
// defaults to busapi.StreamPredictions, the durable to "ingest-predictions"
// and the batch to 10,000 (few large inserts: 1,000 took an eighth of
// ClickHouse's own rate in `modelplane bench ingest`).
type PredictionsConfig = PullConfig

// Predictions consumes MP_PREDICTIONS into ClickHouse prediction_samples,
// one row per instance (one per completion for an LLM), exactly once in
// the way ReqStats is: before it inserts a fetched set it asks
// prediction_samples which request ids it holds already (within the set's
// endpoints and times, the table's sort key) and skips those, and it acks
// only after the insert. One goroutine inserts.
type Predictions struct {
	cfg   PredictionsConfig
	log   *slog.Logger
	stats predictionsCounters

	pullLoop[heldSample]
}

type predictionsCounters struct {
	samples, rows, duplicates, poison, insertFailures atomic.Uint64
}

// PredictionsStats is a snapshot of the consumer's counters.
type PredictionsStats struct {
	// Samples is the number of samples stored; Rows the rows they made.
	Samples, Rows uint64
	// Duplicates is the number of messages acked without an insert because
	// their request id was stored already or repeated in the same fetch.
	Duplicates uint64
	// Poison is the number of messages terminated because they do not
	// decode or do not describe the endpoint of their subject.
	Poison uint64
	// InsertFailures is the number of fetched sets ClickHouse refused; their
	// messages are redelivered.
	InsertFailures uint64
}

// NewPredictions checks cfg and fills defaults. It starts nothing; call Start.
func NewPredictions(cfg PredictionsConfig) (*Predictions, error) {
	if err := cfg.defaults("predictions", busapi.StreamPredictions, "ingest-predictions", 10_000); err != nil {
		return nil, err
	}
	c := &Predictions{cfg: cfg, log: cfg.Log.With("consumer", cfg.Durable)}
	c.pullLoop = newPullLoop(cfg, "predictions", c.log, c.decode, c.store)
	return c, nil
}

// Stats returns the counters so far.
func (c *Predictions) Stats() PredictionsStats {
	s := &c.stats
	return PredictionsStats{Samples: s.samples.Load(), Rows: s.rows.Load(), Duplicates: s.duplicates.Load(),
		Poison: s.poison.Load(), InsertFailures: s.insertFailures.Load()}
}

type heldSample struct {
	msg jetstream.Msg
	seq uint64
	s   busapi.PredictionSample
}

// checkSample reports why a decoded sample cannot be stored, nil when it can.
func checkSample(subject string, s *busapi.PredictionSample) error {
	switch {
	case s.ID == "" || s.Endpoint == "" || s.Version == "":
		return errors.New("missing id, endpoint or version")
	case subject != busapi.PredictionSubject(s.Endpoint):
		return fmt.Errorf("endpoint %q published on %s", s.Endpoint, subject)
	case s.Time <= 0:
		return errors.New("missing time")
	case s.Tokens < 0:
		return errors.New("negative token count")
	}
	for i, in := range s.Instances {
		if len(in.Num) != len(s.FeatureNames) || len(in.Str) != len(s.FeatureNames) {
			return fmt.Errorf("instance %d has %d numbers and %d strings for %d features", i, len(in.Num), len(in.Str), len(s.FeatureNames))
		}
	}
	return nil
}

// decode parses and checks msgs, terminating poison. Log lines name the
// subject and the reason, never the sample's content.
func (c *Predictions) decode(msgs []jetstream.Msg) []heldSample {
	held := make([]heldSample, 0, len(msgs))
	for _, m := range msgs {
		var s busapi.PredictionSample
		err := decodeJSON(m.Data(), &s)
		if err == nil {
			err = checkSample(m.Subject(), &s)
		}
		if err != nil {
			c.stats.poison.Add(1)
			c.log.Error("prediction sample terminated", "subject", m.Subject(), "err", err)
			if terr := m.TermWithReason(err.Error()); terr != nil {
				c.log.Warn("terminate prediction sample", "err", terr)
			}
			continue
		}
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		held = append(held, heldSample{msg: m, seq: seq, s: s})
	}
	return held
}

// store inserts what of held prediction_samples does not hold yet and
// acks; on a ClickHouse failure it naks every message with a growing delay
// and returns the error.
func (c *Predictions) store(ctx context.Context, held []heldSample) error {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if err := c.insertNew(cctx, held); err != nil {
		c.stats.insertFailures.Add(1)
		c.log.Warn("prediction samples insert failed; retrying by redelivery", "err", err)
		for _, h := range held {
			if nerr := h.msg.NakWithDelay(c.nakDelay(h.msg)); nerr != nil {
				c.log.Debug("nak prediction sample", "err", nerr)
			}
		}
		return err
	}
	for _, h := range held {
		if aerr := h.msg.Ack(); aerr != nil {
			c.log.Debug("ack prediction sample", "err", aerr)
		}
	}
	return nil
}

// PredictionsInsert is the consumer's INSERT into prediction_samples;
// `modelplane bench ingest` sends the same rows with it to measure
// ClickHouse's own ceiling.
const PredictionsInsert = "INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, " +
	"request_id, instance, feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq, pinned, endpoint_id)"

// insertNew inserts the held samples whose request ids prediction_samples
// does not hold yet, each id once.
func (c *Predictions) insertNew(ctx context.Context, held []heldSample) error {
	stored, err := c.storedIDs(ctx, held)
	if err != nil {
		return fmt.Errorf("prediction samples stored ids: %w", err)
	}
	var cols sampleColumns
	samples := 0
	for _, h := range held {
		s := &h.s
		if stored[s.ID] {
			c.stats.duplicates.Add(1)
			continue
		}
		stored[s.ID] = true
		samples++
		if len(s.Instances) == 0 {
			// An LLM completion, or a predict answer without predictions:
			// one row keeps the request counted.
			cols.add(h, 0, busapi.SampleInstance{})
			continue
		}
		for i, in := range s.Instances {
			cols.add(h, uint32(i), in)
		}
	}
	rows := len(cols.id)
	if rows == 0 {
		return nil
	}
	if err := SendColumns(ctx, c.cfg.CH, PredictionsInsert, cols.list()); err != nil {
		return fmt.Errorf("prediction samples insert: %w", err)
	}
	c.stats.samples.Add(uint64(samples))
	c.stats.rows.Add(uint64(rows))
	return nil
}

// sampleColumns are prediction_samples' columns of the rows to insert,
// in the order of PredictionsInsert: a columnar append costs a fraction
// of one Append per row.
type sampleColumns struct {
	ts                          []time.Time
	tsMS                        []uint16
	endpoint, team, version, id []string
	instance, tokens            []uint32
	names, strs                 [][]string
	values                      [][]float64
	score, latency              []float64
	label                       []string
	seq                         []uint64
	pinned                      []uint8
	endpointID                  []int64
}

// add appends the row of instance i of h's sample.
func (c *sampleColumns) add(h heldSample, i uint32, in busapi.SampleInstance) {
	s := &h.s
	names := s.FeatureNames
	if len(s.Instances) == 0 || names == nil {
		names = []string{}
	}
	if in.Num == nil {
		in.Num = []float64{}
	}
	if in.Str == nil {
		in.Str = []string{}
	}
	c.ts = append(c.ts, time.UnixMilli(s.Time).UTC())
	c.tsMS = append(c.tsMS, uint16(s.Time%1000))
	c.endpoint = append(c.endpoint, s.Endpoint)
	c.team = append(c.team, s.Team)
	c.version = append(c.version, s.Version)
	c.id = append(c.id, s.ID)
	c.instance = append(c.instance, i)
	c.names = append(c.names, names)
	c.values = append(c.values, in.Num)
	c.strs = append(c.strs, in.Str)
	c.score = append(c.score, in.Score)
	c.label = append(c.label, in.Label)
	c.tokens = append(c.tokens, uint32(s.Tokens))
	c.latency = append(c.latency, s.LatencyMS)
	c.seq = append(c.seq, h.seq)
	c.pinned = append(c.pinned, flag(s.Pinned))
	c.endpointID = append(c.endpointID, s.EndpointID)
}

func (c *sampleColumns) list() []any {
	return []any{c.ts, c.tsMS, c.endpoint, c.team, c.version, c.id, c.instance, c.names, c.values, c.strs,
		c.score, c.label, c.tokens, c.latency, c.seq, c.pinned, c.endpointID}
}

// storedIDs returns which of the held request ids prediction_samples
// holds, asked within the endpoints and the time range, the table's sort
// key.
func (c *Predictions) storedIDs(ctx context.Context, held []heldSample) (map[string]bool, error) {
	q := idQuery{ids: make([]string, 0, len(held)), from: held[0].s.Time, to: held[0].s.Time}
	for _, h := range held {
		q.add(h.s.ID, h.s.Endpoint, h.s.Time)
	}
	return q.stored(ctx, c.cfg.CH, `SELECT DISTINCT request_id FROM prediction_samples
		WHERE endpoint IN ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND request_id IN held_ids`)
}

// nakDelay grows with the delivery count, as ReqStats' does.
func (c *Predictions) nakDelay(msg jetstream.Msg) time.Duration {
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
