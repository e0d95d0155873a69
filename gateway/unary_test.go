package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// countedReplica is a real HTTP replica counting the connections opened
// to it; handler answers.
func countedReplica(t *testing.T, handler http.HandlerFunc) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), conns
}

// TestUnaryCallKeepsItsConnection: sequential calls reach the replica on
// one kept-alive connection, with the body and the headers the gateway
// sets and nothing of the caller's but Accept.
func TestUnaryCallKeepsItsConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type seen struct{ body, id, idem, team, ctype, accept, auth string }
	got := make(chan seen, 1)
	addr, conns := countedReplica(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Header.Get("X-Request-Id"), r.Header.Get("X-Idempotency-Key"), r.Header.Get("X-Modelplane-Team"),
			r.Header.Get("Content-Type"), r.Header.Get("Accept"), r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"predictions":[0.1,0.9]}`)
	})
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, addr)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for i := range 20 {
		r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody, "X-Request-Id", "req-1", "Accept", "application/json")
		if r.status != http.StatusOK || string(r.body) != `{"predictions":[0.1,0.9]}` {
			t.Fatalf("call %d: %d %s, want 200 with the replica's answer", i, r.status, r.body)
		}
		s := <-got
		want := seen{predictBody, "req-1", "req-1", "risk", "application/json", "application/json", ""}
		if s != want {
			t.Fatalf("call %d: replica saw %+v, want %+v", i, s, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("connections opened to the replica = %d, want 1 for 20 sequential calls", n)
	}
}

// TestUnaryChunkedAnswer: an answer without a Content-Length arrives whole
// and leaves its connection reusable.
func TestUnaryChunkedAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr, conns := countedReplica(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"predictions":`)
		w.(http.Flusher).Flush() // the rest goes as a second chunk
		_, _ = io.WriteString(w, `[0.1,0.9]}`)
	})
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, addr)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for i := range 5 {
		r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody)
		if r.status != http.StatusOK || string(r.body) != `{"predictions":[0.1,0.9]}` {
			t.Fatalf("call %d: %d %q, want 200 with both chunks", i, r.status, r.body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("connections opened to the replica = %d, want 1 for 5 chunked answers", n)
	}
}

// TestUnaryResendsOnClosedKeptConnection: a replica that closes each
// connection after answering, without saying so, leaves the gateway a
// kept connection that is dead on its next call; the call is sent again
// on a fresh connection to the same replica, as net/http's Transport does,
// and the caller never sees the closed one.
func TestUnaryResendsOnClosedKeptConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns, answered atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				answered.Add(1)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			}()
		}
	}()
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, ln.Addr().String())))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	const calls = 10
	for i := range calls {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK || string(r.body) != "{}" {
			t.Fatalf("call %d: %d %s, want 200 from the only replica", i, r.status, r.body)
		}
	}
	if n := answered.Load(); n != calls {
		t.Errorf("requests the replica answered = %d, want %d", n, calls)
	}
	if n := conns.Load(); n < calls {
		t.Errorf("connections = %d, want at least %d (one per answer)", n, calls)
	}
}

// TestUnaryCallerGoneCutsTheCall: a caller that leaves while the replica
// works ends the gateway's call (the replica sees its request cancelled),
// and the cut connection is not used again.
func TestUnaryCallerGoneCutsTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var first atomic.Bool
	started, cancelled := make(chan struct{}), make(chan struct{})
	addr, conns := countedReplica(t, func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the gateway hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		if first.CompareAndSwap(false, true) {
			close(started)
			<-r.Context().Done()
			close(cancelled)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	})
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, addr)))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{Timeout: time.Hour})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+predictPath("fraud-scoring"), strings.NewReader(predictBody))
		if err != nil {
			errs <- err
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errs <- err
	}()
	<-started
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller's error = %v, want context.Canceled", err)
	}
	select {
	case <-cancelled:
	case <-t.Context().Done():
		t.Fatal("the replica's request was never cancelled")
	}
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("call after the cut: %d %s, want 200", r.status, r.body)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2: the cut one is not reused", n)
	}
}

// TestUnaryIdleConnectionsExpire: a connection left idle for longer than
// the idle timeout (90 s, net/http's) is closed rather than kept for
// ever, and the next call opens a fresh one.
func TestUnaryIdleConnectionsExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{}`)
	}))
	var opened atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, strings.TrimPrefix(srv.URL, "http://"))))
	key := e.newKey(t, "risk", "engineer", nil)
	clk := newClock(t)
	g := startGateway(t, e.nc, gateway.Config{Clock: clk})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for i := range 2 {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	advance(t, clk, 60*time.Second)
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("call after 60s: %d %s", r.status, r.body)
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("connections after 60 s idle = %d, want 1 (still kept)", n)
	}
	advance(t, clk, 91*time.Second)
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("call after 91s: %d %s", r.status, r.body)
	}
	if n := opened.Load(); n != 2 {
		t.Errorf("connections after 91 s idle = %d, want 2 (the idle one replaced)", n)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return closed.Load() == 1 }, "waiting for the idle connection to be closed")
}

// TestUnaryIdleTimeoutDropsTheKeptConnections: a replica's idle timeout
// closes every connection the gateway keeps to it at once, after a burst
// as many as the burst had calls. The next call finds the first one closed
// and goes out on a fresh connection: no call fails, where sending again
// on the next kept connection failed it. (That the others are dropped
// unused is TestUnaryClosedKeptConnectionDropsTheOthers': here a
// connection the gateway puts back after its answer reached the test may
// be put back after the close, and be found closed by a later call.)
func TestUnaryIdleTimeoutDropsTheKeptConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const burst = 4
	var arrived atomic.Int64
	all := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived.Add(1) == burst {
			close(all)
		}
		// The burst's calls are held until all of them arrived, each on a
		// connection of its own; the later ones pass. A gateway that sent
		// them one by one would hold the first until its call timed out,
		// and the burst would fail below.
		select {
		case <-all:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	var opened atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, strings.TrimPrefix(srv.URL, "http://"))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	statuses := make(chan string, burst)
	for range burst {
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+predictPath("fraud-scoring"), strings.NewReader(predictBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- err.Error()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.Status
		}()
	}
	for range burst {
		if s := <-statuses; s != "200 OK" {
			t.Fatalf("a call of the burst: %s, want 200 OK", s)
		}
	}
	if n := opened.Load(); n != burst {
		t.Fatalf("connections after the burst = %d, want %d", n, burst)
	}

	srv.CloseClientConnections() // the replica's idle timeout
	for i := range 3 {
		if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
			t.Fatalf("call %d after the replica closed its kept connections: %d %s, want 200", i, r.status, r.body)
		}
	}
}

// TestUnaryBrokenAnswerIsNotResent: a replica that breaks off its answer
// on a kept connection may have run the request, so the gateway does not
// send it to that replica again; the caller gets an error status.
func TestUnaryBrokenAnswerIsNotResent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var requests atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if requests.Add(1) == 2 {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n") // then close, headers unfinished
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, ln.Addr().String())))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("first call: %d %s, want 200", r.status, r.body)
	}
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status == http.StatusOK {
		t.Fatalf("broken answer: 200 %s, want an error status", r.body)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("requests the replica got = %d, want 2: a broken answer is not resent", n)
	}
}
