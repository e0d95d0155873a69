package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

type reqStatsEnv struct {
	js jetstream.JetStream
	ch driver.Conn
}

func newReqStatsEnv(t *testing.T) *reqStatsEnv {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	return &reqStatsEnv{js: js, ch: chtest.New(t)}
}

func (e *reqStatsEnv) start(t *testing.T, cfg ingest.ReqStatsConfig) *ingest.ReqStats {
	t.Helper()
	cfg.JS = e.js
	if cfg.CH == nil {
		cfg.CH = e.ch
	}
	cfg.MaxWait = 100 * time.Millisecond
	c, err := ingest.NewReqStats(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// reqStatsMsg is window i of a gateway's statistics for one version.
func reqStatsMsg(i int) busapi.ReqStats {
	start := int64(1_800_000_000_000) + int64(i)*5_000 + 123
	m := busapi.ReqStats{WindowStart: start, WindowEnd: start + 5_000, Gateway: "gw-1",
		Endpoint: []string{"fraud", "chat"}[i%2], Team: "risk", Version: []string{"v1", "v2"}[i/2%2],
		Count: uint64(100 + i), Errors: busapi.ErrorCounts{Client: 1, Upstream: uint64(i % 3), Timeout: 1, Shed: 2},
		Latency: make([]uint64, busapi.LatencyBuckets), LatencySumMS: float64(i) * 10}
	m.ID = busapi.ReqStatsID(m.Gateway, m.Endpoint, m.Version, m.WindowStart)
	m.Latency[i%busapi.LatencyBuckets] = m.Count
	m.Overhead = make([]uint64, busapi.LatencyBuckets)
	m.Overhead[i%7] = m.Count
	m.OverheadSumMS = float64(i)
	if i%4 == 3 {
		m.Notable = []busapi.NotableRequest{
			{Kind: busapi.NotableSlowest, RequestID: fmt.Sprintf("req-%d", i), TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Replica: "r-1",
				Status: 200, EndMS: start + 4_000, LatencyMS: 81.5, UpstreamMS: 80.25},
			{Kind: busapi.NotableFailed, RequestID: fmt.Sprintf("req-%d-f", i), Status: 503, EndMS: start + 4_500, LatencyMS: 2},
		}
	}
	if m.Endpoint == "chat" {
		m.Streams, m.Tokens = m.Count, 8*m.Count
		m.TTFT = make([]uint64, busapi.LatencyBuckets)
		m.TPOT = make([]uint64, busapi.LatencyBuckets)
		m.TTFT[3], m.TPOT[4] = m.Count, m.Count
	}
	return m
}

func (e *reqStatsEnv) publish(t *testing.T, m busapi.ReqStats, withID bool) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, busapi.ReqStatsSubject(m.Endpoint), b, m.ID, withID)
}

