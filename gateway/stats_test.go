package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// load is a counted load: request i of it has a status, a duration and, for
// the chat endpoint, a stream shape that follow from i alone.
func load(i int) observation {
	statuses := []int{200, 200, 200, 200, 400, 404, 429, 500, 502, 503, 504, 499}
	o := observation{endpoint: "fraud", team: "risk", version: []string{"v1", "v2"}[i%2],
		status: statuses[i%len(statuses)], duration: time.Duration(i%15000) * 700 * time.Microsecond}
	if i%3 == 0 {
		o.endpoint, o.team = "chat", "assist"
		o.streamed = true
		o.ttft = o.duration / 4
		o.tokens = i % 7 // 0 and 1 token streams have no TPOT
	}
	return o
}

// handles returns a version handle for every endpoint × version of the
// first n requests of the load, as the routing table holds them; requests
// are recorded through them, as the request path does.
func handles(n int) map[statsKey]*version {
	h := map[statsKey]*version{}
	for i := range n {
		o := load(i)
		if k := (statsKey{endpoint: o.endpoint, version: o.version}); h[k] == nil {
			h[k] = &version{name: o.version}
		}
	}
	return h
}

// record counts o through its handle in h.
func record(r *statsRecorder, h map[statsKey]*version, o *observation) {
	h[statsKey{endpoint: o.endpoint, version: o.version}].record(r, o)
}

type tally struct {
	count, streams, tpots, tokens uint64
	errors                        busapi.ErrorCounts
	latency, ttft, tpot           [busapi.LatencyBuckets]uint64
}

func (t *tally) addObservation(o observation) {
	var w statsWindow
	w.add(&o)
	t.addWindow(&w)
}

func (t *tally) addWindow(w *statsWindow) {
	t.count += w.count
	t.streams += w.streams
	t.tokens += w.tokens
	t.errors.Client += w.errors.Client
	t.errors.Upstream += w.errors.Upstream
	t.errors.Timeout += w.errors.Timeout
	t.errors.Shed += w.errors.Shed
	t.errors.Canceled += w.errors.Canceled
	for i := range w.latency {
		t.latency[i] += w.latency[i]
		t.ttft[i] += w.ttft[i]
		t.tpot[i] += w.tpot[i]
		t.tpots += w.tpot[i]
	}
}

func (t *tally) addMessage(m *busapi.ReqStats) {
	var w statsWindow
	w.count, w.streams, w.tokens, w.errors = m.Count, m.Streams, m.Tokens, m.Errors
	copy(w.latency[:], m.Latency)
	copy(w.ttft[:], m.TTFT)
	copy(w.tpot[:], m.TPOT)
	t.addWindow(&w)
}

func sum(h []uint64) (n uint64) {
	for _, v := range h {
		n += v
	}
	return n
}

