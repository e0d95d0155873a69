package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// DefaultStatsInterval is how often request statistics are published.
const DefaultStatsInterval = 5 * time.Second

// statsPruneAfter is how many windows without traffic a series is kept
// before it is forgotten, so that deleted versions do not pile up.
const statsPruneAfter = 60

// StatsCounters are the statistics publisher's running totals since the
// gateway was built.
type StatsCounters struct {
	// Published is the number of windows of an endpoint version
	// (busapi.ReqStats) JetStream acknowledged, and Messages the number of
	// messages (busapi.ReqStatsBatch) they went out in.
	Published, Messages uint64
	// PublishedRequests is the number of requests those windows counted.
	PublishedRequests uint64
	// Dropped is the number of windows given up because JetStream did not
	// acknowledge them in time (NATS slow or down).
	Dropped uint64
	// DroppedRequests is the number of requests those windows counted.
	DroppedRequests uint64
	// Pending is the number of requests counted in the current window,
	// which the next flush publishes: a test that waits for it knows every
	// request it sent was counted before it ends the window.
	Pending uint64
}

// statsPublisher is the part of JetStream the recorder publishes with.
type statsPublisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// statsKey names a series. Pinned requests (X-Model-Version) are a series
// of their own, so they never mix with the split the judge reads.
type statsKey struct {
	endpoint, version string
	pinned            bool
	// endpointID is the routing entry's endpoint id: an endpoint created
	// again under the same name is another series.
	endpointID int64
	// caller is the granted team whose requests the series counts; ""
	// for the owners' own, so chargeback splits an endpoint's cost by it.
	caller string
	// via is the graph whose step the series counts, for chargeback.
	via graphRef
}

// series counts one endpoint × version. Requests add under its mutex (held
// for a few additions, never across I/O); the flusher takes the window and
// zeroes it under the same mutex, so every request lands in exactly one
// window and each window's histograms sum to its count.
type series struct {
	mu   sync.Mutex
	dead bool // pruned: a request that finds it dead looks the series up again
	w    statsWindow

	team string
	idle int // windows without traffic; the flusher's alone
}

// statsWindow is what one series counted since the last flush.
type statsWindow struct {
	count      uint64
	errors     busapi.ErrorCounts
	latency    [busapi.LatencyBuckets]uint64
	latencySum float64
	streams    uint64
	ttft       [busapi.LatencyBuckets]uint64
	ttftSum    float64
	tpot       [busapi.LatencyBuckets]uint64
	tpotSum    float64
	tokens     uint64
	// overhead counts the gateway's own time of requests that reached a
	// replica.
	overhead    [busapi.LatencyBuckets]uint64
	overheadSum float64
	// slowest and sampled are the window's slowest and last sampled
	// request (set when their Kind is); failed its first failures, at
	// most maxFailed.
	slowest, sampled busapi.NotableRequest
	failed           []busapi.NotableRequest
}

// maxFailed bounds the failed requests a window keeps: the rest are
// counted, not named.
const maxFailed = busapi.MaxNotable - 2

// observation is one finished request as the statistics see it.
type observation struct {
	endpoint, team, version string
	status                  int
	duration                time.Duration
	// streamed is set for a relayed event stream; ttft is then the time to
	// its first event and tokens the completion tokens it carried.
	streamed bool
	ttft     time.Duration
	tokens   int
	// pinned is set when the caller chose the version (X-Model-Version).
	pinned bool
	// endpointID is the routing entry's endpoint id.
	endpointID int64
	// caller is the granted team that called; "" for the owners.
	caller string
	// via is the graph a step was made for; zero outside graphs.
	via graphRef
	// id, traceID and replica name the request for the explorer, end is
	// when it ended and upstream its time waiting on replicas; sampled is
	// set when its prediction was sampled. A request without an id (a
	// shadow copy) is never named.
	id, traceID, replica string
	end                  time.Time
	upstream             time.Duration
	sampled              bool
}

