package readcache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
	"modelplane/readcache"
)

// counter is a read that answers how many times it was called.
type counter struct{ n atomic.Int64 }

func (c *counter) read(context.Context) (int64, error) { return c.n.Add(1), nil }

func get(t *testing.T, c *readcache.Cache[string, int64], key string, r *counter) readcache.Answer[int64] {
	t.Helper()
	a, err := c.Get(t.Context(), key, r.read)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFreshAnswersAreServedWithoutARead(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	c := readcache.New[string, int64](readcache.Options{Clock: clk, Fresh: 10 * time.Second, MaxAge: time.Minute})
	var r counter
	t0 := clk.Now()
	if a := get(t, c, "k", &r); a.Value != 1 || !a.At.Equal(t0) {
		t.Fatalf("first get = %+v, want the first read at %s", a, t0)
	}
	clk.Advance(9 * time.Second)
	if a := get(t, c, "k", &r); a.Value != 1 || r.n.Load() != 1 {
		t.Errorf("within Fresh: answer %d after %d reads, want the first and no new read", a.Value, r.n.Load())
	}
	if a := get(t, c, "other", &r); a.Value != 2 {
		t.Errorf("another key: answer %d, want a read of its own", a.Value)
	}
}

func TestStaleAnswersAreServedWhileABackgroundReadRefreshesThem(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	c := readcache.New[string, int64](readcache.Options{Clock: clk, Fresh: 10 * time.Second, MaxAge: time.Minute})
	release := make(chan struct{})
	var n atomic.Int64
	read := func(context.Context) (int64, error) {
		if n.Add(1) > 1 {
			<-release
		}
		return n.Load(), nil
	}
	if _, err := c.Get(t.Context(), "k", read); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	// The refresh is held: callers still get the old answer at once, and
	// only one refresh runs however many call.
	for range 5 {
		a, err := c.Get(t.Context(), "k", read)
		if err != nil || a.Value != 1 {
			t.Fatalf("stale get = %+v, %v; want the old answer at once", a, err)
		}
	}
	wait.Eventually(t, 10*time.Second, func() bool { return n.Load() == 2 }, "the background refresh never started")
	close(release)
	wait.Eventually(t, 10*time.Second, func() bool {
		a, err := c.Get(t.Context(), "k", read)
		return err == nil && a.Value == 2
	}, "the refreshed answer is never served")
	if got := n.Load(); got != 2 {
		t.Errorf("%d reads, want 2 (one refresh)", got)
	}
}

func TestAnswersPastMaxAgeAreNeverServed(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	c := readcache.New[string, int64](readcache.Options{Clock: clk, Fresh: 10 * time.Second, MaxAge: time.Minute})
	var r counter
	get(t, c, "k", &r)
	clk.Advance(time.Minute)
	if a := get(t, c, "k", &r); a.Value != 2 || !a.At.Equal(clk.Now()) {
		t.Errorf("past MaxAge: answer %+v, want a new read at %s", a, clk.Now())
	}
}

func TestCallersOfAKeyShareOneRead(t *testing.T) {
	t.Parallel()
	c := readcache.New[string, int64](readcache.Options{Clock: quartz.NewMock(t)})
	release := make(chan struct{})
	var n, started atomic.Int64
	read := func(context.Context) (int64, error) {
		started.Add(1)
		<-release
		return n.Add(1), nil
	}
	var wg sync.WaitGroup
	got := make([]int64, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Go(func() {
			a, err := c.Get(context.Background(), "k", read)
			got[i], errs[i] = a.Value, err
		})
	}
	wait.Eventually(t, 10*time.Second, func() bool { return started.Load() == 1 }, "no read started")
	close(release)
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != 1 {
			t.Errorf("caller %d: %d, %v; want the one read's answer", i, got[i], errs[i])
		}
	}
	if s := started.Load(); s != 1 {
		t.Errorf("%d reads, want 1", s)
	}
}

func TestFailedReadsAreNotKept(t *testing.T) {
	t.Parallel()
	c := readcache.New[string, int64](readcache.Options{Clock: quartz.NewMock(t)})
	boom := errors.New("clickhouse down")
	if _, err := c.Get(t.Context(), "k", func(context.Context) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed read: %v, want %v", err, boom)
	}
	var r counter
	if a := get(t, c, "k", &r); a.Value != 1 {
		t.Errorf("after a failure: answer %d, want a new read", a.Value)
	}
}

func TestTheOldestAnswerGoesPastMaxEntries(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	c := readcache.New[string, int64](readcache.Options{Clock: clk, MaxEntries: 2})
	var r counter
	get(t, c, "a", &r)
	clk.Advance(time.Second)
	get(t, c, "b", &r)
	clk.Advance(time.Second)
	get(t, c, "c", &r) // a goes
	if a := get(t, c, "b", &r); a.Value != 2 {
		t.Errorf("b = %d, want its kept answer 2", a.Value)
	}
	if a := get(t, c, "a", &r); a.Value != 4 {
		t.Errorf("a = %d, want a new read (4): it was the oldest", a.Value)
	}
}

// TestACallerThatGoesAwayFailsNoOneElse: the read a first caller started
// does not run on that caller's context, so when the caller goes away
// (a closed page, a client's timeout) the callers waiting on the same read
// still get its answer, and the answer is kept for the next ones.
func TestACallerThatGoesAwayFailsNoOneElse(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	c := readcache.New[string, int64](readcache.Options{Clock: clk, Fresh: 10 * time.Second, MaxAge: time.Minute})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var n atomic.Int64
	read := func(ctx context.Context) (int64, error) {
		started <- struct{}{}
		select {
		case <-release:
			return n.Add(1), nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	first, leave := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Get(first, "k", read)
		firstErr <- err
	}()
	<-started
	leave()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want %v", err, context.Canceled)
	}
	// The read is still held: a second caller waits on it (or, if it
	// comes late, finds its answer kept); either way no read starts
	// again, and nobody gets the first caller's error.
	second := make(chan error, 1)
	var got readcache.Answer[int64]
	go func() {
		var err error
		got, err = c.Get(t.Context(), "k", read)
		second <- err
	}()
	close(release)
	if err := <-second; err != nil || got.Value != 1 {
		t.Fatalf("the caller waiting on the read got %+v, %v; want its answer 1", got, err)
	}
	if a := get(t, c, "k", &counter{}); a.Value != 1 || !a.At.Equal(clk.Now()) {
		t.Errorf("next caller: %+v, want the kept answer 1 read at %s", a, clk.Now())
	}
	select {
	case <-started:
		t.Errorf("a second read started: the first one failed with its caller")
	default:
	}
}
