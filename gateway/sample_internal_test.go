package gateway

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/internal/wait"
)

// stuckNATS never acknowledges until the publish's context ends; entered,
// when set, receives a value as each publish starts waiting.
type stuckNATS struct{ entered chan struct{} }

func (s stuckNATS) PublishMsg(ctx context.Context, _ *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if s.entered != nil {
		select {
		case s.entered <- struct{}{}:
		default:
		}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSampleQueueFullDrops offers far more samples than the queue holds
// while NATS is stuck: offering never blocks, and what does not fit is
// dropped and counted.
func TestSampleQueueFullDrops(t *testing.T) {
	t.Parallel()
	pub := stuckNATS{entered: make(chan struct{}, 1)}
	s := newSampler(pub, slog.New(slog.DiscardHandler), 4)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	offer := func(i int) {
		s.offer(&pending{id: "r", endpoint: "e", version: "v", end: time.Now(), body: []byte(`{"instances":[]}`),
			answer: []byte(`{"predictions":[]}`), features: nil, tokens: i})
	}
	// The first sample is taken and its publish hangs: the sampler is
	// stuck until the test cancels it.
	offer(0)
	<-pub.entered

	// Offering the rest finishes while the publish hangs: an offer that
	// waited for room in the queue would never return.
	const n = 1000
	offered := make(chan struct{})
	go func() {
		defer close(offered)
		for i := 1; i < n; i++ {
			offer(i)
		}
	}()
	wait.Receive(t, 10*time.Second, offered, "offering %d samples while NATS is stuck did not return", n-1)
	// The queue holds 4; the one being published is not dropped yet.
	if c := s.counters(); c.Dropped != n-5 || c.Published != 0 {
		t.Fatalf("counters %+v; want %d dropped, none published", c, n-5)
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
