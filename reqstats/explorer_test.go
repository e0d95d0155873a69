package reqstats_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/reqstats"
)

// TestExplore: windows a gateway published to MP_REQSTATS, stored by the
// ingest consumer, come back as the endpoint's slowest requests (slowest
// first), its failures and sampled requests (newest first), each with its
// version, replica, ids and the split of its time, and the p99 of the
// gateways' overhead per version and for the endpoint; another endpoint,
// an endpoint id of the same name, and windows before the asked ones stay
// out.
func TestExplore(t *testing.T) {
	t.Parallel()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	ch := chtest.New(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := quartz.NewMock(t)
	clock.Set(now)

	oh := func(n uint64, overheadMS float64) []uint64 {
		h := make([]uint64, busapi.LatencyBuckets)
		h[busapi.LatencyBucket(time.Duration(overheadMS*float64(time.Millisecond)))] = n
		return h
	}
	req := func(kind, id, replica string, status int, end time.Time, latency, upstream float64) busapi.NotableRequest {
		return busapi.NotableRequest{Kind: kind, RequestID: id, TraceID: "trace-" + id, Replica: replica, Status: status,
			EndMS: end.UnixMilli(), LatencyMS: latency, UpstreamMS: upstream}
	}
	win := func(endpoint string, endpointID int64, version string, start time.Time, overhead []uint64, notable ...busapi.NotableRequest) busapi.ReqStats {
		m := busapi.ReqStats{WindowStart: start.UnixMilli(), WindowEnd: start.Add(5 * time.Second).UnixMilli(), Gateway: "gw-1",
			Endpoint: endpoint, Team: "risk", Version: version, Count: 100, EndpointID: endpointID,
			Latency: make([]uint64, busapi.LatencyBuckets), Overhead: overhead, Notable: notable}
		m.ID = busapi.ReqStatsID(m.Gateway, endpoint, version, m.WindowStart) + fmt.Sprintf("/%d", endpointID)
		return m
	}
	t0 := now.Add(-10 * time.Minute)
	msgs := []busapi.ReqStats{
		// v1: 99 requests at ~1 ms of overhead and 1 at ~4 ms.
		win("fraud", 7, "v1", t0, oh(99, 1),
			req(busapi.NotableSlowest, "a", "r-1", 200, t0.Add(time.Second), 40, 38),
			req(busapi.NotableFailed, "b", "r-1", 503, t0.Add(2*time.Second), 12, 11.5)),
		win("fraud", 7, "v1", t0.Add(5*time.Second), oh(1, 4),
			req(busapi.NotableSlowest, "c", "r-2", 200, t0.Add(6*time.Second), 90, 86),
			req(busapi.NotableSampled, "d", "r-2", 200, t0.Add(7*time.Second), 3, 2)),
		// v2 has no overhead histogram (a gateway before it) and a failure
		// that never reached a replica.
		win("fraud", 7, "v2", t0.Add(10*time.Second), nil,
			req(busapi.NotableSlowest, "e", "r-9", 200, t0.Add(11*time.Second), 20, 19),
			req(busapi.NotableFailed, "f", "", 429, t0.Add(12*time.Second), 0.2, 0)),
		// Out: before the window, another endpoint, the same name's old id.
		win("fraud", 7, "v1", now.Add(-2*time.Hour), oh(5, 50), req(busapi.NotableSlowest, "old", "r-1", 200, now.Add(-2*time.Hour), 900, 1)),
		win("chat", 8, "v1", t0, oh(5, 50), req(busapi.NotableSlowest, "chat", "r-5", 200, t0, 800, 1)),
		win("fraud", 3, "v1", t0, oh(5, 50), req(busapi.NotableFailed, "gone", "r-0", 500, t0, 700, 1)),
	}
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		msg := &nats.Msg{Subject: busapi.ReqStatsSubject(m.Endpoint), Data: b, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, m.ID)
		if _, err := js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ingest.NewReqStats(ingest.ReqStatsConfig{JS: js, CH: ch, MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	wait.Eventually(t, 30*time.Second, func() bool { return c.Stats().Rows == uint64(len(msgs)) }, "ingest stored %+v", wait.Show(func() any { return c.Stats() }))

	got, err := reqstats.NewReader(ch, clock).Explore(t.Context(), "fraud", 7, 60)
	if err != nil {
		t.Fatal(err)
	}
	if ids(got.Slowest) != "[c a e]" || ids(got.Failed) != "[f b]" || ids(got.Sampled) != "[d]" {
		t.Errorf("slowest %s, failed %s, sampled %s; want [c a e], [f b], [d]", ids(got.Slowest), ids(got.Failed), ids(got.Sampled))
	}
	want := reqstats.Request{At: t0.Add(6 * time.Second), RequestID: "c", TraceID: "trace-c", Version: "v1", Replica: "r-2", Status: 200,
		LatencyMS: 90, UpstreamMS: 86, OverheadMS: 4}
	if len(got.Slowest) > 0 && got.Slowest[0] != want {
		t.Errorf("slowest = %+v, want %+v", got.Slowest[0], want)
	}
	if len(got.Failed) > 0 && (got.Failed[0].Status != 429 || got.Failed[0].OverheadMS != 0 || got.Failed[0].Version != "v2") {
		t.Errorf("failed before any replica = %+v, want v2's 429 with no overhead split", got.Failed[0])
	}
	if len(got.Overhead) != 2 || got.Overhead[0].Version != "v1" || got.Overhead[0].Requests != 100 || got.Overhead[1].Requests != 0 {
		t.Fatalf("overhead = %+v; want v1 over 100 requests and v2 with none measured", got.Overhead)
	}
	// p99 of 99 requests near 1 ms and one near 4 ms falls in the 1 ms
	// bucket's range; the endpoint's is v1's, v2 measured nothing.
	if p := got.Overhead[0].P99MS; p <= 0.9 || p > 1.1 || got.All.P99MS != p || got.All.Requests != 100 {
		t.Errorf("v1 p99 overhead %v ms, endpoint %+v; want about 1 ms for both", p, got.All)
	}
	if _, err := reqstats.NewReader(ch, clock).Explore(t.Context(), "fraud", 7, reqstats.MaxMinutes+1); err == nil {
		t.Error("a window past MaxMinutes was read")
	}
}

// TestExploreKeepsEachKindsOwnOrderAndLimit: the three kinds are read in one
// scan, yet each keeps its own first ExplorerLimit: 25 failures leave the
// 20 newest, and they do not crowd out the slowest requests or the
// sampled one, which keep their own order.
func TestExploreKeepsEachKindsOwnOrderAndLimit(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := quartz.NewMock(t)
	clock.Set(now)
	t0 := now.Add(-5 * time.Minute)
	var notable []busapi.NotableRequest
	for i := range 25 {
		notable = append(notable, busapi.NotableRequest{Kind: busapi.NotableFailed, RequestID: fmt.Sprintf("f%02d", i), Status: 503,
			EndMS: t0.Add(time.Duration(i) * time.Second).UnixMilli(), LatencyMS: float64(1000 + i)})
	}
	notable = append(notable,
		busapi.NotableRequest{Kind: busapi.NotableSlowest, RequestID: "s-early-slow", Status: 200, EndMS: t0.UnixMilli(), LatencyMS: 90},
		busapi.NotableRequest{Kind: busapi.NotableSlowest, RequestID: "s-late-fast", Status: 200, EndMS: t0.Add(time.Minute).UnixMilli(), LatencyMS: 30},
		busapi.NotableRequest{Kind: busapi.NotableSampled, RequestID: "p", Status: 200, EndMS: t0.UnixMilli(), LatencyMS: 2})
	m := busapi.ReqStats{WindowStart: t0.UnixMilli(), WindowEnd: t0.Add(5 * time.Second).UnixMilli(), Gateway: "gw-1",
		Endpoint: "fraud", Team: "risk", Version: "v1", Count: 28, EndpointID: 7,
		Latency: make([]uint64, busapi.LatencyBuckets), Overhead: make([]uint64, busapi.LatencyBuckets), Notable: notable}
	m.ID = busapi.ReqStatsID(m.Gateway, m.Endpoint, m.Version, m.WindowStart)
	if err := ingest.StoreReqStats(t.Context(), ch, []busapi.ReqStats{m}); err != nil {
		t.Fatal(err)
	}
	got, err := reqstats.NewReader(ch, clock).Explore(t.Context(), "fraud", 7, 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Failed) != reqstats.ExplorerLimit || got.Failed[0].RequestID != "f24" || got.Failed[reqstats.ExplorerLimit-1].RequestID != "f05" {
		t.Errorf("failed %s; want the %d newest, f24 down to f05", ids(got.Failed), reqstats.ExplorerLimit)
	}
	if ids(got.Slowest) != "[s-early-slow s-late-fast]" || ids(got.Sampled) != "[p]" {
		t.Errorf("slowest %s, sampled %s; want [s-early-slow s-late-fast], [p]", ids(got.Slowest), ids(got.Sampled))
	}
}

// ids lists the requests' ids in order.
func ids(rs []reqstats.Request) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.RequestID)
	}
	return fmt.Sprint(out)
}