// TestStatsExactAgainstCountedLoad records a counted load from several
// goroutines while windows are flushed to JetStream all along, and checks
// that the published messages add up to exactly the load: no request lost
// or counted twice at a window boundary, errors by class exact, every
// message's histograms summing to its count.
func TestStatsExactAgainstCountedLoad(t *testing.T) {
	t.Parallel()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	r := newStatsRecorder("gw-1", time.Second, clock, js, slog.New(slog.DiscardHandler))

	const n, workers = 30_000, 8
	want := map[statsKey]*tally{}
	for i := range n {
		o := load(i)
		k := statsKey{endpoint: o.endpoint, version: o.version}
		if want[k] == nil {
			want[k] = &tally{}
		}
		want[k].addObservation(o)
	}

	h := handles(n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				o := load(i)
				record(r, h, &o)
			}
		})
	}
	done := make(chan struct{})
	flushes := make(chan int)
	go func() {
		k := 0
		for {
			select {
			case <-done:
				flushes <- k
				return
			default:
				// A millisecond per window, so that every flush ends a
				// distinct one.
				clock.Advance(time.Millisecond)
				r.flush(ctx)
				k++
			}
		}
	}()
	wg.Wait()
	close(done)
	if k := <-flushes; k < 2 {
		t.Logf("only %d flushes during the load", k)
	}
	clock.Advance(time.Millisecond)
	r.flush(ctx)

	c := r.counters()
	if c.PublishedRequests != n || c.Dropped != 0 || c.DroppedRequests != 0 {
		t.Fatalf("counters %+v, want %d requests published and nothing dropped", c, n)
	}
	got := map[statsKey]*tally{}
	ids := map[string]bool{}
	for _, m := range readStats(t, js, int(c.Published)) {
		if ids[m.ID] {
			t.Errorf("message id %s published twice", m.ID)
		}
		ids[m.ID] = true
		if m.ID != busapi.ReqStatsID("gw-1", m.Endpoint, m.Version, m.WindowStart) || m.Gateway != "gw-1" {
			t.Errorf("message %s: id or gateway does not name its gateway, endpoint, version and window", m.ID)
		}
		if m.WindowEnd <= m.WindowStart {
			t.Errorf("message %s: window [%d, %d] is empty", m.ID, m.WindowStart, m.WindowEnd)
		}
		if wantTeam := map[string]string{"fraud": "risk", "chat": "assist"}[m.Endpoint]; m.Team != wantTeam {
			t.Errorf("message %s: team %q, want %q", m.ID, m.Team, wantTeam)
		}
		if s := sum(m.Latency); s != m.Count {
			t.Errorf("message %s: latency histogram sums to %d, count is %d", m.ID, s, m.Count)
		}
		if s := sum(m.TTFT); s != m.Streams {
			t.Errorf("message %s: TTFT histogram sums to %d, streams are %d", m.ID, s, m.Streams)
		}
		k := statsKey{endpoint: m.Endpoint, version: m.Version}
		if got[k] == nil {
			got[k] = &tally{}
		}
		got[k].addMessage(&m)
	}
	if len(got) != len(want) {
		t.Fatalf("messages for %d series, want %d", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		if g == nil {
			t.Errorf("%v: no message", k)
			continue
		}
		if *g != *w {
			t.Errorf("%v: published %+v, want %+v", k, *g, *w)
		}
	}
	// The load's own shape, so that the comparison above is not vacuous.
	var all tally
	for _, w := range want {
		all.count += w.count
		all.errors.Timeout += w.errors.Timeout
		all.tpots += w.tpots
	}
	if all.count != n || all.errors.Timeout != n/12 || all.tpots == 0 {
		t.Fatalf("load: %d requests, %d timeouts, %d TPOT samples; the test does not test what it says", all.count, all.errors.Timeout, all.tpots)
	}
}

// readStats reads MP_REQSTATS until it holds want windows, each message a
// batch on busapi.ReqStatsBatchSubject with its id as Nats-Msg-Id.
func readStats(t *testing.T, js jetstream.JetStream, want int) []busapi.ReqStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, busapi.StreamReqStats, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []busapi.ReqStats
	for len(out) < want {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d windows: %v", len(out), want, err)
		}
		b, err := busapi.DecodeReqStats(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if msg.Subject() != busapi.ReqStatsBatchSubject || msg.Headers().Get(jetstream.MsgIDHeader) != b.ID || len(b.Stats) == 0 {
			t.Errorf("batch %s of %d windows on %s with Nats-Msg-Id %q", b.ID, len(b.Stats), msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader))
		}
		out = append(out, b.Stats...)
	}
	return out
}

// stuckPublisher does not answer until the publish gives up, like a NATS
// that is down; then it starts working and keeps what it gets.
type stuckPublisher struct {
	mu      sync.Mutex
	stuck   bool
	got     []busapi.ReqStats
	entered chan struct{} // when set, receives a value per hung publish
}

