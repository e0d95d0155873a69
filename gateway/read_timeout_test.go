package gateway_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
)

// TestReadTimeoutOnSlowBody checks that a caller who sends the headers and
// then trickles (or withholds) the body cannot hold a gateway connection
// and goroutine for ever: reading the request is bounded by ReadTimeout,
// after which the gateway answers and closes. (A streamed answer is not a
// slow read: the deadline is lifted once the body is in.)
func TestReadTimeoutOnSlowBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, primaryServer(t))))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{ReadTimeout: 100 * time.Millisecond})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Promise 1000 bytes of body, send 10, then nothing.
	if _, err := conn.Write([]byte("POST " + predictPath("fraud-scoring") + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"instance")); err != nil {
		t.Fatal(err)
	}
	// A bound on the test, not a measurement: without a read timeout
	// nothing comes back at all.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a request whose body never arrives: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("slow body answered %d, want 400 or 408", resp.StatusCode)
	}

	// A whole request is still served.
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Errorf("a normal request after the slow one = %d, want 200", r.status)
	}
}
