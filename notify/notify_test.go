package notify_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/field"
	"modelplane/internal/pgtest"
	"modelplane/notify"
	"modelplane/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a team "risk" with an admin, a server key, and a sender on a
// mock clock.
type fixture struct {
	pool   *pgxpool.Pool
	clock  *quartz.Mock
	keys   *notify.Keyring
	policy *egress.Policy
	admin  *auth.Principal
	hooks  *notify.Webhooks
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.New(t)
	tm, err := db.New(pool).TeamCreate(t.Context(), db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := notify.ParseKeyring(notify.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	clock.Set(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	policy := &egress.Policy{Hosts: []string{"127.0.0.1"}, AllowLoopback: true}
	f := &fixture{pool: pool, clock: clock, keys: keys, policy: policy,
		admin: &auth.Principal{Name: "risk-admin@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleAdmin}}}}
	f.hooks = notify.NewWebhooks(pool, keys, policy, clock, nil)
	return f
}

func (f *fixture) sender(backoff ...time.Duration) *notify.Sender {
	return notify.NewSender(notify.SenderConfig{Pool: f.pool, Keys: f.keys, Egress: f.policy, Clock: f.clock,
		Log: slog.New(slog.DiscardHandler), Backoff: backoff, Timeout: 5 * time.Second})
}

// event commits a rollback event of team risk the way a rollout does.
func (f *fixture) event(t *testing.T) busapi.Event {
	t.Helper()
	ev := busapi.Event{Kind: "rollout", ID: 7, Name: "fraud-scoring", Type: "state", State: "rolled_back",
		Message: "rolled back: p99 latency 412 ms > 250 ms", At: f.clock.Now()}
	if err := db.InTx(t.Context(), f.pool, func(q *db.Queries) error { return outbox.Event(t.Context(), q, "risk", ev) }); err != nil {
		t.Fatal(err)
	}
	return ev
}

// receiver answers each POST with the next status of statuses (the last
// one after), recording every request.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
	srv      *httptest.Server
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.got)
		r.got, r.bodies = append(r.got, req), append(r.bodies, body)
		r.mu.Unlock()
		w.WriteHeader(r.statuses[min(n, len(r.statuses)-1)])
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (f *fixture) delivery(t *testing.T, webhook int64) notify.Delivery {
	t.Helper()
	ds, err := f.hooks.Deliveries(t.Context(), f.admin, webhook, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 {
		t.Fatalf("deliveries = %+v, want one", ds)
	}
	return ds[0]
}

// verifyWithPython checks a delivery's signature the way a receiver in
// another language would: Python's hmac over "<timestamp>.<body>".
func verifyWithPython(t *testing.T, secret string, req *http.Request, body []byte) {
	t.Helper()
	script := `import hmac, hashlib, sys
secret, ts, sig = sys.argv[1], sys.argv[2], sys.argv[3]
body = sys.stdin.buffer.read()
want = "v1=" + hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
sys.exit(0 if hmac.compare_digest(want, sig) else 1)`
	cmd := exec.Command("/usr/bin/python3", "-c", script, secret, req.Header.Get(notify.HeaderTimestamp), req.Header.Get(notify.HeaderSignature))
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("python hmac refuses signature %s: %v %s", req.Header.Get(notify.HeaderSignature), err, out)
	}
}

// TestWebhookRetriedSignedDelivered: a receiver that fails twice gets the
// delivery three times, each signed with the webhook's secret (checked by
// Python's hmac), on the backoff's schedule, and it ends delivered.
func TestWebhookRetriedSignedDelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rcv := newReceiver(t, 500, 503, 200)
	wh, secret, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: rcv.srv.URL + "/hook", EventTypes: []string{"rollout.state"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := f.event(t)
	s := f.sender(10*time.Second, 30*time.Second)
	send := func(want int) {
		t.Helper()
		n, err := s.SendDue(t.Context())
		if err != nil || n != want {
			t.Fatalf("SendDue = %d, %v; want %d sent", n, err, want)
		}
	}
	send(2) // the webhook's, and Alertmanager's (skipped: none configured)
	if d := f.delivery(t, wh.ID); d.State != "pending" || d.LastStatus != 500 || !d.NextAt.Equal(f.clock.Now().Add(10*time.Second)) {
		t.Fatalf("after a 500: %+v; want pending, next try in 10 s", d)
	}
	send(0) // not due yet
	f.clock.Advance(10 * time.Second)
	send(1)
	f.clock.Advance(29 * time.Second)
	send(0)
	f.clock.Advance(time.Second)
	send(1)
	d := f.delivery(t, wh.ID)
	if d.State != "delivered" || d.Attempts != 3 || d.LastStatus != 200 || d.Event.State != "rolled_back" {
		t.Fatalf("after 500, 503, 200: %+v; want delivered after 3 attempts", d)
	}
	if len(rcv.got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(rcv.got))
	}
	for i, req := range rcv.got {
		if req.Header.Get(notify.HeaderID) != strconv.FormatInt(d.ID, 10) || req.Header.Get(notify.HeaderType) != "rollout.state" {
			t.Errorf("request %d headers %v; want the same delivery id on every try", i, req.Header)
		}
		verifyWithPython(t, secret, req, rcv.bodies[i])
		var b notify.Body
		if err := json.Unmarshal(rcv.bodies[i], &b); err != nil || b.Team != "risk" || b.Event.Message != ev.Message {
			t.Errorf("request %d body %s: %v", i, rcv.bodies[i], err)
		}
	}
	// A signature under another secret is refused by the same check.
	tampered := append([]byte(nil), rcv.bodies[0]...)
	tampered[len(tampered)-2] ^= 1
	req := rcv.got[0].Clone(t.Context())
	script := exec.Command("/usr/bin/python3", "-c", `import hmac, hashlib, sys
want = "v1=" + hmac.new(sys.argv[1].encode(), sys.argv[2].encode() + b"." + sys.stdin.buffer.read(), hashlib.sha256).hexdigest()
sys.exit(0 if hmac.compare_digest(want, sys.argv[3]) else 1)`, secret, req.Header.Get(notify.HeaderTimestamp), req.Header.Get(notify.HeaderSignature))
	script.Stdin = strings.NewReader(string(tampered))
	if err := script.Run(); err == nil {
		t.Error("a tampered body verified")
	}
}

// TestWebhookDeadThenRedelivered: after its last try a delivery is dead
// and nothing sends it again, until an admin redelivers it.
func TestWebhookDeadThenRedelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rcv := newReceiver(t, 503, 503, 200)
	wh, _, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: rcv.srv.URL, EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	f.event(t)
	s := f.sender(10 * time.Second)
	for range 2 {
		if _, err := s.SendDue(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(10 * time.Second)
	}
	d := f.delivery(t, wh.ID)
	if d.State != "dead" || d.Attempts != 2 {
		t.Fatalf("after two 503s with one retry: %+v; want dead", d)
	}
	f.clock.Advance(time.Hour)
	if n, _ := s.SendDue(t.Context()); n != 0 {
		t.Fatalf("a dead delivery was sent again")
	}
	viewer := &auth.Principal{Name: "viewer@example.com", Teams: []auth.Membership{{TeamID: f.admin.Teams[0].TeamID, Team: "risk", Role: auth.RoleViewer}}}
	if err := f.hooks.Redeliver(t.Context(), viewer, wh.ID, d.ID); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("viewer redelivers: %v, want forbidden", err)
	}
	if err := f.hooks.Redeliver(t.Context(), f.admin, wh.ID, d.ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.SendDue(t.Context()); n != 1 {
		t.Fatalf("redelivered delivery not sent")
	}
	if d := f.delivery(t, wh.ID); d.State != "delivered" || len(rcv.got) != 3 {
		t.Fatalf("after redelivery: %+v, %d requests; want delivered on the third", d, len(rcv.got))
	}
}

// TestHangingReceiverHoldsNothingUp: the change that raises an event
// commits at once whatever its receiver does, and a receiver that never
// answers costs its delivery one timed-out try, recorded for a retry.
func TestHangingReceiverHoldsNothingUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(func() { close(release); hang.Close() })
	wh, _, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: hang.URL, EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	f.event(t) // commits: the event and its delivery are rows, nothing is sent inside the change
	s := notify.NewSender(notify.SenderConfig{Pool: f.pool, Keys: f.keys, Egress: f.policy, Clock: f.clock,
		Log: slog.New(slog.DiscardHandler), Timeout: 50 * time.Millisecond})
	if _, err := s.SendDue(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := f.delivery(t, wh.ID); d.State != "pending" || !strings.Contains(d.LastError, "Timeout") {
		t.Fatalf("after a hanging receiver: %+v; want pending with the timeout as its error", d)
	}
}

// TestWebhookRefusedDestinations: addresses the egress policy refuses
// are refused when saved, with the field named; no key, no webhook.
func TestWebhookRefusedDestinations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hooks = notify.NewWebhooks(f.pool, f.keys, &egress.Policy{Hosts: []string{"hooks.example.com", "169.254.169.254"}}, f.clock, nil)
	for _, url := range []string{"http://hooks.example.com/x", "https://evil.example.com/x", "https://169.254.169.254/latest", "https://127.0.0.1/x"} {
		_, _, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: url, EventTypes: []string{"*"}})
		var fe field.Errors
		if !errors.As(err, &fe) || fe[0].Field != "url" {
			t.Errorf("Create(%s) = %v, want a url field error", url, err)
		}
	}
	if _, _, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: "https://hooks.example.com/x", EventTypes: []string{"rollout.nope"}}); err == nil {
		t.Error("an unknown event type was accepted")
	}
	none, _ := notify.ParseKeyring("")
	f.hooks = notify.NewWebhooks(f.pool, none, &egress.Policy{Hosts: []string{"hooks.example.com"}}, f.clock, nil)
	if _, _, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: "https://hooks.example.com/x", EventTypes: []string{"*"}}); !errors.Is(err, notify.ErrNoKey) {
		t.Errorf("without a server key: %v, want ErrNoKey", err)
	}
}

// TestServerKeyRotation: secrets sealed with the old key still sign after
// the new key is put first, and once re-sealed the old key can go.
func TestServerKeyRotation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	oldKey, newKey := notify.NewKey(), notify.NewKey()
	f.keys, _ = notify.ParseKeyring(oldKey)
	f.hooks = notify.NewWebhooks(f.pool, f.keys, f.policy, f.clock, nil)
	rcv := newReceiver(t, 200)
	wh, secret, err := f.hooks.Create(t.Context(), f.admin, notify.WebhookSpec{Team: "risk", URL: rcv.srv.URL, EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	both, _ := notify.ParseKeyring(newKey + "," + oldKey)
	if n, err := notify.ResealAll(t.Context(), f.pool, both); err != nil || n != 1 {
		t.Fatalf("ResealAll = %d, %v; want 1", n, err)
	}
	f.keys, _ = notify.ParseKeyring(newKey)
	f.event(t)
	if _, err := f.sender().SendDue(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := f.delivery(t, wh.ID); d.State != "delivered" {
		t.Fatalf("after the key rotated: %+v", d)
	}
	verifyWithPython(t, secret, rcv.got[0], rcv.bodies[0])
}
