package gateway

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/serveapi"
)

// Sampling defaults.
const (
	// sampleQueue bounds the samples waiting to be published; beyond it
	// samples are dropped and counted.
	sampleQueue = 1024
	// samplePublishTimeout bounds one publish: NATS slower than this drops
	// the batch's samples.
	samplePublishTimeout = 2 * time.Second
	// maxSampledAnswer bounds the answer bytes kept for a sample; a longer
	// answer is relayed whole but not sampled.
	maxSampledAnswer = 1 << 20
	// sampleLinger is the longest a sample waits for others to share its
	// message (busapi.PredictionBatch bounds a message). A message per
	// sample cost the ingest more in NATS deliveries and acks than in
	// everything else it does (`modelplane bench ingest`). Like the
	// publish timeout it is wall-clock time: it paces a transport, and no
	// test waits on it.
	sampleLinger = 200 * time.Millisecond
)

// SampleCounters are the prediction sampler's running totals since the
// gateway was built.
type SampleCounters struct {
	// Offered is the number of samples handed to the sampler by requests
	// drawn for sampling; each ends up published or dropped.
	Offered uint64
	// Published is the number of samples JetStream acknowledged, and
	// Messages the number of messages (busapi.PredictionBatch) they went
	// out in.
	Published, Messages uint64
	// Dropped is the number of samples given up: queue full, NATS slow or
	// down, or an answer that could not be read.
	Dropped uint64
}

// pending is a sampled request as the request path hands it over: raw bytes
// only, parsed on the sampler's goroutine so that the request path pays for
// nothing but the draw and a channel send. The bodies never leave the
// sampler except as the features and outputs it extracts.
type pending struct {
	id, endpoint, team, version string
	end                         time.Time
	latency                     time.Duration
	llm                         bool
	features                    []string
	body                        []byte
	answer                      []byte
	tokens                      int
	streamed                    bool
	pinned                      bool
	endpointID                  int64
}

// sampler publishes sampled predictions to MP_PREDICTIONS from one
// goroutine, fed through a bounded queue: offer never blocks. Samples go
// out together, a busapi.PredictionBatch per message, sampleLinger after
// the first of a batch was taken or sooner when the batch is full.
type sampler struct {
	pub     statsPublisher
	log     *slog.Logger
	gateway string
	queue   chan *pending
	// linger is sampleLinger but in tests that must not race it.
	linger time.Duration

	offered, published, messages, dropped atomic.Uint64
}

func newSampler(pub statsPublisher, log *slog.Logger, gateway string, queue int) *sampler {
	return &sampler{pub: pub, log: log, gateway: gateway, queue: make(chan *pending, queue), linger: sampleLinger}
}

// draw reports whether a request to rt is sampled: with probability
// rt.SamplingRate, never when it is 0 or less.
func (s *sampler) draw(rate float64) bool {
	return s != nil && rate > 0 && (rate >= 1 || rand.Float64() < rate)
}

// offer queues p, or drops and counts it when the queue is full.
func (s *sampler) offer(p *pending) {
	s.offered.Add(1)
	select {
	case s.queue <- p:
	default:
		s.dropped.Add(1)
	}
}

func (s *sampler) counters() SampleCounters {
	return SampleCounters{Offered: s.offered.Load(), Published: s.published.Load(), Messages: s.messages.Load(), Dropped: s.dropped.Load()}
}

// run publishes queued samples until ctx ends. Then what is gathered and
// queued goes out in a last try bounded by samplePublishTimeout, so that a
// gateway's restart loses none of the samples waiting for their linger.
func (s *sampler) run(ctx context.Context) {
	var (
		b      busapi.SampleBody
		linger <-chan time.Time // nil while b is empty
	)
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), samplePublishTimeout)
			defer cancel()
			for {
				select {
				case p := <-s.queue:
					s.take(last, &b, p)
				default:
					s.publish(last, &b)
					return
				}
			}
		case p := <-s.queue:
			// A batch begun, by this sample or after a publish, lingers
			// from its first sample.
			if s.take(ctx, &b, p) || linger == nil {
				linger = nil
				if b.Len() > 0 {
					linger = time.After(s.linger)
				}
			}
		case <-linger:
			s.publish(ctx, &b)
			linger = nil
		}
	}
}

// take adds p's sample to b, publishing b first when the sample does not
// fit and after when b is full; it reports whether it published.
func (s *sampler) take(ctx context.Context, b *busapi.SampleBody, p *pending) bool {
	m, ok := p.sample()
	if !ok {
		s.dropped.Add(1)
		return false
	}
	published := false
	if !b.Add(&m) {
		s.publish(ctx, b)
		published = true
		b.Add(&m) // the first always fits
	}
	if b.Len() == busapi.PredictionBatchMaxSamples {
		s.publish(ctx, b)
		published = true
	}
	return published
}

