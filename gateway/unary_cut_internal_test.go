package gateway

import (
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

	"github.com/coder/quartz"

	"modelplane/internal/wait"
)

// heldReplica answers a call only once the test sends on release; it
// sends on got as each call's body is in, and counts its connections.
func heldReplica(t *testing.T, release <-chan struct{}, got chan<- struct{}) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	// stop ends held calls at the test's end, so that a failed test does
	// not wait on them in the server's Close.
	stop := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- struct{}{}
		select {
		case <-release:
			_, _ = io.WriteString(w, "{}")
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://"), conns
}

// watchedClient is a unary client that sends on the channel it returns
// as each call's cut is registered (cutAfter into the call).
func watchedClient(t *testing.T) (*unaryClient, <-chan struct{}) {
	uc := newUnaryClient(quartz.NewReal())
	rearmed := make(chan struct{}, 8)
	uc.onRearm = func() { rearmed <- struct{}{} }
	t.Cleanup(uc.close)
	return uc, rearmed
}

type callResult struct {
	answer string
	err    error
}

// startCall makes a call to addr on its own goroutine; its result comes
// on the channel returned.
func startCall(uc *unaryClient, ctx context.Context, deadline time.Time, addr string) <-chan callResult {
	res := make(chan callResult, 1)
	go func() {
		resp, err := uc.roundTrip(ctx, deadline, addr, &unaryRequest{path: "/predict", id: "r1", team: "risk"}, []byte(`{}`))
		if err != nil {
			res <- callResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		res <- callResult{string(b), err}
	}()
	return res
}

// TestUnaryCallOutlastsTheCutWatch: a call whose answer comes only after
// its cut was registered (cutAfter into the call, while the replica held
// the answer) goes on past it, on a connection kept for the next call.
func TestUnaryCallOutlastsTheCutWatch(t *testing.T) {
	t.Parallel()
	release, got := make(chan struct{}), make(chan struct{}, 1)
	addr, conns := heldReplica(t, release, got)
	uc, rearmed := watchedClient(t)
	for i := range 2 {
		res := startCall(uc, t.Context(), time.Now().Add(time.Minute), addr)
		wait.Receive(t, 10*time.Second, got, "call %d never reached the replica", i)
		wait.Receive(t, 10*time.Second, rearmed, "call %d: the cut was never registered", i)
		release <- struct{}{}
		r := wait.Receive(t, 10*time.Second, res, "call %d never ended", i)
		if r.err != nil || r.answer != "{}" {
			t.Fatalf("call %d: %q, %v", i, r.answer, r.err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two calls, want 1", n)
	}
}

// TestUnaryCutWhenTheCallerGoes: a context that ends cuts a call that has
// no deadline of its own, whether it ends before the cut is registered or
// after, and the cut connection is not kept.
func TestUnaryCutWhenTheCallerGoes(t *testing.T) {
	t.Parallel()
	for _, registered := range []bool{false, true} {
		release, got := make(chan struct{}), make(chan struct{}, 2)
		addr, conns := heldReplica(t, release, got)
		uc, rearmed := watchedClient(t)
		ctx, cancel := context.WithCancel(t.Context())
		res := startCall(uc, ctx, time.Time{}, addr)
		wait.Receive(t, 10*time.Second, got, "the call never reached the replica")
		if registered {
			wait.Receive(t, 10*time.Second, rearmed, "the cut was never registered")
		}
		cancel()
		// Without the cut the call would wait for the replica for ever.
		r := wait.Receive(t, 10*time.Second, res, "cancelled (cut registered: %v): the call never ended", registered)
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled (cut registered: %v): %v, want context.Canceled", registered, r.err)
		}
		// Closed, not sent on: the cut call's handler may not have seen
		// its connection close yet.
		close(release)
		next := wait.Receive(t, 10*time.Second, startCall(uc, t.Context(), time.Time{}, addr), "the next call never ended")
		if next.err != nil || conns.Load() != 2 {
			t.Fatalf("the next call: %v on %d connections, want a fresh second one", next.err, conns.Load())
		}
	}
}

// TestUnaryDeadlineEndsTheCall: the call's deadline is the connection's,
// before cutAfter as after it, and the error says it passed.
func TestUnaryDeadlineEndsTheCall(t *testing.T) {
	t.Parallel()
	addr, _ := heldReplica(t, nil, make(chan struct{}, 2))
	uc := newUnaryClient(quartz.NewReal())
	defer uc.close()
	for _, d := range []time.Duration{cutAfter / 5, 3 * cutAfter} {
		deadline := time.Now().Add(d)
		r := wait.Receive(t, 10*time.Second, startCall(uc, t.Context(), deadline, addr), "the call never ended")
		var ne net.Error
		if !errors.As(r.err, &ne) || !ne.Timeout() || !passed(deadline) {
			t.Fatalf("deadline in %v: %v, want it passed", d, r.err)
		}
	}
}
