package outbox_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/outbox"
)

func TestRelayPublishesInOrderOnceAndDeletes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	q := db.New(pool)
	subject := busapi.KVSubject(busapi.BucketDesired, "node-a")
	for _, payload := range []string{`{"generation":1}`, `{"generation":2}`, `{"generation":3}`} {
		if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: subject, Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	relay := outbox.NewRelay(pool, js, slog.New(slog.DiscardHandler), quartz.NewMock(t))
	if n, err := relay.Flush(ctx); err != nil || n != 3 {
		t.Fatalf("flush = %d, %v; want 3", n, err)
	}
	e, err := kv.Get(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != `{"generation": 3}` && string(e.Value()) != `{"generation":3}` {
		t.Fatalf("kv value = %s, want the last row", e.Value())
	}
	rev := e.Revision()
	if n, _ := relay.Flush(ctx); n != 0 {
		t.Fatalf("second flush published %d rows, want 0", n)
	}

	// A relay that died before marking its rows publishes them again: the
	// outbox id as Nats-Msg-Id makes JetStream store them once.
	if _, err := pool.Exec(ctx, "UPDATE outbox SET published_at = NULL"); err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Flush(ctx); err != nil || n != 3 {
		t.Fatalf("republish = %d, %v", n, err)
	}
	if e, _ := kv.Get(ctx, "node-a"); e.Revision() != rev {
		t.Fatalf("revision moved from %d to %d: a republished row was stored again", rev, e.Revision())
	}

	// A JSON null deletes the key.
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: subject, Payload: []byte("null")}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "node-a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get after delete: %v, want ErrKeyNotFound", err)
	}
}

func TestRelayKeepsRowsWhenNATSIsDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	srv, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	q := db.New(pool)
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketRoutes, "ep"), Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(pool, js, slog.New(slog.DiscardHandler), quartz.NewMock(t))
	if n, err := relay.Flush(ctx); err == nil || n != 0 {
		t.Fatalf("flush with NATS down = %d, %v; want an error and nothing marked", n, err)
	}
	rows, err := q.OutboxPending(ctx, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("pending = %d, %v; want the row kept", len(rows), err)
	}
}

func TestRelayPassesOverARowNATSRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	q := db.New(pool)
	// Over the server's maximum payload: no retry can publish it.
	huge := []byte(`{"pad":"` + strings.Repeat("x", int(nc.MaxPayload())+1) + `"}`)
	big, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketRoutes, "big"), Payload: huge})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketRoutes, "next"), Payload: []byte(`{"generation":1}`)}); err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(pool, js, slog.New(slog.DiscardHandler), quartz.NewMock(t))
	if n, err := relay.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("flush = %d, %v; want the row after the refused one published", n, err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "next"); err != nil {
		t.Fatalf("the row after the refused one: %v", err)
	}
	if _, err := kv.Get(ctx, "big"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the refused row: %v, want nothing stored", err)
	}
	var reason string
	if err := pool.QueryRow(ctx, "SELECT error FROM outbox WHERE id = $1 AND published_at IS NOT NULL", big).Scan(&reason); err != nil || !strings.Contains(reason, "maximum payload") {
		t.Fatalf("refused row's error = %q, %v; want the payload limit recorded", reason, err)
	}
	// The daily sweep keeps refused rows for operators.
	if n, err := q.OutboxDeletePublished(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep deleted %d, %v; want only the published row", n, err)
	}
}
