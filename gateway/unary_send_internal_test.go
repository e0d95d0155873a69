package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
)

// rawReplica accepts one connection and hands it to the test.
func rawReplica(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		ch <- c
	}()
	return ln.Addr().String(), ch
}

// TestUnarySendWaitsForTheAnswer: on a fresh connection send writes the
// request and returns only once the answer can be read, with nothing of
// it read yet; the answer is then read whole from the connection.
func TestUnarySendWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	addr, accepted := rawReplica(t)
	uc := newUnaryClient(quartz.NewReal())
	t.Cleanup(uc.close)
	ctx := context.Background()
	conn, reused, err := uc.get(ctx, time.Time{}, addr)
	if err != nil || reused || !conn.fresh || conn.rc == nil {
		t.Fatalf("get: reused %v, fresh %v, descriptor %v, err %v; want a fresh new connection with a descriptor", reused, conn != nil && conn.fresh, conn != nil && conn.rc != nil, err)
	}
	// No begin: with no deadline, nothing but the answer ends send's wait
	// however slow the machine (a call's would end at cutAfter and go on).
	req := []byte("POST /predict HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\n{}")
	var returned atomic.Bool
	sent := make(chan error, 1)
	go func() {
		err := conn.send(req)
		returned.Store(true)
		sent <- err
	}()
	peer := <-accepted
	got := make([]byte, len(req))
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, req) {
		t.Fatalf("replica read %q (%v), want the request", got, err)
	}
	if returned.Load() {
		t.Fatal("send returned before the replica answered")
	}
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := io.WriteString(peer, answer); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	if n := conn.br.Buffered(); n != 0 {
		t.Fatalf("send left %d bytes buffered, want none read", n)
	}
	resp, err := http.ReadResponse(conn.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "{}" || !conn.end() {
		t.Fatalf("answer %q (%v), want {} on a connection not cut", b, err)
	}
}

// TestUnarySendLargeRequest: a request larger than one write can take
// goes out whole, the rest through the ordinary write, and its answer is
// read.
func TestUnarySendLargeRequest(t *testing.T) {
	t.Parallel()
	addr, accepted := rawReplica(t)
	uc := newUnaryClient(quartz.NewReal())
	t.Cleanup(uc.close)
	conn, _, err := uc.get(context.Background(), time.Time{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	// No begin: the connection has no deadline, so the first write is
	// send's own however slow the machine (a call's would be cutAfter's).
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB, far more than a socket's buffer
	req := appendRequest(nil, addr, &unaryRequest{path: "/predict", id: "r1", team: "risk"}, body)
	sent := make(chan error, 1)
	go func() { sent <- conn.send(req) }()
	peer := <-accepted
	// A request cut short would leave the read waiting: it fails instead.
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := http.ReadRequest(bufio.NewReader(peer))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("replica read %d bytes of the body (%v), want the %d sent", len(got), err, len(body))
	}
	if _, err := io.WriteString(peer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	resp, err := http.ReadResponse(conn.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "{}" {
		t.Fatalf("answer %q (%v), want {}", b, err)
	}
}

// TestUnaryLongIdleConnectionIsNotFresh: a kept connection idle for
// sendWaitIdle or longer, whose replica may have closed it meanwhile, is
// written and read as usual rather than waited on: send returns once the
// request is written, though the replica never answers.
func TestUnaryLongIdleConnectionIsNotFresh(t *testing.T) {
	t.Parallel()
	addr, accepted := rawReplica(t)
	clock := quartz.NewMock(t)
	uc := newUnaryClient(clock)
	t.Cleanup(uc.close)
	ctx := context.Background()
	for _, idle := range []time.Duration{0, sendWaitIdle - time.Millisecond, sendWaitIdle} {
		conn, _, err := uc.get(ctx, time.Time{}, addr)
		if err != nil {
			t.Fatal(err)
		}
		uc.put(conn)
		clock.Advance(idle)
		conn, reused, err := uc.get(ctx, time.Time{}, addr)
		if err != nil || !reused {
			t.Fatalf("idle %v: reused %v (%v), want the kept connection", idle, reused, err)
		}
		if want := idle < sendWaitIdle; conn.fresh != want {
			t.Errorf("idle %v: fresh %v, want %v", idle, conn.fresh, want)
		}
		if conn.fresh {
			uc.put(conn)
			continue
		}
		<-accepted // the replica holds the connection open and never answers
		sent := make(chan error, 1)
		go func() { sent <- conn.send([]byte("POST /predict HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\n{}")) }()
		if err := wait.Receive(t, 10*time.Second, sent, "send on a connection idle for sendWaitIdle waited for an answer"); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}