// publish sends b as one message and empties it.
func (s *sampler) publish(ctx context.Context, b *busapi.SampleBody) {
	n := uint64(b.Len())
	if n == 0 {
		return
	}
	// The message id only has to be unique: request ids are the callers'
	// and a shadow's sample shares its request's.
	msg := &nats.Msg{Subject: busapi.PredictionBatchSubject, Data: b.Message(crand.Text(), s.gateway)}
	pctx, cancel := context.WithTimeout(ctx, samplePublishTimeout)
	_, err := s.pub.PublishMsg(pctx, msg)
	cancel()
	if err != nil {
		s.dropped.Add(n)
		// The error names no body content; samples are never logged.
		s.log.Debug("gateway: prediction samples dropped", slog.Uint64("samples", n), slog.String("error", err.Error()))
		return
	}
	s.published.Add(n)
	s.messages.Add(1)
}

// sample extracts the features and outputs of p; ok is false when the
// answer cannot be read.
func (p *pending) sample() (busapi.PredictionSample, bool) {
	m := busapi.PredictionSample{ID: p.id, Time: p.end.UnixMilli(), Endpoint: p.endpoint, Team: p.team,
		Version: p.version, LatencyMS: ms(p.latency), Pinned: p.pinned, EndpointID: p.endpointID}
	if p.llm {
		m.Tokens = p.tokens
		if !p.streamed {
			var a struct {
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal(p.answer, &a) != nil || a.Usage == nil {
				return m, false
			}
			m.Tokens = a.Usage.CompletionTokens
		}
		return m, true
	}
	var req serveapi.PredictRequest
	// Any runtime's answer: its predictions may be bare numbers or labels.
	var ans serveapi.PredictResponse[json.RawMessage]
	if json.Unmarshal(p.body, &req) != nil || json.Unmarshal(p.answer, &ans) != nil {
		return m, false
	}
	m.FeatureNames = p.features
	m.Instances = make([]busapi.SampleInstance, len(ans.Predictions))
	for i := range m.Instances {
		in := &m.Instances[i]
		in.Num = make([]float64, len(p.features))
		in.Str = make([]string, len(p.features))
		if i < len(req.Instances) {
			features(in, p.features, req.Instances[i])
		}
		in.Score, in.Label = output(ans.Predictions[i])
	}
	return m, true
}

// features fills in's values from one instance: an object is read by
// feature name, an array by position.
func features(in *busapi.SampleInstance, names []string, raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(names) == 0 || len(raw) == 0 {
		return
	}
	switch raw[0] {
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return
		}
		for i, n := range names {
			in.Num[i], in.Str[i] = value(obj[n])
		}
	case '[':
		var arr []json.RawMessage
		if json.Unmarshal(raw, &arr) != nil {
			return
		}
		for i := range names {
			if i < len(arr) {
				in.Num[i], in.Str[i] = value(arr[i])
			}
		}
	}
}

// value reads one scalar feature value.
func value(raw json.RawMessage) (float64, string) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return 0, ""
	}
	switch x := v.(type) {
	case float64:
		return x, ""
	case string:
		return 0, x
	case bool:
		if x {
			return 1, ""
		}
	}
	return 0, ""
}

// output reads one prediction: a number (score or regression value), a
// string (label), or an object with score (or probability, value) and label
// (or class).
func output(raw json.RawMessage) (float64, string) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0, ""
	}
	switch x := v.(type) {
	case float64:
		return x, ""
	case string:
		return 0, x
	case map[string]any:
		var score float64
		var label string
		for _, k := range []string{"score", "probability", "value", "prediction"} {
			if f, ok := x[k].(float64); ok {
				score = f
				break
			}
		}
		for _, k := range []string{"label", "class"} {
			if s, ok := x[k].(string); ok {
				label = s
				break
			}
		}
		return score, label
	}
	return 0, ""
}

// answerBuffer keeps up to maxSampledAnswer bytes of a relayed answer for
// its sample; past that it keeps nothing more and marks itself cut, but
// never fails the relay.
type answerBuffer struct {
	buf bytes.Buffer
	cut bool
}

func (b *answerBuffer) Write(p []byte) (int, error) {
	if !b.cut {
		if b.buf.Len()+len(p) > maxSampledAnswer {
			b.cut = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

// offerSample hands a sampled, successful request to the sampler. An
// answer too long to keep is not sampled.
func (g *Gateway) offerSample(c *call, k kind, end time.Time) {
	p := c.sampleOf
	p.id, p.endpoint, p.team, p.version = c.id, c.endpoint, c.owner, c.ver.name
	p.end, p.latency = end, end.Sub(c.start)
	p.llm, p.tokens, p.streamed, p.pinned, p.endpointID = k.llm() || c.llmAnswer, c.tokens, c.streamed, c.pinned, c.endpointID
	if p.answer == nil && !p.streamed {
		return
	}
	g.samples.offer(&p)
}