func (p *stuckPublisher) PublishMsg(ctx context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.mu.Lock()
	stuck := p.stuck
	p.mu.Unlock()
	if stuck {
		if p.entered != nil {
			select {
			case p.entered <- struct{}{}:
			default:
			}
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	b, err := busapi.DecodeReqStats(msg.Data)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.got = append(p.got, b.Stats...)
	p.mu.Unlock()
	return &jetstream.PubAck{}, nil
}

// TestStatsDropWhenNATSIsDown checks that a window JetStream does not take
// is dropped and counted, that requests are recorded without waiting while
// a publish hangs, and that what they counted goes out with the next window
// once NATS answers again, never with the dropped one.
func TestStatsDropWhenNATSIsDown(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	pub := &stuckPublisher{stuck: true, entered: make(chan struct{}, 1)}
	r := newStatsRecorder("gw-1", time.Second, clock, pub, slog.New(slog.DiscardHandler))
	h := handles(1000)
	for i := range 300 {
		o := load(i)
		record(r, h, &o)
	}
	// The publish gives up when the test says so: NATS is down until then.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock.Advance(time.Second)
	flushed := make(chan struct{})
	go func() { r.flush(ctx); close(flushed) }()
	<-pub.entered

	// While the flush hangs on NATS, requests are recorded: all 1000 of
	// them are counted before the publish is let go. Recording that waited
	// for the publish would never finish.
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := range 1000 {
			o := load(i)
			record(r, h, &o)
		}
	}()
	isClosed := func(ch chan struct{}) func() bool {
		return func() bool {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		}
	}
	wait.Eventually(t, 10*time.Second, isClosed(recorded), "recording 1000 requests during a hung publish did not finish")
	if isClosed(flushed)() {
		t.Fatal("the flush returned before its publish was let go")
	}
	if c := r.counters(); c.Pending != 1000 {
		t.Fatalf("during the hung publish the next window holds %d requests, want 1000", c.Pending)
	}
	cancel()
	<-flushed
	c := r.counters()
	if c.Dropped != 4 || c.DroppedRequests != 300 || c.Published != 0 {
		t.Fatalf("after a hung publish: %+v, want 4 windows and 300 requests dropped", c)
	}

	pub.mu.Lock()
	pub.stuck = false
	pub.mu.Unlock()
	clock.Advance(time.Second)
	r.flush(context.Background())
	c = r.counters()
	if c.Published != 4 || c.PublishedRequests != 1000 || c.DroppedRequests != 300 {
		t.Fatalf("after NATS came back: %+v, want 4 windows and 1000 requests published", c)
	}
	var total uint64
	for _, m := range pub.got {
		total += m.Count
	}
	if total != 1000 {
		t.Errorf("published messages count %d requests, want 1000", total)
	}
}

// TestStatsPruneIdleSeries checks that a series without traffic is
// forgotten after statsPruneAfter windows and that a request arriving later
// is counted in a new series.
func TestStatsPruneIdleSeries(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	pub := &stuckPublisher{}
	r := newStatsRecorder("gw-1", time.Second, clock, pub, slog.New(slog.DiscardHandler))
	o := observation{endpoint: "e", version: "v1", status: 200, duration: time.Millisecond}
	v := &version{name: "v1"}
	v.record(r, &o)
	old := (*r.series.Load())[statsKey{endpoint: "e", version: "v1"}]
	for range statsPruneAfter + 1 {
		clock.Advance(time.Second)
		r.flush(context.Background())
	}
	if len(*r.series.Load()) != 0 || !old.dead {
		t.Fatalf("an idle series is kept after %d windows", statsPruneAfter+1)
	}
	// The handle still holds the dead series: the request finds the new one.
	v.record(r, &o)
	if s := v.series.Load(); s == nil || s == old || s.dead {
		t.Error("the handle kept the pruned series")
	}
	clock.Advance(time.Second)
	r.flush(context.Background())
	if c := r.counters(); c.PublishedRequests != 2 {
		t.Errorf("published %d requests, want 2", c.PublishedRequests)
	}
}

func TestStreamTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ev    string
		n     int
		final bool
	}{
		{`data: {"choices":[{"delta":{"role":"assistant","content":"Hi"}}]}` + "\n\n", 1, false},
		{`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n", 0, false},
		{`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":17,"total_tokens":20}}` + "\n\n", 17, true},
		// Text completion chunks: a token's text, then the closing chunk's
		// empty one.
		{`data: {"object":"text_completion","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}` + "\n\n", 1, false},
		{`data: {"object":"text_completion","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}` + "\n\n", 0, false},
		{"data: [DONE]\n\n", 0, false},
		{": keep-alive\n\n", 0, false},
		{`data: {"usage":"completion_tokens"` + "\n\n", 0, false},
	} {
		n, final := streamTokens([]byte(tc.ev))
		if n != tc.n || final != tc.final {
			t.Errorf("streamTokens(%q) = %d, %v; want %d, %v", tc.ev, n, final, tc.n, tc.final)
		}
	}
}

var _ statsPublisher = jetstream.JetStream(nil)

