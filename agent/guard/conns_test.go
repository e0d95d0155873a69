package guard_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modelplane/agent/guard"
	"modelplane/busapi"
)

// TestGuardKeepsItsRuntimeConnections: callers that keep their
// connections to the guard open have their calls forwarded on connections
// the guard keeps to the runtime, not on new ones. Each round, every
// caller's request is held at the runtime until all have arrived, so the
// guard needs callers connections at once; once a round is answered they
// are all idle, and the next rounds dial none. With http.DefaultTransport,
// which keeps 2 idle connections to a host, every round dialled all but 2
// again.
func TestGuardKeepsItsRuntimeConnections(t *testing.T) {
	t.Parallel()
	const callers, rounds = 16, 5
	var (
		dialled atomic.Int64
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	runtime := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		if arrived++; arrived == callers {
			close(all)
		}
		gate := all
		mu.Unlock()
		<-gate
		_, _ = io.WriteString(w, `{"predictions":[1]}`)
	}))
	runtime.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	runtime.Start()
	t.Cleanup(runtime.Close)
	const token = "replica-token-conns"
	g, err := guard.Listen("127.0.0.1:0", strings.TrimPrefix(runtime.URL, "http://"), guard.Options{Token: token, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	clients := make([]*http.Client, callers)
	for i := range clients {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		clients[i] = &http.Client{Transport: tr}
	}
	for round := range rounds {
		mu.Lock()
		arrived, all = 0, make(chan struct{})
		mu.Unlock()
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/predict", strings.NewReader(`{"instances":[[1,2,3]]}`))
				req.Header.Set(busapi.ReplicaTokenHeader, token)
				resp, err := c.Do(req)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				defer resp.Body.Close()
				if b, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("round %d: %d %q %v", round, resp.StatusCode, b, err)
				}
			})
		}
		wg.Wait()
	}
	if got := dialled.Load(); got != callers {
		t.Fatalf("the runtime was dialled %d times for %d rounds of %d callers; want %d, one connection a caller", got, rounds, callers, callers)
	}
}
