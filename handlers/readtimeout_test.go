package handlers

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
)

// TestSlowBodyIsCut: a form route stops waiting for a body that never
// comes once ReadTimeout passes; the client sees an error status, or the
// connection closed. (The API's huma operations bound their body reads
// already; the portal's chi routes did not.) The body is a pipe the test never writes to, so the
// test waits for the cut, however long the server takes, never for a fixed
// time.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.ReadTimeout = 50 * time.Millisecond }})
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	u := portalSignIn(t, e, "risk-admin@example.com")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+"/teams", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: u.token})
	req.Header.Set("X-CSRF-Token", u.csrf)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.ContentLength = 100 // a body promised and never sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, t.Context().Err()) && t.Context().Err() != nil {
			t.Fatalf("request ended with the test, not cut by the server: %v", err)
		}
		t.Logf("cut: %v", err)
		return // the connection was closed: cut
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("cut: %d %s", resp.StatusCode, b)
	if resp.StatusCode < 400 {
		t.Fatalf("slow body: %d %s; want an error status", resp.StatusCode, b)
	}
}

// deadlineListener accepts connections that note, at every write (an
// answer going out), the read deadline then in force.
type deadlineListener struct {
	net.Listener
	mu sync.Mutex
	// atWrite are the read deadlines in force at each write, on every
	// connection.
	atWrite []time.Time
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c, l: l}, nil
}

func (l *deadlineListener) take() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.atWrite
	l.atWrite = nil
	return out
}

type deadlineConn struct {
	net.Conn
	l    *deadlineListener
	read time.Time // guarded by l.mu
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.l.mu.Lock()
	c.read = t
	c.l.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.l.mu.Lock()
	c.read = t
	c.l.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.atWrite = append(c.l.atWrite, c.read)
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// TestReadDeadlineEndsWithTheBody: ReadTimeout bounds reading a request's
// body and nothing after it. A request without a body gets no read
// deadline, and one with a body has it lifted once the body is read, so
// no deadline is in force on the connection when the answer is written.
// The server reads the connection in the background while a handler runs;
// a deadline passing there cancelled the connection's context, and every
// later request on that keep-alive connection failed at once with
// "context canceled" (what `modelplane bench pages` met: after the first
// answer slower than ReadTimeout, every route answered 500, GET
// /api/v1/me included, in about 100 µs). The deadlines are watched on the
// connection, so the test waits for no deadline to pass.
func TestReadDeadlineEndsWithTheBody(t *testing.T) {
	t.Parallel()
	var l *deadlineListener
	e := newTestEnvWith(t, envOptions{Listener: func(in net.Listener) net.Listener {
		l = &deadlineListener{Listener: in}
		return l
	}})
	key := e.Keys["platform-admin"]
	for _, c := range []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"no body", http.MethodGet, "/me", nil, http.StatusOK},
		{"a body read to its end", http.MethodPost, "/teams", map[string]string{"name": "deadline-team"}, http.StatusCreated},
		{"a body refused", http.MethodPost, "/teams", map[string]string{"name": ""}, http.StatusBadRequest},
	} {
		l.take()
		if status, b := e.api(key, c.method, c.path, c.body); status != c.want {
			t.Fatalf("%s: %s %s = %d %s, want %d", c.name, c.method, c.path, status, b, c.want)
		}
		writes := l.take()
		if len(writes) == 0 {
			t.Fatalf("%s: no write seen on the connection", c.name)
		}
		for _, d := range writes {
			if !d.IsZero() && d.After(time.Now()) {
				t.Errorf("%s: a read deadline (%s from now) was in force as the answer went out; want none once the body is read",
					c.name, time.Until(d).Round(time.Second))
			}
		}
	}
}
