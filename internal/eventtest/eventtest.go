// Package eventtest reads the events a test's code published through the
// outbox, as every reader of MP_EVENTS sees them: the relay sends what the
// database holds, then the events of one subject are read from the stream.
package eventtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/outbox"
)

// Stream reads the events of one subject from MP_EVENTS.
type Stream struct {
	relay   *outbox.Relay
	stream  jetstream.Stream
	cons    jetstream.Consumer
	subject string
	seen    uint64 // the stream sequence of the last event read
}

// New starts a NATS server for the test and reads subject's events from
// it, relaying pool's outbox.
func New(t *testing.T, pool *pgxpool.Pool, subject string) *Stream {
	t.Helper()
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(t.Context(), busapi.StreamEvents, jetstream.ConsumerConfig{FilterSubject: subject, AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), busapi.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(pool, js, slog.New(slog.DiscardHandler), quartz.NewMock(t))
	return &Stream{relay: relay, stream: stream, cons: cons, subject: subject}
}

// Next relays the outbox and returns the events that arrived since the
// last call.
func (s *Stream) Next(t *testing.T) []busapi.Event {
	t.Helper()
	if _, err := s.relay.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The stream holds an event before the relay's publish is acked, but
	// the consumer learns of it a moment later, so a fetch right after the
	// flush may find nothing: read up to the subject's last stored event.
	last := s.seen
	if m, err := s.stream.GetLastMsgForSubject(t.Context(), s.subject); err == nil {
		last = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	var out []busapi.Event
	var ferr error
	wait.Eventually(t, 10*time.Second, func() bool {
		batch, err := s.cons.FetchNoWait(100)
		if err != nil {
			ferr = err
			return true
		}
		for m := range batch.Messages() {
			var e busapi.Event
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				ferr = fmt.Errorf("event %s: %w", m.Data(), err)
				return true
			}
			out = append(out, e)
			if md, err := m.Metadata(); err == nil {
				s.seen = md.Sequence.Stream
			}
		}
		return s.seen >= last
	}, "events on %s up to stream sequence %d", s.subject, last)
	if ferr != nil {
		t.Fatal(ferr)
	}
	return out
}
