package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
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
	s := newSampler(pub, slog.New(slog.DiscardHandler), "gw", 4)
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
	s := newSampler(stuckNATS{}, slog.New(slog.DiscardHandler), "gw", 1)
	for range 100_000 {
		if s.draw(0) {
			t.Fatal("rate 0 sampled")
		}
	}
	if !s.draw(1) {
		t.Fatal("rate 1 did not sample")
	}
}

// recordingNATS acknowledges every publish and keeps its message.
type recordingNATS struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (r *recordingNATS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return &jetstream.PubAck{}, nil
}

func (r *recordingNATS) batches(t *testing.T) []busapi.PredictionBatch {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []busapi.PredictionBatch
	for _, m := range r.msgs {
		if m.Subject != busapi.PredictionBatchSubject {
			t.Fatalf("published on %s, want %s", m.Subject, busapi.PredictionBatchSubject)
		}
		if len(m.Data) > busapi.BatchMaxBytes {
			t.Fatalf("a message of %d bytes, over %d", len(m.Data), busapi.BatchMaxBytes)
		}
		b, err := busapi.DecodeSamples(m.Data)
		if err != nil {
			t.Fatalf("message %q: %v", m.Data, err)
		}
		out = append(out, b)
	}
	return out
}

// TestSamplesBatched queues more samples than a message holds, by count
// and by bytes: they go out in full messages first and the rest at the
// stop, every sample once, in the order offered.
func TestSamplesBatched(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		feature string // the value of each sample's one feature
		n       int
	}{
		{"by count", "x", busapi.PredictionBatchMaxSamples + 5},
		{"by bytes", strings.Repeat("y", 10_000), 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pub := &recordingNATS{}
			s := newSampler(pub, slog.New(slog.DiscardHandler), "gw-7", tc.n)
			// No linger within the test: on a loaded machine it passed
			// before a full message was gathered. The rest goes out at
			// the stop.
			s.linger = time.Hour
			for i := range tc.n {
				s.offer(&pending{id: fmt.Sprintf("r%d", i), endpoint: "e", version: "v", end: time.Now(), features: []string{"f"},
					body: fmt.Appendf(nil, `{"instances":[{"f":%q}]}`, tc.feature), answer: []byte(`{"predictions":[0.5]}`)})
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { s.run(ctx); close(done) }()
			// The full messages, then the rest at the stop.
			full := uint64(busapi.PredictionBatchMaxSamples)
			if tc.name == "by bytes" {
				full = uint64(tc.n / 2)
			}
			wait.Eventually(t, 10*time.Second, func() bool { return s.counters().Published >= full }, "full messages not published: %+v",
				wait.Show(func() any { return s.counters() }))
			cancel()
			<-done
			if c := s.counters(); c.Published != uint64(tc.n) {
				t.Fatalf("%+v after the stop, want all %d published", c, tc.n)
			}
			batches := pub.batches(t)
			if c := s.counters(); c.Messages != uint64(len(batches)) || c.Dropped != 0 || len(batches) < 2 {
				t.Fatalf("counters %+v for %d messages; want more than one message, none dropped", c, len(batches))
			}
			next, ids := 0, map[string]bool{}
			for i, b := range batches {
				if b.Gateway != "gw-7" || b.ID == "" || ids[b.ID] {
					t.Fatalf("batch %d: gateway %q, id %q (seen %v)", i, b.Gateway, b.ID, ids[b.ID])
				}
				ids[b.ID] = true
				if i < len(batches)-1 && tc.name == "by count" && len(b.Samples) != busapi.PredictionBatchMaxSamples {
					t.Fatalf("batch %d holds %d samples, want %d", i, len(b.Samples), busapi.PredictionBatchMaxSamples)
				}
				for _, smp := range b.Samples {
					if want := fmt.Sprintf("r%d", next); smp.ID != want || smp.Instances[0].Str[0] != tc.feature {
						t.Fatalf("sample %q, want %s with its feature", smp.ID, want)
					}
					next++
				}
			}
			if next != tc.n {
				t.Fatalf("%d samples in the messages, want %d", next, tc.n)
			}
		})
	}
}

// TestSamplesFlushedAtStop stops the sampler while samples wait for their
// linger and more are queued: every one goes out in the last try.
func TestSamplesFlushedAtStop(t *testing.T) {
	t.Parallel()
	pub := &recordingNATS{}
	s := newSampler(pub, slog.New(slog.DiscardHandler), "gw-7", 16)
	// No linger within the test: on a loaded machine sampleLinger could
	// pass before the stop, which would then flush nothing.
	s.linger = time.Hour
	offer := func(i int) {
		s.offer(&pending{id: fmt.Sprintf("r%d", i), endpoint: "e", version: "v", end: time.Now(), body: []byte(`{"instances":[]}`),
			answer: []byte(`{"predictions":[]}`)})
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	offer(0)
	// The first is taken and waits for its linger.
	wait.Eventually(t, 10*time.Second, func() bool { return len(s.queue) == 0 }, "the first sample not taken")
	for i := 1; i < 6; i++ {
		offer(i)
	}
	cancel()
	<-done
	if c := s.counters(); c.Published != 6 || c.Dropped != 0 {
		t.Fatalf("counters %+v; want all 6 published at stop", c)
	}
	batches := pub.batches(t)
	if len(batches) != 1 || len(batches[0].Samples) != 6 {
		t.Fatalf("%d messages, want one of the 6 samples sent at the stop", len(batches))
	}
}