// TestLatencyBuckets checks the shared bucket bounds: increasing, at most 16
// percent apart, a value on a bound counted in that bound's bucket, and
// the seed documents' TPOT figures (22 ms, SLA 30 ms, 41 ms) in distinct
// buckets.
func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	b := busapi.LatencyBoundsUS()
	if len(b)+1 != busapi.LatencyBuckets {
		t.Fatalf("%d bounds, %d buckets", len(b), busapi.LatencyBuckets)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] || float64(b[i]) > 1.16*float64(b[i-1]) {
			t.Errorf("bound %d: %d µs after %d µs", i, b[i], b[i-1])
		}
	}
	for i, us := range b {
		d := time.Duration(us) * time.Microsecond
		if got := busapi.LatencyBucket(d); got != i {
			t.Errorf("LatencyBucket(%v) = %d, want %d", d, got, i)
		}
		if got := busapi.LatencyBucket(d + time.Nanosecond); got != i+1 {
			t.Errorf("LatencyBucket(%v) = %d, want %d", d+time.Nanosecond, got, i+1)
		}
	}
	if got := busapi.LatencyBucket(0); got != 0 {
		t.Errorf("LatencyBucket(0) = %d", got)
	}
	if got := busapi.LatencyBucket(time.Hour); got != busapi.LatencyBuckets-1 {
		t.Errorf("LatencyBucket(1h) = %d, want the +Inf bucket %d", got, busapi.LatencyBuckets-1)
	}
	p22, sla, p41 := busapi.LatencyBucket(22*time.Millisecond), busapi.LatencyBucket(30*time.Millisecond+time.Microsecond), busapi.LatencyBucket(41*time.Millisecond)
	if p22 >= sla || sla >= p41 {
		t.Errorf("22 ms, just over 30 ms and 41 ms fall in buckets %d, %d, %d; the judge could not tell them apart", p22, sla, p41)
	}
}

// TestStatsNamesNotableRequests: a window names its slowest request, its
// last sampled one and its first failures (bounded), each with its ids,
// replica, status and the split of its time; counts the gateway's own time
// of the requests that reached a replica; and never names a request
// without an id (a shadow copy).
func TestStatsNamesNotableRequests(t *testing.T) {
	t.Parallel()
	end := time.UnixMilli(1_700_000_000_000)
	var w statsWindow
	add := func(id string, status int, total, upstream time.Duration, sampled bool) {
		o := observation{endpoint: "fraud", team: "risk", version: "v1", status: status, duration: total, upstream: upstream,
			id: id, traceID: "trace-" + id, replica: "r-" + id, end: end, sampled: sampled}
		w.add(&o)
	}
	add("fast", 200, 2*time.Millisecond, 1500*time.Microsecond, false)
	add("slow", 200, 90*time.Millisecond, 87*time.Millisecond, false)
	add("sampled-1", 200, 3*time.Millisecond, 2*time.Millisecond, true)
	add("sampled-2", 200, 4*time.Millisecond, 3*time.Millisecond, true)
	add("", 500, time.Second, time.Second, true) // a shadow copy: counted, never named
	add("gone", 499, 5*time.Millisecond, 0, false)
	for i := range maxFailed + 3 {
		add(fmt.Sprintf("bad-%d", i), 503, time.Millisecond, 0, false)
	}
	m := w.message("gw-1", statsKey{endpoint: "fraud", version: "v1"}, "risk", end.Add(-5*time.Second), end)

	if got := sum(m.Overhead); got != 5 {
		t.Errorf("overhead histogram counts %d requests, want the 5 that reached a replica", got)
	}
	if want := 0.5 + 3 + 1 + 1 + 0; math.Abs(m.OverheadSumMS-want) > 1e-9 {
		t.Errorf("overhead sum = %v ms, want %v", m.OverheadSumMS, want)
	}
	var kinds []string
	byKind := map[string][]busapi.NotableRequest{}
	for _, n := range m.Notable {
		kinds = append(kinds, n.Kind)
		byKind[n.Kind] = append(byKind[n.Kind], n)
	}
	if len(m.Notable) != busapi.MaxNotable {
		t.Errorf("notable = %v, want %d (slowest, sampled, %d failures)", kinds, busapi.MaxNotable, maxFailed)
	}
	want := busapi.NotableRequest{Kind: busapi.NotableSlowest, RequestID: "slow", TraceID: "trace-slow", Replica: "r-slow", Status: 200,
		EndMS: end.UnixMilli(), LatencyMS: 90, UpstreamMS: 87}
	if s := byKind[busapi.NotableSlowest]; len(s) != 1 || s[0] != want {
		t.Errorf("slowest = %+v, want %+v", s, want)
	}
	if s := byKind[busapi.NotableSampled]; len(s) != 1 || s[0].RequestID != "sampled-2" {
		t.Errorf("sampled = %+v, want the last sampled request", s)
	}
	failed := byKind[busapi.NotableFailed]
	if len(failed) != maxFailed || failed[0].RequestID != "bad-0" || failed[0].Status != 503 {
		t.Errorf("failed = %+v, want the first %d 503s (a canceled request is no failure)", failed, maxFailed)
	}
	for _, n := range m.Notable {
		if n.RequestID == "" {
			t.Errorf("a request without an id is named: %+v", n)
		}
	}
}
