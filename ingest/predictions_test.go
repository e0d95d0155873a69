package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/wait"
)

func (e *reqStatsEnv) startPredictions(t *testing.T) *ingest.Predictions {
	t.Helper()
	c, err := ingest.NewPredictions(ingest.PredictionsConfig{JS: e.js, CH: e.ch, MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func (e *reqStatsEnv) predictionsDrained(t *testing.T) bool {
	t.Helper()
	c, err := e.js.Consumer(t.Context(), busapi.StreamPredictions, "ingest-predictions")
	if err != nil {
		return false
	}
	info, err := c.Info(t.Context())
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

func fraudSample(i int) busapi.PredictionSample {
	return busapi.PredictionSample{ID: fmt.Sprintf("req-%d", i), Time: 1_800_000_000_000 + int64(i)*1_000 + 7,
		Endpoint: "fraud", Team: "risk", Version: "v23", LatencyMS: 1.5,
		FeatureNames: []string{"amount", "country"},
		Instances: []busapi.SampleInstance{
			{Num: []float64{12.5, 0}, Str: []string{"", "DE"}, Score: 0.1, Label: "legit"},
			{Num: []float64{900, 0}, Str: []string{"", "US"}, Score: 0.9, Label: "fraud"},
		}}
}

// TestPredictionsExactlyOnce stores samples as one row per instance (one per
// completion for an LLM), each request id once even when published again
// without a Nats-Msg-Id, which the stream's duplicate window cannot catch.
func TestPredictionsExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	c := e.startPredictions(t)
	const n = 20
	for i := range n {
		b, _ := json.Marshal(fraudSample(i))
		e.publishRaw(t, busapi.PredictionSubject("fraud"), b, fmt.Sprintf("req-%d", i), true)
	}
	llm := busapi.PredictionSample{ID: "chat-1", Time: 1_800_000_000_000, Endpoint: "chat", Team: "search", Version: "v42", Tokens: 17, LatencyMS: 90}
	b, _ := json.Marshal(llm)
	e.publishRaw(t, busapi.PredictionSubject("chat"), b, llm.ID, true)
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Samples == n+1 }, "waiting for first pass stored")
	// Published again without ids: redeliveries past the duplicate window.
	for i := range 5 {
		b, _ := json.Marshal(fraudSample(i))
		e.publishRaw(t, busapi.PredictionSubject("fraud"), b, "", false)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return e.predictionsDrained(t) && c.Stats().Duplicates == 5 }, "waiting for drained")

	var rows, ids uint64
	if err := e.ch.QueryRow(context.Background(), `SELECT count(), uniqExact(request_id) FROM prediction_samples`).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if rows != 2*n+1 || ids != n+1 {
		t.Fatalf("rows %d, ids %d; want %d, %d", rows, ids, 2*n+1, n+1)
	}
	var names, strs []string
	var vals []float64
	var score float64
	var label string
	var ts time.Time
	var tsMS uint16
	if err := e.ch.QueryRow(context.Background(), `SELECT feature_names, feature_values, feature_strings, score, label, ts, ts_ms
		FROM prediction_samples WHERE request_id = 'req-3' AND instance = 1`).Scan(&names, &vals, &strs, &score, &label, &ts, &tsMS); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%v %v %q %v %q", names, vals, strs, score, label); got != `[amount country] [900 0] ["" "US"] 0.9 "fraud"` {
		t.Fatalf("row: %s", got)
	}
	if got := ts.UnixMilli() + int64(tsMS); got != fraudSample(3).Time {
		t.Fatalf("time %d, want %d", got, fraudSample(3).Time)
	}
	var tokens uint32
	if err := e.ch.QueryRow(context.Background(), `SELECT tokens FROM prediction_samples WHERE request_id = 'chat-1'`).Scan(&tokens); err != nil {
		t.Fatal(err)
	}
	if tokens != 17 {
		t.Fatalf("tokens %d, want 17", tokens)
	}
}

// TestPredictionsBatches stores the samples of gateways' batches, each
// once by request id and version: a shadow's sample, which shares its
// request's id, is stored beside it, and a batch published again stores
// nothing more.
func TestPredictionsBatches(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	c := e.startPredictions(t)
	var all []busapi.PredictionSample
	for i := range 30 {
		all = append(all, fraudSample(i))
		if i%3 == 0 {
			shadow := fraudSample(i)
			shadow.Version, shadow.Instances[0].Score = "v24", 0.7
			all = append(all, shadow)
		}
	}
	// The first in binary, as gateways send them; the second in JSON, as
	// gateways of an earlier version do.
	first := binaryBatch("b1", all[:17]...)
	e.publishRaw(t, busapi.PredictionBatchSubject, first, "b1", true)
	e.publishRaw(t, busapi.PredictionBatchSubject, mustJSON(t, busapi.PredictionBatch{ID: "b2", Gateway: "gw-2", Samples: all[17:]}), "b2", true)
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Samples == uint64(len(all)) }, "waiting for the batches stored")
	// The first batch again, without its id: a redelivery past the
	// duplicate window.
	e.publishRaw(t, busapi.PredictionBatchSubject, first, "", false)
	wait.Eventually(t, 30*time.Second, func() bool { return e.predictionsDrained(t) && c.Stats().Duplicates == 17 }, "waiting for drained")

	var rows, samples, shadows uint64
	if err := e.ch.QueryRow(context.Background(), `SELECT count(), uniqExact(request_id, version), countIf(version = 'v24')
		FROM prediction_samples`).Scan(&rows, &samples, &shadows); err != nil {
		t.Fatal(err)
	}
	if rows != 2*40 || samples != 40 || shadows != 2*10 {
		t.Fatalf("rows %d, samples %d, shadow rows %d; want 80, 40, 20", rows, samples, shadows)
	}
	var score float64
	if err := e.ch.QueryRow(context.Background(), `SELECT score FROM prediction_samples
		WHERE request_id = 'req-27' AND version = 'v24' AND instance = 0`).Scan(&score); err != nil {
		t.Fatal(err)
	}
	if score != 0.7 {
		t.Fatalf("the shadow's score %v, want 0.7", score)
	}
}

