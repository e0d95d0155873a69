package gateway

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stuckNATS never acknowledges until the publish's context ends.
type stuckNATS struct{}

func (stuckNATS) PublishMsg(ctx context.Context, _ *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSampleQueueFullDrops offers far more samples than the queue holds
// while NATS is stuck: offering never blocks, and what does not fit is
// dropped and counted.
func TestSampleQueueFullDrops(t *testing.T) {
	t.Parallel()
	s := newSampler(stuckNATS{}, slog.New(slog.DiscardHandler), 4)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	start := time.Now()
	const n = 1000
	for i := range n {
		s.offer(&pending{id: "r", endpoint: "e", version: "v", end: time.Now(), body: []byte(`{"instances":[]}`),
			answer: []byte(`{"predictions":[]}`), features: nil, tokens: i})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("offering %d samples took %v", n, d)
	}
	// At most the queue and the one being published survive the offers.
	if c := s.counters(); c.Dropped < n-5 || c.Published != 0 {
		t.Fatalf("counters %+v; want at least %d dropped, none published", c, n-5)
	}
	cancel()
	<-done
	if c := s.counters(); c.Dropped != n {
		t.Fatalf("after stop: counters %+v; want all %d dropped", c, n)
	}
}

func TestDrawRateZeroNever(t *testing.T) {
	t.Parallel()
	s := newSampler(stuckNATS{}, slog.New(slog.DiscardHandler), 1)
	for range 100_000 {
		if s.draw(0) {
			t.Fatal("rate 0 sampled")
		}
	}
	if !s.draw(1) {
		t.Fatal("rate 1 did not sample")
	}
}