// notable is o as the explorer names it.
func (o *observation) notable(kind string) busapi.NotableRequest {
	return busapi.NotableRequest{Kind: kind, RequestID: o.id, TraceID: o.traceID, Replica: o.replica, Status: o.status,
		EndMS: o.end.UnixMilli(), LatencyMS: ms(o.duration), UpstreamMS: ms(o.upstream)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (w *statsWindow) add(o *observation) {
	w.count++
	switch s := o.status; {
	case s == 499:
		w.errors.Canceled++
	case s == 429:
		w.errors.Shed++
	case s == 504:
		w.errors.Timeout++
	case s >= 500:
		w.errors.Upstream++
	case s >= 400:
		w.errors.Client++
	}
	w.latency[busapi.LatencyBucket(o.duration)]++
	w.latencySum += ms(o.duration)
	if o.upstream > 0 {
		d := max(o.duration-o.upstream, 0)
		w.overhead[busapi.LatencyBucket(d)]++
		w.overheadSum += ms(d)
	}
	if o.id != "" {
		if w.slowest.Kind == "" || ms(o.duration) > w.slowest.LatencyMS {
			w.slowest = o.notable(busapi.NotableSlowest)
		}
		if o.status >= 400 && o.status != 499 && len(w.failed) < maxFailed {
			w.failed = append(w.failed, o.notable(busapi.NotableFailed))
		}
		if o.sampled {
			w.sampled = o.notable(busapi.NotableSampled)
		}
	}
	if !o.streamed {
		return
	}
	w.streams++
	w.ttft[busapi.LatencyBucket(o.ttft)]++
	w.ttftSum += ms(o.ttft)
	if o.tokens > 0 {
		w.tokens += uint64(o.tokens)
	}
	if o.tokens >= 2 {
		p := (o.duration - o.ttft) / time.Duration(o.tokens-1)
		w.tpot[busapi.LatencyBucket(p)]++
		w.tpotSum += ms(p)
	}
}

// statsRecorder counts requests per endpoint × version and publishes one
// busapi.ReqStats per series with traffic every interval. The request path
// only looks the series up in a copy-on-write map (no lock, no allocation)
// and adds under the series' mutex; publishing runs on the flusher's
// goroutine and never holds a series' mutex, so a slow NATS delays only the
// next flush. A window JetStream does not acknowledge in time is dropped and
// counted, never retried into a later window, so published sums never count
// a request twice.
type statsRecorder struct {
	gateway  string
	interval time.Duration
	clock    quartz.Clock
	pub      statsPublisher
	log      *slog.Logger

	series atomic.Pointer[map[statsKey]*series]
	mu     sync.Mutex // serialises writers of series

	flushMu sync.Mutex
	start   time.Time // start of the current window; under flushMu

	published, messages, publishedReqs, dropped, droppedReqs atomic.Uint64
}

func newStatsRecorder(gatewayID string, interval time.Duration, clock quartz.Clock, pub statsPublisher, log *slog.Logger) *statsRecorder {
	r := &statsRecorder{gateway: gatewayID, interval: interval, clock: clock, pub: pub, log: log, start: clock.Now()}
	m := map[statsKey]*series{}
	r.series.Store(&m)
	return r
}

// recordIn counts one finished request in s, the series of its endpoint ×
// version the caller kept from an earlier request, or, when s is nil or has
// been pruned since, in the series it looks up. It returns the series it
// counted in, for the caller to keep: the request path of a version then
// skips the map lookup (a hash of two strings) on every request.
func (r *statsRecorder) recordIn(s *series, o *observation) *series {
	for {
		if s == nil {
			k := statsKey{o.endpoint, o.version, o.pinned, o.endpointID, o.caller, o.via}
			if s = (*r.series.Load())[k]; s == nil {
				s = r.add(k, o.team)
			}
		}
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			s = nil
			continue
		}
		s.w.add(o)
		s.mu.Unlock()
		return s
	}
}

func (r *statsRecorder) add(k statsKey, team string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.series.Load()
	if s := old[k]; s != nil {
		return s
	}
	m := maps.Clone(old)
	s := &series{team: team}
	m[k] = s
	r.series.Store(&m)
	return s
}

// counters returns the running totals and what the current window holds.
func (r *statsRecorder) counters() StatsCounters {
	c := StatsCounters{Published: r.published.Load(), Messages: r.messages.Load(), PublishedRequests: r.publishedReqs.Load(),
		Dropped: r.dropped.Load(), DroppedRequests: r.droppedReqs.Load()}
	for _, s := range *r.series.Load() {
		s.mu.Lock()
		c.Pending += s.w.count
		s.mu.Unlock()
	}
	return c
}

// run flushes on every tick of t until ctx ends, and stops t. Each
// flush's publishes are bounded by one interval of wall-clock time, so
// that a slow NATS delays the next window at most by one.
func (r *statsRecorder) run(ctx context.Context, t *quartz.Ticker) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, r.interval)
			r.flush(fctx)
			cancel()
		}
	}
}

