package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// DefaultShadowWorkers bounds the mirrored requests in flight at once.
const DefaultShadowWorkers = 16

// ShadowHeader marks a mirrored request to the replica: nobody reads its
// answer, so a replica may skip work that only matters to a caller. A
// streamed shadow is still read to its end, so that its timings are real.
const ShadowHeader = "X-Modelplane-Shadow"

// mirrored is what a shadow call needs from the request that caused it; it
// holds copies, never the caller's request or writer.
type mirrored struct {
	k        kind
	id       string
	endpoint string
	// endpointID is the routing entry's endpoint id.
	endpointID int64
	team       string
	// caller is the calling team, sent in proto.TeamHeader.
	caller   string
	accept   string
	body     []byte
	stream   bool
	features []string
	sampling float64
	timeout  time.Duration
}

// mirror sends the request to each shadow version of rt it is drawn for,
// asynchronously. served is the version answering the caller (never
// mirrored to itself). It never blocks: when every shadow worker is busy
// the copy is dropped and counted.
func (g *Gateway) mirror(k kind, c *call, rt *route, served *version, body []byte, stream bool, accept string) {
	for _, s := range rt.shadows {
		if s == served || !(rand.Float64()*100 < s.shadow) {
			continue
		}
		select {
		case g.shadowSlots <- struct{}{}:
		default:
			g.shadowDropped.Add(1)
			continue
		}
		m := &mirrored{k: k, id: c.id, endpoint: c.endpoint, endpointID: rt.src.EndpointID, team: rt.src.Team, caller: c.team, accept: accept, body: body, stream: stream,
			features: rt.src.FeatureNames, sampling: rt.src.SamplingRate, timeout: rt.timeout}
		g.shadowWG.Add(1)
		go func() {
			defer func() { <-g.shadowSlots; g.shadowWG.Done() }()
			g.shadow(m, s)
		}()
	}
}

// shadow makes one mirrored call to a replica of s and records it in the
// request statistics of s, like a served request, so that the rollout judge
// can compare the shadow's latency and errors with the incumbent's. Its
// answer is read to the end and dropped (or sampled, tagged with its
// version).
func (g *Gateway) shadow(m *mirrored, s *version) {
	body, path, instances := m.body, m.k.upstreamPath(), 0
	if s.v2 != nil {
		var err error
		if body, instances, err = s.v2.Request(m.body, m.id); err != nil {
			g.shadowDropped.Add(1) // the caller's version took it; this one cannot
			return
		}
		path = s.v2.Path()
	}
	u, _ := s.acquire(nil, g.cfg.MaxOutstandingPerReplica, g.now().UnixNano())
	if u == nil {
		g.shadowDropped.Add(1)
		return
	}
	defer u.inFlight.Add(-1)
	g.shadowSent.Add(1)
	ctx, cancel := context.WithTimeout(g.bg, m.timeout)
	defer cancel()
	start := time.Now()
	o := observation{endpoint: m.endpoint, team: m.team, version: s.name, endpointID: m.endpointID}
	var answer []byte
	resp, err := g.sendShadow(ctx, path, u, body, m)
	if err == nil {
		o.status = resp.StatusCode
		if m.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			o.streamed = true
			err = consumeStream(resp.Body, start, &o)
		} else if s.v2 != nil {
			// The answer is translated as the caller's would be, so a
			// shadow whose answers do not fit counts as failing.
			answer, err = readAnswer(resp.Body, o.status == http.StatusOK)
			if err == nil && o.status == http.StatusOK && answer != nil { // nil: too long to keep
				if answer, err = s.v2.Response(answer, instances, s.name); err != nil {
					o.status, err = http.StatusBadGateway, nil
				}
				if !g.samples.draw(m.sampling) {
					answer = nil
				}
			}
		} else {
			answer, err = readAnswer(resp.Body, o.status == http.StatusOK && g.samples.draw(m.sampling))
		}
		resp.Body.Close()
		if err != nil && o.status < 500 {
			// The answer broke off: for the statistics that is the
			// replica's failure, as it would be for a caller.
			o.status = http.StatusBadGateway
		}
	}
	o.duration = time.Since(start)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.status = http.StatusGatewayTimeout
	case err != nil && g.bg.Err() != nil:
		return // the gateway is stopping; this is no measurement
	case resp == nil && dialFailed(err):
		o.status = http.StatusServiceUnavailable
	case resp == nil:
		o.status = http.StatusBadGateway
	}
	g.outcome(s, u, o.status >= 500 && o.status != http.StatusGatewayTimeout)
	s.record(g.stats, &o)
	if answer != nil || (o.streamed && o.status == http.StatusOK && g.samples.draw(m.sampling)) {
		g.samples.offer(&pending{id: m.id, endpoint: m.endpoint, endpointID: m.endpointID, team: m.team, version: s.name, end: start.Add(o.duration),
			latency: o.duration, llm: m.k.llm(), features: m.features, body: m.body, answer: answer,
			tokens: o.tokens, streamed: o.streamed})
	}
}

// sendShadow makes the mirrored call of m to replica u: on the unary
// client when the answer is not a stream, as the served call goes, so
// that the judge compares latencies taken the same way.
func (g *Gateway) sendShadow(ctx context.Context, path string, u *upstream, body []byte, m *mirrored) (*http.Response, error) {
	if g.unary != nil && !m.stream {
		req := unaryRequest{path: path, accept: m.accept, id: m.id, token: u.token, team: m.caller, extra: shadowExtra}
		if req.plain() {
			// No deadline of its own: the context's is what tells a
			// timeout (above).
			return g.unary.roundTrip(ctx, time.Time{}, u.addr, &req, body)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.scheme+u.addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if m.accept != "" {
		req.Header.Set("Accept", m.accept)
	}
	req.Header.Set("X-Request-Id", m.id)
	req.Header.Set(ShadowHeader, "1")
	upstreamHeaders(req.Header, u, m.caller)
	return g.replicaTransport(u).RoundTrip(req)
}

// shadowExtra is the header line that marks a mirrored call.
var shadowExtra = []string{ShadowHeader, "1"}

// consumeStream reads a shadow's event stream to its end, noting the time
// to the first event and the completion tokens.
func consumeStream(body io.Reader, start time.Time, o *observation) error {
	er := newEventReader(body)
	defer er.release()
	final := false
	for {
		ev, err := er.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if o.ttft == 0 {
			o.ttft = max(time.Since(start), 1)
		}
		if final {
			continue
		}
		n, f := streamTokens(ev)
		if f {
			o.tokens, final = n, true
		} else {
			o.tokens += n
		}
	}
}

// readAnswer reads a plain answer to its end; it keeps the bytes when keep
// is set and the answer is short enough to sample.
func readAnswer(body io.Reader, keep bool) ([]byte, error) {
	if !keep {
		_, err := io.Copy(io.Discard, body)
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(body, maxSampledAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSampledAnswer {
		_, err = io.Copy(io.Discard, body)
		return nil, err
	}
	return b, nil
}
