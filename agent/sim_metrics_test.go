package agent

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/internal/wait"
)

// TestSimReplicaInFlightReachesTheHeartbeat: the requests a sim replica is
// answering (its /v2/stats in_flight) are the heartbeat's in-flight, and
// its answered count the heartbeat's requests.
func TestSimReplicaInFlightReachesTheHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := start(t, testConfig(t, "n-load", nil), e.nc)
	slow := classifier("slow", 0)
	// Each answer takes about three seconds: long enough for a heartbeat
	// (every 250 ms) to see both requests in flight.
	slow.Sim = json.RawMessage(`{"latency_ms":{"p50":3000,"p99":3500},"score":{"mean":0.3,"sd":0.1},"class_balance":{"legit":0.9,"fraud":0.1}}`)
	e.put(t, "n-load", 1, slow)
	addr := allReady(t, a, "slow")["slow"]
	client := &http.Client{Timeout: time.Minute}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := client.Post("http://"+addr+"/predict", "application/json", strings.NewReader(`{"instances":[{"amount":12}]}`))
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	wait.Eventually(t, 10*time.Second, func() bool { return replicas(a)["slow"].InFlight == 2 },
		"heartbeat never showed 2 in flight: %v", wait.Show(func() any { return replicas(a)["slow"] }))
	wg.Wait()
	wait.Eventually(t, 10*time.Second, func() bool {
		rs := replicas(a)["slow"]
		return rs.InFlight == 0 && rs.Requests == 2 && rs.State == busapi.StateReady
	}, "heartbeat never showed both answered: %v", wait.Show(func() any { return replicas(a)["slow"] }))
	// The simulator reports every field it simulates; it models no
	// batcher's queue time, which is absent rather than a measured 0.
	if rs := replicas(a)["slow"]; !slices.Equal(rs.Absent, []string{busapi.MetricBatchQueueMS}) || rs.Runtime != "" {
		t.Errorf("sim replica absent %q, runtime %q; want batch_queue_ms alone and no catalogue entry", rs.Absent, rs.Runtime)
	}
}
