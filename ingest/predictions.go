package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// PredictionsConfig configures the prediction samples consumer: the stream
// defaults to busapi.StreamPredictions, the durable to
// "ingest-predictions", the batch to 10,000 messages and MaxBytes to
// predictionsFetchBytes (few large inserts: 1,000 samples a fetch took an
// eighth of ClickHouse's own rate in `modelplane bench ingest`).
type PredictionsConfig = PullConfig

// predictionsFetchBytes bounds a fetch of MP_PREDICTIONS: a message holds
// up to a gateway's batch of samples, so a count of messages bounds
// nothing. 4 MiB is about 12,000 samples of four instances.
const predictionsFetchBytes = 4 << 20

// Predictions consumes MP_PREDICTIONS into ClickHouse prediction_samples,
// one row per instance (one per completion for an LLM), exactly once in
// the way ReqStats is: before it inserts a fetched set it asks
// prediction_samples which of its samples it holds already, by request id
// and version (within the set's endpoints and times, the table's sort key;
// a shadow's sample shares its request's id), and skips those, and it
// acks only after the insert. One goroutine inserts. A message is a
// gateway's busapi.PredictionBatch in binary (busapi.SampleBody), in JSON
// from a gateway older than that, or a lone busapi.PredictionSample from
// a gateway older than batches.
type Predictions struct {
	cfg   PredictionsConfig
	log   *slog.Logger
	stats predictionsCounters

	pullLoop[heldSamples]
}

type predictionsCounters struct {
	samples, rows, duplicates, poison, refused, insertFailures atomic.Uint64
}

// PredictionsStats is a snapshot of the consumer's counters.
type PredictionsStats struct {
	// Samples is the number of samples stored; Rows the rows they made.
	Samples, Rows uint64
	// Duplicates is the number of samples not inserted because their
	// request id and version were stored already or repeated in the same
	// fetch.
	Duplicates uint64
	// Poison is the number of messages terminated because they do not
	// decode, hold no sample that can be stored or came on a subject not
	// theirs; Refused the number of samples left out of a message whose
	// other samples were stored.
	Poison, Refused uint64
	// InsertFailures is the number of fetched sets ClickHouse refused; their
	// messages are redelivered.
	InsertFailures uint64
}

// NewPredictions checks cfg and fills defaults. It starts nothing; call Start.
func NewPredictions(cfg PredictionsConfig) (*Predictions, error) {
	if err := cfg.defaults("predictions", busapi.StreamPredictions, "ingest-predictions", 10_000); err != nil {
		return nil, err
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = predictionsFetchBytes
	}
	c := &Predictions{cfg: cfg, log: cfg.Log.With("consumer", cfg.Durable)}
	c.pullLoop = newPullLoop(cfg, "predictions", c.log, c.decode, c.store)
	return c, nil
}

// Stats returns the counters so far.
func (c *Predictions) Stats() PredictionsStats {
	s := &c.stats
	return PredictionsStats{Samples: s.samples.Load(), Rows: s.rows.Load(), Duplicates: s.duplicates.Load(),
		Poison: s.poison.Load(), Refused: s.refused.Load(), InsertFailures: s.insertFailures.Load()}
}

// heldSamples are the samples of one message.
type heldSamples = held[busapi.PredictionSample]

// decodeSamples parses one MP_PREDICTIONS message published on subject: a
// gateway's binary batch, or a JSON batch or lone sample from a gateway of
// an earlier version.
func decodeSamples(subject string, data []byte) ([]busapi.PredictionSample, error) {
	if busapi.IsBinarySamples(data) {
		if subject != busapi.PredictionBatchSubject {
			return nil, fmt.Errorf("a batch of samples published on %s", subject)
		}
		b, err := busapi.DecodeSamples(data)
		return b.Samples, err
	}
	var b busapi.PredictionBatch
	if err := decodeJSON(data, &b); err != nil {
		return nil, err
	}
	if len(b.Samples) > 0 {
		if subject != busapi.PredictionBatchSubject {
			return nil, fmt.Errorf("a batch of samples published on %s", subject)
		}
		return b.Samples, nil
	}
	// A gateway older than batches: one sample, on its endpoint's subject.
	var s busapi.PredictionSample
	if err := decodeJSON(data, &s); err != nil {
		return nil, err
	}
	if subject != busapi.PredictionSubject(s.Endpoint) {
		return nil, fmt.Errorf("a sample of endpoint %q published on %s", s.Endpoint, subject)
	}
	return []busapi.PredictionSample{s}, nil
}

