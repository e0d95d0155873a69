package gateway

import (
	"context"
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

// TestUnaryClosedKeptConnectionDropsTheOthers: the replica closed the
// three connections kept to it (its idle timeout, a restart). The call
// that finds the most recently kept one closed goes out on a fresh
// connection, and the other two, kept longer, are dropped unused:
// afterwards the client keeps the fresh one alone, where before it kept
// the two closed ones for the next calls to find.
func TestUnaryClosedKeptConnectionDropsTheOthers(t *testing.T) {
	t.Parallel()
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "{}")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	clk := quartz.NewMock(t)
	uc := newUnaryClient(clk)
	t.Cleanup(uc.close)
	ctx := context.Background()

	var conns []*unaryConn
	for range 3 {
		conn, reused, err := uc.get(ctx, time.Time{}, addr)
		if err != nil || reused {
			t.Fatalf("get: reused %v, err %v; want a new connection", reused, err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns { // kept one second apart
		uc.put(conn)
		clk.Advance(time.Second).MustWait(ctx)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return opened.Load() == 3 }, "waiting for the replica to accept three connections")
	srv.CloseClientConnections()

	resp, err := uc.roundTrip(ctx, time.Time{}, addr, &unaryRequest{path: "/predict", id: "r1"}, []byte("{}"))
	if err != nil {
		t.Fatalf("call after the replica closed its kept connections: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "{}" {
		t.Fatalf("answer %q (%v), want {}", b, err)
	}
	uc.mu.Lock()
	kept := len(uc.idle[addr])
	uc.mu.Unlock()
	if kept != 1 {
		t.Errorf("kept connections = %d, want 1: the fresh one, the closed ones dropped", kept)
	}
	if n := opened.Load(); n != 4 {
		t.Errorf("connections opened = %d, want 4: one fresh for the call", n)
	}
}