func (e *reqStatsEnv) publishRaw(t *testing.T, subject string, data []byte, id string, withID bool) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if withID {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	if _, err := e.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// drained reports whether the consumer has nothing pending or unacked.
func (e *reqStatsEnv) drained(t *testing.T) bool {
	t.Helper()
	c, err := e.js.Consumer(t.Context(), busapi.StreamReqStats, "ingest-reqstats")
	if err != nil {
		return false
	}
	info, err := c.Info(t.Context())
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

type reqStatsTotals struct {
	rows, ids, requests, upstream, tokens, latency, ttft uint64
}

func (e *reqStatsEnv) totals(t *testing.T) reqStatsTotals {
	t.Helper()
	var s reqStatsTotals
	if err := e.ch.QueryRow(context.Background(), `SELECT count(), uniqExact(msg_id), sum(requests), sum(errors_upstream), sum(tokens),
		sum(arraySum(latency_buckets)), sum(arraySum(ttft_buckets)) FROM request_stats`).
		Scan(&s.rows, &s.ids, &s.requests, &s.upstream, &s.tokens, &s.latency, &s.ttft); err != nil {
		t.Fatal(err)
	}
	return s
}

func wantTotals(ms []busapi.ReqStats) reqStatsTotals {
	var s reqStatsTotals
	for _, m := range ms {
		s.rows++
		s.ids++
		s.requests += m.Count
		s.upstream += m.Errors.Upstream
		s.tokens += m.Tokens
		for i := range m.Latency {
			s.latency += m.Latency[i]
		}
		for i := range m.TTFT {
			s.ttft += m.TTFT[i]
		}
	}
	return s
}

// TestReqStatsExactlyOnce stores every message once: copies of a message
// that JetStream did not deduplicate (published without its id, as after
// the duplicate window), in the same fetch as the original and after the
// original was stored, are acked without a second row.
func TestReqStatsExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	var ms []busapi.ReqStats
	for i := range 40 {
		ms = append(ms, reqStatsMsg(i))
		e.publish(t, ms[i], true)
	}
	for i := range 10 {
		e.publish(t, ms[i], false)
	}
	c := e.start(t, ingest.ReqStatsConfig{})
	wait.Eventually(t, 30*time.Second, func() bool { s := c.Stats(); return s.Rows == 40 && s.Duplicates == 10 && e.drained(t) }, "waiting for first messages stored")
	for i := 20; i < 30; i++ {
		e.publish(t, ms[i], false)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Duplicates == 20 && e.drained(t) }, "waiting for late copies skipped")
	if s := c.Stats(); s.Rows != 40 || s.Poison != 0 {
		t.Errorf("stats %+v, want 40 rows and no poison", s)
	}
	if got, want := e.totals(t), wantTotals(ms); got != want {
		t.Errorf("request_stats totals %+v, want %+v", got, want)
	}

	// One row read back field by field.
	m := ms[7]
	var (
		start, end       time.Time
		startMS, endMS   uint16
		lat, ttft, tpot  []uint64
		team, gw         string
		count, shed, seq uint64
	)
	if err := e.ch.QueryRow(context.Background(), `SELECT window_start, window_start_ms, window_end, window_end_ms, team, gateway,
		requests, errors_shed, latency_buckets, ttft_buckets, tpot_buckets, stream_seq FROM request_stats WHERE msg_id = ?`, m.ID).
		Scan(&start, &startMS, &end, &endMS, &team, &gw, &count, &shed, &lat, &ttft, &tpot, &seq); err != nil {
		t.Fatal(err)
	}
	if start.UnixMilli()+int64(startMS) != m.WindowStart || end.UnixMilli()+int64(endMS) != m.WindowEnd {
		t.Errorf("window %v+%dms–%v+%dms, want %d–%d", start, startMS, end, endMS, m.WindowStart, m.WindowEnd)
	}
	if team != m.Team || gw != m.Gateway || count != m.Count || shed != m.Errors.Shed || seq == 0 {
		t.Errorf("row team %q gateway %q requests %d shed %d seq %d, want %q %q %d %d and a stream sequence", team, gw, count, shed, seq, m.Team, m.Gateway, m.Count, m.Errors.Shed)
	}
	if fmt.Sprint(lat) != fmt.Sprint(m.Latency) || fmt.Sprint(ttft) != fmt.Sprint(m.TTFT) || fmt.Sprint(tpot) != fmt.Sprint(m.TPOT) {
		t.Errorf("histograms %v %v %v, want %v %v %v", lat, ttft, tpot, m.Latency, m.TTFT, m.TPOT)
	}
	// Its overhead and its notable requests, as parallel arrays.
	var (
		overhead                []uint64
		overheadSum             float64
		kinds, ids, traces, rep []string
		statuses                []uint16
		ends                    []int64
		lats, ups               []float64
	)
	if err := e.ch.QueryRow(context.Background(), `SELECT overhead_buckets, overhead_sum_ms, notable_kind, notable_request_id, notable_trace_id,
		notable_replica, notable_status, notable_end_ms, notable_latency_ms, notable_upstream_ms FROM request_stats WHERE msg_id = ?`, m.ID).
		Scan(&overhead, &overheadSum, &kinds, &ids, &traces, &rep, &statuses, &ends, &lats, &ups); err != nil {
		t.Fatal(err)
	}
	var back []busapi.NotableRequest
	for i := range kinds {
		back = append(back, busapi.NotableRequest{Kind: kinds[i], RequestID: ids[i], TraceID: traces[i], Replica: rep[i], Status: int(statuses[i]),
			EndMS: ends[i], LatencyMS: lats[i], UpstreamMS: ups[i]})
	}
	if fmt.Sprint(overhead) != fmt.Sprint(m.Overhead) || overheadSum != m.OverheadSumMS || fmt.Sprint(back) != fmt.Sprint(m.Notable) {
		t.Errorf("overhead %v (sum %v), notable %+v; want %v (sum %v), %+v", overhead, overheadSum, back, m.Overhead, m.OverheadSumMS, m.Notable)
	}
}

// TestReqStatsPoisonTerminated terminates what is not a statistics message
// of its subject's endpoint and stores the rest.
func TestReqStatsPoisonTerminated(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	good := reqStatsMsg(1)
	e.publish(t, good, true)
	e.publishRaw(t, busapi.ReqStatsSubject("fraud"), []byte("{not json"), "p1", true)
	other := reqStatsMsg(2)
	b, _ := json.Marshal(other)
	e.publishRaw(t, busapi.ReqStatsSubject("someone-else"), b, "p2", true)
	short := reqStatsMsg(4)
	short.ID += "-short"
	short.Latency = short.Latency[:3]
	e.publish(t, short, true)
	c := e.start(t, ingest.ReqStatsConfig{})
	wait.Eventually(t, 30*time.Second, func() bool { s := c.Stats(); return s.Poison == 3 && s.Rows == 1 && e.drained(t) }, "waiting for poison terminated")
	if got, want := e.totals(t), wantTotals([]busapi.ReqStats{good}); got != want {
		t.Errorf("request_stats totals %+v, want %+v", got, want)
	}
}

