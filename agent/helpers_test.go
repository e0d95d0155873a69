package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// Sim profiles of the demo versions.
const (
	classifierSim = `{"latency_ms":{"p50":2,"p99":5},"score":{"mean":0.3,"sd":0.1},"class_balance":{"legit":0.9,"fraud":0.1}}`
	llmSim        = `{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`
)

// env is one test's NATS: an embedded server that can go away and come
// back, a client that reconnects for ever, and the contract's buckets and
// streams.
type env struct {
	srv *natstest.Restartable
	nc  *nats.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.NewRestartable(t)
	nc, err := nats.Connect(srv.URL(), append(natstest.ControlPlane(t), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js, kv: kv}
}

// put writes a node's desired state.
func (e *env) put(t *testing.T, node string, gen int64, specs ...busapi.ReplicaSpec) {
	t.Helper()
	data, err := json.Marshal(busapi.Desired{Node: node, Generation: gen, Replicas: specs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.kv.Put(ctx, node, data); err != nil {
		t.Fatalf("put desired: %v", err)
	}
}

// classifier is a one-slot classification replica on a whole GPU.
func classifier(id string, gpu int) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{
		ID: id, Team: "fraud", Endpoint: "fraud-detector", Model: "fraud-xgb", Version: "v23",
		Task: "classification", GPUType: "A100-80GB", Profile: busapi.ProfileFull,
		Slots: []busapi.Slot{{GPU: gpu}}, Sim: json.RawMessage(classifierSim),
	}
}

func inventory(t *testing.T, gpus, mig string) []busapi.GPU {
	t.Helper()
	inv, err := ParseInventory([]string{gpus}, mig)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// testConfig is a quick agent: heartbeats every 250 ms.
func testConfig(t *testing.T, node string, drv Driver) Config {
	return Config{
		Node:       node,
		GPUs:       inventory(t, "4xA100-80GB", ""),
		StateDir:   t.TempDir(),
		Lease:      2 * time.Second,
		Heartbeat:  250 * time.Millisecond,
		AckTimeout: time.Second,
		Driver:     drv,
	}
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With(slog.String("test", t.Name()))
	}
	return slog.New(slog.DiscardHandler)
}

// start builds and starts an agent, stopped when the test ends.
func start(t *testing.T, cfg Config, nc *nats.Conn) *Agent {
	t.Helper()
	a, err := New(cfg, nc, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// countingDriver counts the starts and adoptions asked of a SimDriver.
type countingDriver struct {
	*SimDriver
	starts atomic.Int64
	adopts atomic.Int64
}

func newCountingDriver(t *testing.T) *countingDriver {
	d := &countingDriver{SimDriver: NewSimDriver(SimDriverConfig{Log: testLog(t)})}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Close(ctx)
	})
	return d
}

func (d *countingDriver) Start(ctx context.Context, spec busapi.ReplicaSpec, opts StartOptions) (Replica, error) {
	d.starts.Add(1)
	return d.SimDriver.Start(ctx, spec, opts)
}

func (d *countingDriver) Adopt(ctx context.Context, spec busapi.ReplicaSpec, addr string) (Replica, error) {
	d.adopts.Add(1)
	return d.SimDriver.Adopt(ctx, spec, addr)
}

// newClock is an agent clock moved by hand (Config.Clock).
func newClock(t *testing.T) *quartz.Mock {
	return quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
}

// advance moves clk forward by d through every timer and tick on the way
// (heartbeats, readiness checks, retries, the meter), each delivered
// before the next: Advance alone refuses to jump past one. A timer the
// agent sets meanwhile is met too, since each step goes to whichever
// event is next.
func advance(t *testing.T, clk *quartz.Mock, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		next, ok := clk.Peek()
		if !ok || next > d {
			clk.Advance(d).MustWait(ctx)
			return
		}
		step, w := clk.AdvanceNext()
		w.MustWait(ctx)
		d -= step
	}
}

// replicas maps the agent's reported replicas by id.
func replicas(a *Agent) map[string]busapi.ReplicaStatus {
	out := make(map[string]busapi.ReplicaStatus)
	for _, r := range a.Status().Replicas {
		out[r.ID] = r
	}
	return out
}

// allReady waits until exactly ids are reported, all ready and answering
// /v2/health/ready, and returns their addresses.
func allReady(t *testing.T, a *Agent, ids ...string) map[string]string {
	t.Helper()
	addrs := make(map[string]string)
	var why error
	wait.Eventually(t, 10*time.Second, func() bool {
		why = readyAt(a, ids, addrs)
		return why == nil
	}, "want %v ready: %v", ids, wait.Show(func() any { return why }))
	return addrs
}

// readyAt says why exactly ids are not all ready and answering, or fills
// addrs with their addresses and returns nil.
func readyAt(a *Agent, ids []string, addrs map[string]string) error {
	rs := replicas(a)
	if len(rs) != len(ids) {
		return fmt.Errorf("replicas %v", rs)
	}
	for _, id := range ids {
		r, ok := rs[id]
		if !ok || r.State != busapi.StateReady || r.Addr == "" {
			return fmt.Errorf("replica %s: %+v", id, r)
		}
		if code := httpGet(r.Addr, "/v2/health/ready"); code != http.StatusOK {
			return fmt.Errorf("replica %s at %s: ready answers %d", id, r.Addr, code)
		}
		addrs[id] = r.Addr
	}
	return nil
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// httpGet returns the status code, or 0 when nothing answers.
func httpGet(addr, path string) int {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func predict(t *testing.T, addr string) {
	t.Helper()
	resp, err := httpClient.Post("http://"+addr+"/predict", "application/json", strings.NewReader(`{"instances":[{"amount":12}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("predict: %d", resp.StatusCode)
	}
}

// usageMsg is one stored MP_USAGE message.
type usageMsg struct {
	msgID string
	batch busapi.UsageBatch
}

// readUsage returns every message of MP_USAGE in stream order.
func readUsage(t *testing.T, js jetstream.JetStream) []usageMsg {
	t.Helper()
	msgs, err := tryReadUsage(js)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// tryReadUsage is readUsage for a client that may still be reconnecting.
func tryReadUsage(js jetstream.JetStream) ([]usageMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, busapi.StreamUsage)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []usageMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("get %d: %w", seq, err)
		}
		b, err := busapi.DecodeUsage(m.Data)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", seq, err)
		}
		out = append(out, usageMsg{msgID: m.Header.Get(jetstream.MsgIDHeader), batch: b})
	}
	return out, nil
}

// spooledIDs reads the batch ids waiting in an agent's spool directory,
// without touching it: the agent may be writing.
func spooledIDs(t *testing.T, stateDir string) []string {
	t.Helper()
	dir := filepath.Join(stateDir, "spool")
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), spoolExt) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			continue // acknowledged and removed meanwhile
		}
		b, err := busapi.DecodeUsage(data)
		if err != nil {
			t.Fatalf("spool file %s: %v", de.Name(), err)
		}
		ids = append(ids, b.ID)
	}
	return ids
}
