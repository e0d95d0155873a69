package notify_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"modelplane/internal/freeport"
	"modelplane/internal/wait"
	"modelplane/notify"
)

// startAlertmanager runs Debian's prometheus-alertmanager on a free port,
// routing every alert at once to a webhook receiver at hook, and returns
// its base URL.
func startAlertmanager(t *testing.T, hook string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		t.Fatalf("prometheus-alertmanager not found: install the prometheus-alertmanager package (scripts/install-deps.sh test does)")
	}
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`route:
  receiver: test
  group_by: [alertname, team]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s
        send_resolved: true
`, hook)
	if err := os.WriteFile(filepath.Join(dir, "am.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "am.yml"), "--storage.path="+dir,
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--cluster.listen-address=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	wait.Eventually(t, 60*time.Second, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "alertmanager at %s ready", base)
	return base
}

// TestRollbackReachesAlertmanager: a rollback's event, committed the way a
// rollout commits it, goes to a real Alertmanager's v2 API, which routes it
// to its receiver with the labels a team routes on.
func TestRollbackReachesAlertmanager(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.clock.Set(time.Now()) // Alertmanager compares startsAt and endsAt with its own clock
	rcv := newReceiver(t, 200)
	am := startAlertmanager(t, rcv.srv.URL+"/am")
	f.event(t)
	s := notify.NewSender(notify.SenderConfig{Pool: f.pool, Keys: f.keys, Egress: f.policy, Clock: f.clock,
		Log: slog.New(slog.DiscardHandler), Alertmanager: am})
	if n, err := s.SendDue(t.Context()); err != nil || n != 1 {
		t.Fatalf("SendDue = %d, %v; want the one alert delivery", n, err)
	}
	var state string
	if err := f.pool.QueryRow(t.Context(), "SELECT state FROM deliveries WHERE webhook_id IS NULL").Scan(&state); err != nil || state != "delivered" {
		t.Fatalf("Alertmanager delivery state %q, %v; want delivered", state, err)
	}
	type notification struct {
		Alerts []struct {
			Status      string            `json:"status"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"alerts"`
	}
	var got notification
	wait.Eventually(t, 60*time.Second, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for _, b := range rcv.bodies {
			if json.Unmarshal(b, &got) == nil && len(got.Alerts) > 0 {
				return true
			}
		}
		return false
	}, "alertmanager's receiver notified")
	a := got.Alerts[0]
	want := map[string]string{"alertname": "RolloutRolledBack", "team": "risk", "endpoint": "fraud-scoring", "severity": "warning", "source": "modelplane"}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	if a.Status != "firing" || a.Annotations["summary"] != "rolled back: p99 latency 412 ms > 250 ms" {
		t.Errorf("alert %+v; want firing with the rollout's message", a)
	}
}