// flush ends the current window: it takes every series' counts and
// publishes those with traffic, as many a message as fit, each publish
// bounded by ctx. After the first failed publish the rest of the round is
// dropped at once, since NATS is evidently not answering.
func (r *statsRecorder) flush(ctx context.Context) {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	end := r.clock.Now("gateway", "stats")
	if !end.After(r.start) {
		end = r.start.Add(time.Millisecond) // window ids must differ
	}
	start := r.start
	r.start = end
	var msgs []busapi.ReqStats
	for k, s := range *r.series.Load() {
		s.mu.Lock()
		w := s.w
		s.w = statsWindow{}
		s.mu.Unlock()
		if w.count == 0 {
			if s.idle++; s.idle >= statsPruneAfter {
				r.prune(k, s)
			}
			continue
		}
		s.idle = 0
		msgs = append(msgs, w.message(r.gateway, k, s.team, start, end))
	}
	var (
		b      busapi.StatsBody
		in     []*busapi.ReqStats // the windows in b
		part   int
		failed bool
	)
	send := func() {
		if b.Len() == 0 {
			return
		}
		id := busapi.ReqStatsBatchID(r.gateway, start.UnixMilli(), part)
		part++
		msg := &nats.Msg{Subject: busapi.ReqStatsBatchSubject, Data: b.Message(id, r.gateway), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		if !failed {
			_, err := r.pub.PublishMsg(ctx, msg)
			if failed = err != nil; failed {
				r.log.Warn("gateway: request statistics dropped", slog.Int("windows", len(in)), slog.String("error", err.Error()))
			} else {
				r.messages.Add(1)
			}
		}
		for _, m := range in {
			if failed {
				r.dropped.Add(1)
				r.droppedReqs.Add(m.Count)
			} else {
				r.published.Add(1)
				r.publishedReqs.Add(m.Count)
			}
		}
		in = in[:0]
	}
	for i := range msgs {
		m := &msgs[i]
		if !b.Add(m) {
			send()
			b.Add(m) // the first always fits
		}
		in = append(in, m)
	}
	send()
}

// prune forgets a series that has had no traffic for a while, unless a
// request reached it meanwhile. The map without it is stored before the
// series is marked dead, so a request that finds it dead finds the new map.
func (r *statsRecorder) prune(k statsKey, s *series) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w.count != 0 {
		return
	}
	old := *r.series.Load()
	m := maps.Clone(old)
	delete(m, k)
	r.series.Store(&m)
	s.dead = true
}

func (w *statsWindow) message(gatewayID string, k statsKey, team string, start, end time.Time) busapi.ReqStats {
	return busapi.ReqStats{
		ID:          busapi.ReqStatsID(gatewayID, k.endpoint, k.version, start.UnixMilli()) + pinnedSuffix(k.pinned) + callerSuffix(k.caller) + graphSuffix(k.via),
		WindowStart: start.UnixMilli(), WindowEnd: end.UnixMilli(),
		Gateway: gatewayID, Endpoint: k.endpoint, Team: team, Version: k.version,
		Count: w.count, Errors: w.errors,
		Latency: w.latency[:], LatencySumMS: w.latencySum,
		Streams: w.streams, TTFT: w.ttft[:], TTFTSumMS: w.ttftSum,
		TPOT: w.tpot[:], TPOTSumMS: w.tpotSum, Tokens: w.tokens,
		Pinned: k.pinned, EndpointID: k.endpointID, CallerTeam: k.caller,
		ViaGraph: k.via.endpoint, ViaGraphVersion: k.via.version,
		Overhead: w.overhead[:], OverheadSumMS: w.overheadSum, Notable: w.notable(),
	}
}