// failingCH refuses the first inserts, as ClickHouse down would.
type failingCH struct {
	driver.Conn
	fail atomic.Int32
}

func (c *failingCH) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if c.fail.Add(-1) >= 0 {
		return nil, errors.New("clickhouse is down")
	}
	return c.Conn.PrepareBatch(ctx, query, opts...)
}

// TestReqStatsClickHouseFailure naks what it could not insert and stores it
// once when ClickHouse accepts inserts again.
func TestReqStatsClickHouseFailure(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	ch := &failingCH{Conn: e.ch}
	ch.fail.Store(3)
	var ms []busapi.ReqStats
	for i := range 12 {
		ms = append(ms, reqStatsMsg(i))
		e.publish(t, ms[i], true)
	}
	c := e.start(t, ingest.ReqStatsConfig{CH: ch, NakDelay: 20 * time.Millisecond, MaxNakDelay: 100 * time.Millisecond})
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Rows == 12 && e.drained(t) }, "waiting for stored after the outage")
	if s := c.Stats(); s.InsertFailures < 3 || s.Duplicates != 0 {
		t.Errorf("stats %+v, want at least 3 insert failures and no duplicates", s)
	}
	if got, want := e.totals(t), wantTotals(ms); got != want {
		t.Errorf("request_stats totals %+v, want %+v", got, want)
	}
}

// TestReqStatsBatches stores the windows of gateways' batches, binary as
// gateways send them and JSON as older ones did, once each, even when a
// batch comes again past the duplicate window; a window that cannot be
// stored is left out of its batch, a batch with none that can is
// terminated, and so is a batch off busapi.ReqStatsBatchSubject, a binary
// batch cut short and one of no windows.
func TestReqStatsBatches(t *testing.T) {
	t.Parallel()
	e := newReqStatsEnv(t)
	var ms []busapi.ReqStats
	for i := range 20 {
		ms = append(ms, reqStatsMsg(i))
	}
	short := reqStatsMsg(40)
	short.Latency = short.Latency[:3]
	batches := []busapi.ReqStatsBatch{
		{ID: "gw-1/1/0", Gateway: "gw-1", Stats: ms[:12]},
		{ID: "gw-1/1/1", Gateway: "gw-1", Stats: append([]busapi.ReqStats{short}, ms[12:]...)},
		{ID: "gw-1/1/2", Gateway: "gw-1", Stats: []busapi.ReqStats{short}},
	}
	e.publishRaw(t, busapi.ReqStatsBatchSubject, binaryStats(batches[0]), batches[0].ID, true)
	e.publishRaw(t, busapi.ReqStatsBatchSubject, mustJSON(t, batches[1]), batches[1].ID, true)
	e.publishRaw(t, busapi.ReqStatsBatchSubject, binaryStats(batches[2]), batches[2].ID, true)
	e.publishRaw(t, busapi.ReqStatsBatchSubject, binaryStats(batches[0]), "", false)
	astray := busapi.ReqStatsBatch{ID: "astray", Stats: []busapi.ReqStats{reqStatsMsg(41)}}
	e.publishRaw(t, busapi.ReqStatsSubject("fraud"), mustJSON(t, astray), "astray", true)
	e.publishRaw(t, busapi.ReqStatsSubject("fraud"), binaryStats(astray), "astray-bin", true)
	cut := binaryStats(busapi.ReqStatsBatch{ID: "cut", Stats: []busapi.ReqStats{reqStatsMsg(42)}})
	e.publishRaw(t, busapi.ReqStatsBatchSubject, cut[:len(cut)-1], "cut", true)
	e.publishRaw(t, busapi.ReqStatsBatchSubject, binaryStats(busapi.ReqStatsBatch{ID: "none"}), "none", true)
	c := e.start(t, ingest.ReqStatsConfig{})
	wait.Eventually(t, 30*time.Second, func() bool {
		s := c.Stats()
		return s.Rows == 20 && s.Duplicates == 12 && s.Poison == 5 && e.drained(t)
	},
		"waiting for the batches stored: %v", wait.Show(func() any { return c.Stats() }))
	if s := c.Stats(); s.Poison != 5 || s.Refused != 1 {
		t.Errorf("stats %+v, want 5 poison, 1 refused", s)
	}
	if got, want := e.totals(t), wantTotals(ms); got != want {
		t.Errorf("request_stats totals %+v, want %+v", got, want)
	}
}

// binaryStats is b as a gateway sends it.
func binaryStats(b busapi.ReqStatsBatch) []byte {
	var body busapi.StatsBody
	for i := range b.Stats {
		body.Add(&b.Stats[i])
	}
	return body.Message(b.ID, b.Gateway)
}