// checkSample reports why a decoded sample cannot be stored, nil when it can.
func checkSample(s *busapi.PredictionSample) error {
	switch {
	case s.ID == "" || s.Endpoint == "" || s.Version == "":
		return errors.New("missing id, endpoint or version")
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

// decode parses and checks msgs (decodeHeld).
func (c *Predictions) decode(msgs []jetstream.Msg) []heldSamples {
	return decodeHeld(msgs, c.log, "prediction samples", heldCounters{&c.stats.poison, &c.stats.refused}, decodeSamples, checkSample)
}

// store inserts what of held prediction_samples does not hold yet and
// acks; on a ClickHouse failure it naks every message with a growing delay
// and returns the error.
func (c *Predictions) store(ctx context.Context, held []heldSamples) error {
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

// insertNew inserts the held samples whose request id and version
// prediction_samples does not hold yet, each once.
func (c *Predictions) insertNew(ctx context.Context, held []heldSamples) error {
	n, room := 0, 0 // samples, and the rows they can make
	for _, h := range held {
		for i := range h.items {
			n, room = n+1, room+max(1, len(h.items[i].Instances))
		}
	}
	stored, err := c.storedSamples(ctx, held, n)
	if err != nil {
		return fmt.Errorf("prediction samples stored ids: %w", err)
	}
	cols := newSampleColumns(room)
	samples := 0
	for _, h := range held {
		for i := range h.items {
			s := &h.items[i]
			k := sampleKey{s.ID, s.Version}
			if stored[k] {
				c.stats.duplicates.Add(1)
				continue
			}
			stored[k] = true
			samples++
			if len(s.Instances) == 0 {
				// An LLM completion, or a predict answer without
				// predictions: one row keeps the request counted.
				cols.add(s, h.seq, 0, busapi.SampleInstance{})
				continue
			}
			for i, in := range s.Instances {
				cols.add(s, h.seq, uint32(i), in)
			}
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

// newSampleColumns makes columns with room for rows: growing them row by
// row was a tenth of the consumer's CPU in `modelplane bench ingest`.
func newSampleColumns(rows int) *sampleColumns {
	return &sampleColumns{
		ts: make([]time.Time, 0, rows), tsMS: make([]uint16, 0, rows),
		endpoint: make([]string, 0, rows), team: make([]string, 0, rows), version: make([]string, 0, rows), id: make([]string, 0, rows),
		instance: make([]uint32, 0, rows), tokens: make([]uint32, 0, rows),
		names: make([][]string, 0, rows), strs: make([][]string, 0, rows), values: make([][]float64, 0, rows),
		score: make([]float64, 0, rows), latency: make([]float64, 0, rows), label: make([]string, 0, rows),
		seq: make([]uint64, 0, rows), pinned: make([]uint8, 0, rows), endpointID: make([]int64, 0, rows),
	}
}

// add appends the row of instance i of s, from the message of stream
// sequence seq.
func (c *sampleColumns) add(s *busapi.PredictionSample, seq uint64, i uint32, in busapi.SampleInstance) {
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
	c.seq = append(c.seq, seq)
	c.pinned = append(c.pinned, flag(s.Pinned))
	c.endpointID = append(c.endpointID, s.EndpointID)
}

func (c *sampleColumns) list() []any {
	return []any{c.ts, c.tsMS, c.endpoint, c.team, c.version, c.id, c.instance, c.names, c.values, c.strs,
		c.score, c.label, c.tokens, c.latency, c.seq, c.pinned, c.endpointID}
}

// sampleKey is what names a sample: its request id and version (a
// shadow's sample shares its request's id).
type sampleKey struct{ id, version string }

// storedSamples returns which of the held samples, n of them,
// prediction_samples holds, asked within the endpoints and the time range,
// the table's sort key; the map has room for all n.
func (c *Predictions) storedSamples(ctx context.Context, held []heldSamples, n int) (map[sampleKey]bool, error) {
	first := held[0].items[0].Time
	q := idQuery{from: first, to: first}
	for _, h := range held {
		for i := range h.items {
			s := &h.items[i]
			q.add(s.ID, s.Endpoint, s.Time)
		}
	}
	stored := make(map[sampleKey]bool, n)
	err := q.query(ctx, c.cfg.CH, `SELECT DISTINCT request_id, version FROM prediction_samples
		WHERE endpoint IN ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND request_id IN held_ids`, func(rows driver.Rows) error {
		var k sampleKey
		if err := rows.Scan(&k.id, &k.version); err != nil {
			return err
		}
		stored[k] = true
		return nil
	})
	return stored, err
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
