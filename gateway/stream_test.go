package gateway_test

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// smallBuffers keeps the gateway's socket send buffers small, so that a
// client that stops reading stalls the gateway's writes quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func TestStalledStreamIsCutAndGenerationCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rep, addr := startReplicaServer(t, "v42", replica.TaskLLM)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v42", 100, addr)))
	key := e.newKey(t, "search", "engineer", nil)
	g, err := gateway.New(gateway.Config{StateDir: t.TempDir(), StallTimeout: 300 * time.Millisecond}, e.nc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := serveH1(t, g.Handler(), smallBuffers{ln})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	// 4,000 tokens take the replica about 8 s; a client that reads nothing
	// must be cut long before.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"messages":[{"role":"user","content":"tell me everything"}],"max_tokens":4000,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/endpoints/support-chat/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	wait.Eventually(t, 10*time.Second, func() bool { return rep.Stats().InFlight == 1 }, "waiting for generation running")
	wait.Eventually(t, 10*time.Second, func() bool {
		st := rep.Stats()
		return st.InFlight == 0 && st.Cancelled == 1 && st.KVPagesUsed == 0
	}, "replica stats %v, want the generation cancelled and its pages freed", wait.Show(func() any { return rep.Stats() }))
	// The gateway still serves others.
	if r := call(t, u, chatPath("support-chat"), key, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); r.status != http.StatusOK {
		t.Errorf("next request: status %d", r.status)
	}
}
