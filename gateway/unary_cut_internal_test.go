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
)

// slowReplica answers each call after wait, its head first and its body
// wait later again; it counts its connections, and sends on got (when
// not nil) as each call's body is in.
func slowReplica(t *testing.T, wait time.Duration, got chan<- struct{}) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if got != nil {
			got <- struct{}{}
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), conns
}

func unaryCall(uc *unaryClient, ctx context.Context, deadline time.Time, addr string) (string, error) {
	resp, err := uc.roundTrip(ctx, deadline, addr, &unaryRequest{path: "/predict", id: "r1", team: "risk"}, []byte(`{}`))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestUnaryCallOutlastsTheCutWatch: a call whose answer, head and body,
// comes after cutAfter goes on past it on the same connection, which is
// kept for the next call.
func TestUnaryCallOutlastsTheCutWatch(t *testing.T) {
	t.Parallel()
	addr, conns := slowReplica(t, 2*cutAfter, nil)
	uc := newUnaryClient(quartz.NewReal())
	defer uc.close()
	for i := range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		got, err := unaryCall(uc, ctx, time.Now().Add(time.Minute), addr)
		cancel()
		if err != nil || got != "{}" {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two calls, want 1", n)
	}
}

// TestUnaryCutWhenTheCallerGoes: a context that ends cuts the call,
// whether it ends before cutAfter or after, and the cut connection is
// not kept.
func TestUnaryCutWhenTheCallerGoes(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 1)
	addr, conns := slowReplica(t, time.Hour, got)
	uc := newUnaryClient(quartz.NewReal())
	defer uc.close()
	for _, after := range []time.Duration{0, 3 * cutAfter} {
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			// Once the replica has the call: at once, or well past
			// cutAfter.
			<-got
			time.Sleep(after)
			cancel()
		}()
		// A deadline the cut must come well before: without the cut
		// the call would end there, with the same error.
		deadline := time.Now().Add(10 * time.Second)
		_, err := unaryCall(uc, ctx, deadline, addr)
		cancel()
		if !errors.Is(err, context.Canceled) || passed(deadline) {
			t.Fatalf("cancelled after %v: %v, want context.Canceled before the deadline", after, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a cut connection is not kept", n)
	}
}

// TestUnaryDeadlineEndsTheCall: the call's deadline is the connection's,
// before cutAfter as after it, and the error says it passed.
func TestUnaryDeadlineEndsTheCall(t *testing.T) {
	t.Parallel()
	addr, _ := slowReplica(t, time.Hour, nil)
	uc := newUnaryClient(quartz.NewReal())
	defer uc.close()
	for _, d := range []time.Duration{cutAfter / 5, 3 * cutAfter} {
		ctx, cancel := context.WithCancel(t.Context())
		deadline := time.Now().Add(d)
		_, err := unaryCall(uc, ctx, deadline, addr)
		cancel()
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !passed(deadline) {
			t.Fatalf("deadline in %v: %v, want it passed", d, err)
		}
	}
}