// notable lists the window's slowest request, its last sampled one and
// its failures, nil when it named none.
func (w *statsWindow) notable() []busapi.NotableRequest {
	var out []busapi.NotableRequest
	for _, n := range []busapi.NotableRequest{w.slowest, w.sampled} {
		if n.Kind != "" {
			out = append(out, n)
		}
	}
	return append(out, w.failed...)
}

// callerSuffix keeps a granted team's series' message id apart from the
// owners' one of the same window.
func callerSuffix(team string) string {
	if team != "" {
		return "/caller=" + team
	}
	return ""
}

// graphSuffix keeps a graph's step series' message id apart from the
// direct calls' one of the same window.
func graphSuffix(via graphRef) string {
	if via.endpoint != "" {
		return "/graph=" + via.endpoint + "@" + via.version
	}
	return ""
}

// pinnedSuffix keeps a pinned series' message id apart from the unpinned
// one of the same window, which JetStream would drop as a duplicate.
func pinnedSuffix(pinned bool) string {
	if pinned {
		return "/pinned"
	}
	return ""
}

// streamTokens reads the completion tokens of one relayed event: the
// usage an OpenAI-style stream sends at its end, or else one per data event
// with content. final reports whether n is the final usage, which replaces
// the per-event count.
func streamTokens(ev []byte) (n int, final bool) {
	if !bytes.Contains(ev, []byte("data:")) || bytes.Contains(ev, []byte("[DONE]")) {
		return 0, false
	}
	if bytes.Contains(ev, []byte(`"completion_tokens"`)) {
		data := ev[bytes.Index(ev, []byte("data:"))+len("data:"):]
		var u struct {
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(bytes.TrimSpace(data), &u) == nil && u.Usage != nil {
			return u.Usage.CompletionTokens, true
		}
	}
	// A chat chunk's delta holds "content"; a completion chunk's choice
	// "text", empty on the closing chunk.
	if bytes.Contains(ev, []byte(`"content"`)) || bytes.Contains(ev, []byte(`"text"`)) && !bytes.Contains(ev, []byte(`"text":""`)) {
		return 1, false
	}
	return 0, false
}

// askUsage asks the replica to end a stream with its usage: the exact
// count of the tokens it generated, which counting events cannot give (a
// runtime sends an event with no text for a token that ends mid-character,
// and a last event with text that is no token). It returns the body to
// send and whether the caller had not asked for the usage itself, in which
// case the relay keeps that event from it. A body it cannot read goes on
// as it came.
func askUsage(body []byte) ([]byte, bool) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body, false
	}
	opts := map[string]json.RawMessage{}
	if raw := req["stream_options"]; len(raw) > 0 && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return body, false
		}
	}
	if string(opts["include_usage"]) == "true" {
		return body, false
	}
	opts["include_usage"] = json.RawMessage("true")
	var err error
	if req["stream_options"], err = json.Marshal(opts); err != nil {
		return body, false
	}
	out, err := json.Marshal(req)
	if err != nil {
		return body, false
	}
	return out, true
}

// usageOnly reports whether a stream's event carries no choice, only the
// usage (OpenAI's last chunk with include_usage).
func usageOnly(ev []byte) bool {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 {
		return false
	}
	var chunk struct {
		Choices []json.RawMessage `json:"choices"`
	}
	return json.Unmarshal(bytes.TrimSpace(ev[i+len("data:"):]), &chunk) == nil && len(chunk.Choices) == 0
}
