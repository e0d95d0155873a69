package batch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
	"modelplane/runtime/batch"
)

// gated is a model whose Predict blocks until the gate opens and records
// every row it was given, so a test holds the executor busy while requests
// queue and then sees exactly what was executed.
type gated struct {
	gate chan struct{}

	mu      sync.Mutex
	batches []int
	seen    map[float32]bool
	fail    error
}

func newGated() *gated { return &gated{gate: make(chan struct{}), seen: map[float32]bool{}} }

func (g *gated) Predict(rows [][]float32) ([][]float32, error) {
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batches = append(g.batches, len(rows))
	for _, r := range rows {
		g.seen[r[0]] = true
	}
	if g.fail != nil {
		return nil, g.fail
	}
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = []float32{2 * r[0]}
	}
	return out, nil
}

func (g *gated) executed() ([]int, map[float32]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.batches...), g.seen
}

type answer struct {
	res batch.Result
	err error
}

func start(t *testing.T, p batch.Predictor, cfg batch.Config) *batch.Batcher {
	t.Helper()
	b, err := batch.New(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return b
}

func submit(b *batch.Batcher, v float32) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := b.Do(context.Background(), [][]float32{{v}})
		ch <- answer{res, err}
	}()
	return ch
}

func TestLoneRequestIsExecutedAtOnce(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	g := newGated()
	close(g.gate)
	b := start(t, g, batch.Config{MaxBatchSize: 8, MaxQueueDelay: 50 * time.Millisecond, Clock: clk})
	// The clock never moves: a request held for a window would never be
	// answered, and the context's deadline would say so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.Do(ctx, [][]float32{{3}})
	if err != nil {
		t.Fatalf("lone request: %v", err)
	}
	if res.Outputs[0][0] != 6 || res.Queue != 0 || res.BatchRows != 1 {
		t.Fatalf("got outputs %v, queue %v, batch %d; want [[6]], 0, 1", res.Outputs, res.Queue, res.BatchRows)
	}
}

func TestConcurrentRequestsShareBatches(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	g := newGated()
	var mu sync.Mutex
	var execs []batch.Executed
	b := start(t, g, batch.Config{MaxBatchSize: 8, MaxQueueDelay: time.Millisecond, Clock: clk,
		OnBatch: func(e batch.Executed) { mu.Lock(); execs = append(execs, e); mu.Unlock() }})
	first := submit(b, 0)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing: %v", wait.Show(func() any { return b.Stats() }))
	var rest []<-chan answer
	for i := 1; i <= 20; i++ {
		rest = append(rest, submit(b, float32(i)))
	}
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().QueuedRequests == 20 }, "requests not queued: %v", wait.Show(func() any { return b.Stats() }))
	close(g.gate)
	if a := <-first; a.err != nil || a.res.Outputs[0][0] != 0 {
		t.Fatalf("first request: %+v", a)
	}
	for i, ch := range rest {
		a := <-ch
		if a.err != nil {
			t.Fatalf("request %d: %v", i+1, a.err)
		}
		if got, want := a.res.Outputs[0][0], float32(2*(i+1)); got != want {
			t.Fatalf("request %d got %v, want %v", i+1, got, want)
		}
	}
	batches, _ := g.executed()
	// The 20 that queued behind the busy executor go in batches of at most
	// 8, oldest first: 8, 8, 4.
	if want := []int{1, 8, 8, 4}; !equal(batches, want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
	sum := 0
	for _, n := range batches {
		sum += n
	}
	if m := float64(sum) / float64(len(batches)); m <= 1 {
		t.Fatalf("mean batch %.2f, want > 1", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(execs) != 4 || execs[1].Requests != 8 || execs[1].Rows != 8 {
		t.Fatalf("OnBatch saw %+v", execs)
	}
	if st := b.Stats(); st.Batches != 4 || st.Rows != 21 || st.LastBatchRows != 4 || st.QueuedRequests != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTimedOutRequestsAreNeverExecuted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	timers := clk.Trap().NewTimer("batch", "timeout")
	defer timers.Close()
	g := newGated()
	// No queue delay: the request after the timeouts is not held for a
	// window the test would have to advance the clock through.
	b := start(t, g, batch.Config{MaxBatchSize: 8, QueueTimeout: 50 * time.Millisecond, Clock: clk})
	// Each Do arms its timeout timer right after queueing; the trap lets
	// the test know it is armed before the clock moves.
	running := submit(b, 1)
	timers.MustWait(ctx).MustRelease(ctx)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing")
	late := []<-chan answer{submit(b, 2)}
	timers.MustWait(ctx).MustRelease(ctx)
	late = append(late, submit(b, 3))
	timers.MustWait(ctx).MustRelease(ctx)
	clk.Advance(50 * time.Millisecond).MustWait(ctx)
	for i, ch := range late {
		if a := <-ch; !errors.Is(a.err, batch.ErrQueueTimeout) {
			t.Fatalf("queued request %d: got %+v, want ErrQueueTimeout", i, a)
		}
	}
	if st := b.Stats(); st.QueuedRequests != 0 || st.QueuedRows != 0 {
		t.Fatalf("timed-out requests still queued: %+v", st)
	}
	// The executing request is past its timeout too, but it was taken:
	// it is answered by the model, not timed out.
	close(g.gate)
	if a := <-running; a.err != nil || a.res.Queue != 0 {
		t.Fatalf("executing request: %+v", a)
	}
	after := submit(b, 4)
	timers.MustWait(ctx).MustRelease(ctx)
	if a := <-after; a.err != nil {
		t.Fatalf("request after the timeouts: %v", a.err)
	}
	batches, seen := g.executed()
	if !equal(batches, []int{1, 1}) || !seen[1] || !seen[4] || seen[2] || seen[3] {
		t.Fatalf("executed batches %v rows %v; want only rows 1 and 4, never the timed-out 2 and 3", batches, seen)
	}
}

func TestCancelledRequestIsNeverExecuted(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	g := newGated()
	b := start(t, g, batch.Config{MaxBatchSize: 8, Clock: clk})
	running := submit(b, 1)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { _, err := b.Do(ctx, [][]float32{{2}}); gone <- err }()
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().QueuedRequests == 1 }, "second request not queued")
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	close(g.gate)
	<-running
	if _, seen := g.executed(); seen[2] {
		t.Fatal("a request cancelled in the queue was executed")
	}
}

