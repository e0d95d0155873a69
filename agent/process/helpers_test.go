package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

// fakeBin is the fake runtime, built once by TestMain into a directory any
// user may enter: when the tests run as root the runtimes run as nobody.
var fakeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakeruntime")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = filepath.Join(dir, "fakeruntime")
	out, err := exec.Command("go", "build", "-o", fakeBin, "./testdata/fakeruntime").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build fake runtime: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// long bounds every wait on a real process: generous, since the machine
// is small and shared.
const long = 30 * time.Second

// openDir is a directory the runtime's user can read, for the files that
// signal the fake runtime.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fake is a catalogue entry that runs the fake runtime with flags.
func fake(flags ...string) catalog.Entry {
	return catalog.Entry{
		Name:    "fake",
		Command: append([]string{fakeBin, "-port", "{port}", "-model-dir", "{model_dir}"}, flags...),
		Devices: catalog.DevicesCUDAEnv,
		Health:  "/v2/health/live",
		Ready:   "/v2/health/ready",
		Metrics: "/metrics",
		Adapter: catalog.AdapterTriton,
	}
}

// newDriver returns a driver of the fake runtime with flags on a mock
// clock, with the state directory given (a restarted agent reuses one).
func newDriver(t *testing.T, stateDir string, clock quartz.Clock, mutate func(*Config), flags ...string) *Driver {
	t.Helper()
	models := openDir(t)
	cfg := Config{
		StateDir: stateDir,
		Catalog:  map[string]catalog.Entry{"fake": fake(flags...)},
		Resolve: func(context.Context, busapi.ReplicaSpec, string) (Launch, error) {
			return Launch{Runtime: "fake", ModelDir: models}, nil
		},
		Clock: clock,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, d) })
	return d
}

// stopAll ends what d still runs. Stop's grace runs on the mock clock,
// which nothing advances any more, so each runtime is killed too.
func stopAll(t *testing.T, d *Driver) {
	for _, r := range d.Running() {
		rr := r.(*replica)
		rr.stopOnce.Do(func() { close(rr.stop) })
		wait.Eventually(t, long, func() bool {
			rr.mu.Lock()
			p := rr.proc
			rr.mu.Unlock()
			if p != nil {
				rr.signal(p, 9)
			}
			select {
			case <-rr.done:
				return true
			default:
				return false
			}
		}, "replica %s did not end", rr.spec.ID)
	}
}

func spec(id string) busapi.ReplicaSpec {
	return busapi.ReplicaSpec{ID: id, Team: "risk", Endpoint: "fraud", Model: "fraud", Version: "v1", Task: "classification",
		GPUType: "A100-80GB", Profile: busapi.ProfileFull, Slots: []busapi.Slot{{GPU: 0, Slice: 0}}}
}

func start(t *testing.T, d *Driver, s busapi.ReplicaSpec, addr string) *replica {
	t.Helper()
	r, err := d.Start(t.Context(), s, agent.StartOptions{Addr: addr})
	if err != nil {
		t.Fatalf("start %s: %v", s.ID, err)
	}
	return r.(*replica)
}

func observe(t *testing.T, r agent.Replica) agent.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o, err := r.Observe(ctx)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	return o
}

func waitReady(t *testing.T, r agent.Replica) agent.Observation {
	t.Helper()
	var o agent.Observation
	wait.Eventually(t, long, func() bool { o = observe(t, r); return o.Ready }, "replica %s never ready: %v", r.Spec().ID, wait.Show(func() any { return o }))
	return o
}

// runtimeEnv is what the fake runtime says of itself on /env.
type runtimeEnv struct {
	UID      int      `json:"uid"`
	PID      int      `json:"pid"`
	CPUs     string   `json:"cpus"`
	Environ  []string `json:"environ"`
	Readable bool     `json:"readable"`
}

func (e runtimeEnv) get(name string) (string, bool) {
	for _, kv := range e.Environ {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v, true
		}
	}
	return "", false
}

func envOf(t *testing.T, r agent.Replica) runtimeEnv {
	t.Helper()
	resp, err := http.Get("http://" + r.Addr() + "/env")
	if err != nil {
		t.Fatalf("GET /env: %v", err)
	}
	defer resp.Body.Close()
	var e runtimeEnv
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// envWhenUp is envOf once the runtime answers: the zero env (PID 0) while
// it is not listening yet, so a caller can wait on it.
func envWhenUp(r agent.Replica) runtimeEnv {
	var e runtimeEnv
	resp, err := http.Get("http://" + r.Addr() + "/env")
	if err != nil {
		return e
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return e
}

// predict sends one /predict and returns its status, or an error.
func predict(addr string) (int, error) { return predictWith(addr, "") }

// predictWith is predict carrying the replica token (none when "").
func predictWith(addr, token string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/predict", strings.NewReader(`{"instances":[{}]}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(busapi.ReplicaTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func readLog(t *testing.T, d *Driver, id string) string {
	t.Helper()
	b, err := os.ReadFile(d.logPath(id))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runningReplica is the replica d runs under id, or nil.
func runningReplica(d *Driver, id string) *replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running[id]
}

// syncBuffer is a log sink the driver's goroutines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