// TestPredictionsPoisonTerminated terminates what cannot be stored and
// stores the rest: a batch's samples that cannot be stored are left out
// of it, and a batch with none that can is terminated.
func TestPredictionsPoisonTerminated(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	c := e.startPredictions(t)
	ragged := fraudSample(1)
	ragged.Instances[0].Num = []float64{1}
	wrongSubject := fraudSample(2)
	wrongSubject.Endpoint = "other"
	for i, data := range [][]byte{[]byte("not json"), mustJSON(t, ragged), mustJSON(t, wrongSubject), mustJSON(t, busapi.PredictionSample{Endpoint: "fraud"})} {
		e.publishRaw(t, busapi.PredictionSubject("fraud"), data, fmt.Sprintf("poison-%d", i), true)
	}
	e.publishRaw(t, busapi.PredictionSubject("fraud"), mustJSON(t, fraudSample(9)), "req-9", true)
	for i, b := range []busapi.PredictionBatch{
		{ID: "mixed", Samples: []busapi.PredictionSample{ragged, fraudSample(10), {Endpoint: "fraud"}, fraudSample(11)}},
		{ID: "all-bad", Samples: []busapi.PredictionSample{ragged, {Endpoint: "fraud"}}},
	} {
		e.publishRaw(t, busapi.PredictionBatchSubject, mustJSON(t, b), fmt.Sprintf("batch-%d", i), true)
	}
	// A batch on an endpoint's subject, where only lone samples were.
	e.publishRaw(t, busapi.PredictionSubject("fraud"), mustJSON(t, busapi.PredictionBatch{ID: "astray", Samples: []busapi.PredictionSample{fraudSample(12)}}),
		"astray", true)
	// Binary batches: cut short, astray, of no samples, and one sample of
	// two that can be stored.
	cut := binaryBatch("cut", fraudSample(13))
	e.publishRaw(t, busapi.PredictionBatchSubject, cut[:len(cut)-3], "cut", true)
	e.publishRaw(t, busapi.PredictionSubject("fraud"), binaryBatch("astray-binary", fraudSample(14)), "astray-binary", true)
	e.publishRaw(t, busapi.PredictionBatchSubject, binaryBatch("none"), "none", true)
	e.publishRaw(t, busapi.PredictionBatchSubject, binaryBatch("mixed-binary", ragged, fraudSample(15)), "mixed-binary", true)
	wait.Eventually(t, 30*time.Second, func() bool { return e.predictionsDrained(t) && c.Stats().Samples == 4 }, "waiting for drained")
	if s := c.Stats(); s.Poison != 9 || s.Refused != 3 || s.Rows != 8 {
		t.Fatalf("stats %+v; want 9 poison, 3 refused, 8 rows", s)
	}
}

// binaryBatch is samples in one batch as a gateway sends it.
func binaryBatch(id string, samples ...busapi.PredictionSample) []byte {
	var b busapi.SampleBody
	for i := range samples {
		b.Add(&samples[i])
	}
	return b.Message(id, "gw-1")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPredictionsBacklogEndNotWaitedOn drains a backlog that is not a
// whole number of sets: its last, short set is fetched as it is. Waiting
// for a whole set, the consumer stored it only when the fetch's MaxWait
// ran out, a minute here.
func TestPredictionsBacklogEndNotWaitedOn(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	const n = 25
	for i := range n {
		e.publishRaw(t, busapi.PredictionSubject("fraud"), mustJSON(t, fraudSample(i)), fmt.Sprintf("req-%d", i), true)
	}
	c, err := ingest.NewPredictions(ingest.PredictionsConfig{JS: e.js, CH: e.ch, Batch: 10, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Stop waits out the fetch under way, which waits for a set of new
	// samples: a set ends it.
	t.Cleanup(func() {
		for i := n; i < n+10; i++ {
			if _, err := e.js.Publish(context.Background(), busapi.PredictionSubject("fraud"), mustJSON(t, fraudSample(i))); err != nil {
				t.Error(err)
			}
		}
		c.Stop()
	})
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Samples == n }, "waiting for the backlog stored: %v",
		wait.Show(func() any { return c.Stats() }))
}