func TestModelErrorAnswersTheWholeBatch(t *testing.T) {
	t.Parallel()
	g := newGated()
	g.fail = errors.New("bad model")
	b := start(t, g, batch.Config{MaxBatchSize: 8, Clock: quartz.NewMock(t).WithLogger(quartz.NoOpLogger)})
	first := submit(b, 1)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing")
	second, third := submit(b, 2), submit(b, 3)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().QueuedRequests == 2 }, "requests not queued")
	close(g.gate)
	for _, ch := range []<-chan answer{first, second, third} {
		if a := <-ch; a.err == nil || a.err.Error() != "bad model" {
			t.Fatalf("got %+v, want the model's error", a)
		}
	}
}

type panics struct{}

func (panics) Predict([][]float32) ([][]float32, error) { panic("boom") }

func TestPanickingModelFailsItsBatchOnly(t *testing.T) {
	t.Parallel()
	b := start(t, panics{}, batch.Config{MaxBatchSize: 8, Clock: quartz.NewMock(t).WithLogger(quartz.NoOpLogger)})
	for range 2 {
		if _, err := b.Do(context.Background(), [][]float32{{1}}); err == nil {
			t.Fatal("a panicking model answered no error")
		}
	}
}

func TestStopExecutesTheQueueAndRefusesMore(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	g := newGated()
	b, err := batch.New(g, batch.Config{MaxBatchSize: 8, MaxQueueDelay: time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	first := submit(b, 1)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing")
	queued := submit(b, 2)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().QueuedRequests == 1 }, "second request not queued")
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(context.Background()) }()
	// A cancelled context is refused without queueing while the batcher
	// runs, so probing with one never adds work.
	probe, cancel := context.WithCancel(context.Background())
	cancel()
	wait.Eventually(t, 10*time.Second, func() bool {
		_, err := b.Do(probe, [][]float32{{9}})
		return errors.Is(err, batch.ErrStopped)
	}, "a stopping batcher took a new request")
	close(g.gate)
	for _, ch := range []<-chan answer{first, queued} {
		if a := <-ch; a.err != nil {
			t.Fatalf("in-flight request on stop: %v", a.err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  batch.Config
	}{
		{"preferred above max", batch.Config{MaxBatchSize: 4, PreferredBatchSizes: []int{8}}},
		{"preferred zero", batch.Config{MaxBatchSize: 4, PreferredBatchSizes: []int{0}}},
		{"negative delay", batch.Config{MaxBatchSize: 4, MaxQueueDelay: -1}},
		{"negative timeout", batch.Config{MaxBatchSize: 4, QueueTimeout: -1}},
	} {
		if _, err := batch.New(newGated(), tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.cfg)
		}
	}
}

// Requests of different keys never share a batch: each batch holds the
// oldest queued request and the later ones of its key, and the others
// keep their order for the next batches.
func TestKeysKeepRequestsApart(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	g := newGated()
	b := start(t, g, batch.Config{MaxBatchSize: 8, MaxQueueDelay: time.Millisecond, Clock: clk})
	send := func(key string, v float32) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := b.DoKeyed(context.Background(), key, [][]float32{{v}})
			ch <- answer{res, err}
		}()
		return ch
	}
	first := send("a", 0)
	wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().ExecutingRequests == 1 }, "first request not executing")
	var rest []<-chan answer
	for i, key := range []string{"a", "b", "a", "b", "c"} {
		rest = append(rest, send(key, float32(i+1)))
		wait.Eventually(t, 10*time.Second, func() bool { return b.Stats().QueuedRequests == i+1 }, "request %d not queued", i+1)
	}
	close(g.gate)
	for i, ch := range append([]<-chan answer{first}, rest...) {
		if a := <-ch; a.err != nil || a.res.Outputs[0][0] != float32(2*i) {
			t.Fatalf("request %d: %+v", i, a)
		}
	}
	if batches, _ := g.executed(); !equal(batches, []int{1, 2, 2, 1}) {
		t.Fatalf("batches %v; want the first alone, then a's two, b's two, c's one", batches)
	}
}
