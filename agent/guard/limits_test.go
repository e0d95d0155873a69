package guard_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelplane/agent/guard"
	"modelplane/busapi"
)

// TestGuardCutsHeldConnections is issue 25 finding 11: the guard on a
// replica's address had only a header timeout, so anyone who reached the
// address could hold its connections open for good by sending a body
// slowly (with or without the token) or by keeping a connection idle.
// With short limits each held connection is closed by the guard, while a
// streamed answer that outlasts the read limit is not cut. The test waits
// for each connection to close, never for a set time; the read deadline
// on the client side only stops a broken guard from hanging the test.
func TestGuardCutsHeldConnections(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	runtime := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/stream" {
			_, _ = io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "second\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(runtime.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	const token = "replica-token-limits"
	lim := guard.Limits{Header: 100 * time.Millisecond, Read: 200 * time.Millisecond, Idle: 200 * time.Millisecond}
	g, err := guard.Listen("127.0.0.1:0", strings.TrimPrefix(runtime.URL, "http://"),
		guard.Options{Token: token, Open: []string{"/metrics"}, Limits: lim, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)

	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// Not a timing assertion: a guard that never closes would
		// otherwise hang the test until go test's own timeout.
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		return c
	}
	// closedByGuard reads until the guard closes c, answering whether it
	// did (a read timeout on our side means it held the connection).
	closedByGuard := func(c net.Conn) (string, bool) {
		t.Helper()
		b, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return string(b), false
		}
		return string(b), true
	}
	tokenHeader := busapi.ReplicaTokenHeader + ": " + token + "\r\n"

	cases := []struct {
		name, send string
	}{
		{"headers never finished", "POST /predict HTTP/1.1\r\nHost: replica\r\n"},
		{"body without the token never sent", "POST /predict HTTP/1.1\r\nHost: replica\r\nContent-Length: 100\r\n\r\n{"},
		{"body with the token never sent", "POST /predict HTTP/1.1\r\nHost: replica\r\n" + tokenHeader + "Content-Length: 100\r\n\r\n{"},
		{"kept alive and idle after an answer", "GET /metrics HTTP/1.1\r\nHost: replica\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			if got, ok := closedByGuard(c); !ok {
				t.Fatalf("the guard held the connection open (read so far %q); want it closed", got)
			}
		})
	}

	// A streamed answer goes on past the read limit: the deadline is
	// lifted once the body is in. A held connection started after the
	// stream's first line and cut by the guard shows the limit has passed.
	c := dial()
	body := `{"stream":true}`
	req := "POST /stream HTTP/1.1\r\nHost: replica\r\n" + tokenHeader + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb := bufio.NewReader(resp.Body)
	if line, err := rb.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("stream's first line = %q, %v", line, err)
	}
	held := dial()
	if _, err := io.WriteString(held, "POST /predict HTTP/1.1\r\nHost: replica\r\n"+tokenHeader+"Content-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, ok := closedByGuard(held); !ok {
		t.Fatal("the guard held a slow body open")
	}
	close(release)
	if line, err := rb.ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("stream's second line after the read limit passed = %q, %v; want it not cut", line, err)
	}
}
