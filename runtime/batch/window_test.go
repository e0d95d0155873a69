package batch

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coder/quartz"
)

// sizes records the rows of every batch executed; its Predict takes no
// virtual time and answers each row with its own first value.
type sizes []int

func (s *sizes) Predict(rows [][]float32) ([][]float32, error) {
	*s = append(*s, len(rows))
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = []float32{r[0]}
	}
	return out, nil
}

// simulate drives the executor's steps by hand in virtual time: requests of
// one row arrive at the given offsets, and the clock moves to the next
// arrival or to the close of the open window, whichever is first. It returns
// the rows of each batch and each request's wait in the queue, in arrival
// order.
func simulate(t *testing.T, cfg Config, arrivals []time.Duration) (batches []int, waits []time.Duration) {
	t.Helper()
	ctx := context.Background()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	cfg.Clock = clk
	var got sizes
	b, err := New(&got, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	var reqs []*request[[]float32]
	var wakeAt time.Time
	for i := 0; i < len(arrivals) || len(b.queue) > 0; {
		var next time.Time
		if i < len(arrivals) {
			next = start.Add(arrivals[i])
		}
		if !wakeAt.IsZero() && (next.IsZero() || wakeAt.Before(next)) {
			next = wakeAt
		}
		if next.IsZero() {
			t.Fatal("requests queued with no window open")
		}
		clk.Set(next).MustWait(ctx)
		for i < len(arrivals) && !start.Add(arrivals[i]).After(next) {
			r, err := b.enqueue(ctx, "", [][]float32{{float32(i)}})
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, r)
			i++
		}
		wakeAt = time.Time{}
		for {
			ran, wait, idle := b.step()
			if ran {
				continue
			}
			if !idle {
				wakeAt = clk.Now().Add(wait)
			}
			break
		}
	}
	for i, r := range reqs {
		o := <-r.done
		if o.err != nil {
			t.Fatalf("request %d: %v", i, o.err)
		}
		if o.res.Outputs[0][0] != float32(i) {
			t.Fatalf("request %d got the answer of row %v", i, o.res.Outputs[0][0])
		}
		waits = append(waits, o.res.Queue)
	}
	return got, waits
}

func mean(xs []int) float64 {
	s := 0
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

// poisson returns n arrival offsets with exponential gaps of the given mean.
func poisson(seed uint64, n int, gap time.Duration) []time.Duration {
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]time.Duration, n)
	at := time.Duration(0)
	for i := range out {
		at += time.Duration(r.ExpFloat64() * float64(gap))
		out[i] = at
	}
	return out
}

func regular(n int, gap time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * gap
	}
	return out
}

func TestWindowIsZeroAtLowLoad(t *testing.T) {
	t.Parallel()
	const delay = time.Millisecond
	batches, waits := simulate(t, Config{MaxBatchSize: 8, MaxQueueDelay: delay}, regular(50, 5*delay))
	for i, w := range waits {
		if w != 0 {
			t.Fatalf("request %d waited %v at one request per 5 ms; want 0", i, w)
		}
	}
	if len(batches) != 50 {
		t.Fatalf("got %d batches for 50 lone requests, want 50", len(batches))
	}
}

func TestConcurrentLoadBatchesWithinMaxDelay(t *testing.T) {
	t.Parallel()
	const delay = time.Millisecond
	for _, tc := range []struct {
		name string
		gap  time.Duration
	}{
		{"ten arrivals per max delay", delay / 10},
		{"three arrivals per max delay", delay / 3},
		{"fifty arrivals per max delay", delay / 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			batches, waits := simulate(t, Config{MaxBatchSize: 16, MaxQueueDelay: delay}, poisson(7, 2000, tc.gap))
			for i, w := range waits {
				if w > delay {
					t.Fatalf("request %d waited %v, past the max queue delay %v", i, w, delay)
				}
			}
			for i, n := range batches {
				if n > 16 {
					t.Fatalf("batch %d has %d rows, past the max batch size 16", i, n)
				}
			}
			if m := mean(batches); m <= 1 {
				t.Fatalf("mean batch %.2f under load; want > 1", m)
			}
		})
	}
}

func TestWindowGrowsWithLoad(t *testing.T) {
	t.Parallel()
	const delay = time.Millisecond
	cfg := Config{MaxBatchSize: 64, MaxQueueDelay: delay}
	var prev float64
	for i, gap := range []time.Duration{4 * delay, delay / 2, delay / 8, delay / 32} {
		batches, _ := simulate(t, cfg, poisson(11, 3000, gap))
		m := mean(batches)
		if i == 0 && m > 1.1 {
			t.Errorf("mean batch %.2f at one arrival per 4 max delays; want about 1", m)
		}
		if m <= prev {
			t.Errorf("mean batch %.2f at gap %v is not above %.2f at the lower load", m, gap, prev)
		}
		prev = m
	}
}

func TestSteadyLoadFillsTheBatchAsItsLastRequestArrives(t *testing.T) {
	t.Parallel()
	const delay = time.Millisecond
	batches, waits := simulate(t, Config{MaxBatchSize: 8, MaxQueueDelay: delay}, regular(81, delay/10))
	// The first request has no rate to go by and runs alone; then every
	// batch fills to 8 in 7 gaps, within the max delay of 10 gaps.
	if batches[0] != 1 {
		t.Fatalf("first batch %d rows, want 1", batches[0])
	}
	for i, n := range batches[1:] {
		if n != 8 {
			t.Fatalf("batch %d has %d rows, want 8: %v", i+1, n, batches)
		}
	}
	for i := 1; i < len(waits); i += 8 {
		if want := 7 * delay / 10; waits[i] != want {
			t.Fatalf("oldest request %d of its batch waited %v, want %v", i, waits[i], want)
		}
		if waits[i+7] != 0 {
			t.Fatalf("request %d, which filled its batch, waited %v, want 0", i+7, waits[i+7])
		}
	}
}

func TestPreferredSizeRunsAtOnce(t *testing.T) {
	t.Parallel()
	const delay = time.Millisecond
	batches, waits := simulate(t, Config{MaxBatchSize: 32, MaxQueueDelay: delay, PreferredBatchSizes: []int{4}}, regular(41, delay/20))
	for i, n := range batches[1:] {
		if n != 4 {
			t.Fatalf("batch %d has %d rows, want the preferred 4: %v", i+1, n, batches)
		}
	}
	for i := 4; i < len(waits); i += 4 {
		if waits[i] != 0 {
			t.Fatalf("request %d reached the preferred size and waited %v, want 0", i, waits[i])
		}
	}
}

func TestZeroDelayNeverWaits(t *testing.T) {
	t.Parallel()
	_, waits := simulate(t, Config{MaxBatchSize: 8}, poisson(3, 500, time.Microsecond))
	for i, w := range waits {
		if w != 0 {
			t.Fatalf("request %d waited %v with no queue delay", i, w)
		}
	}
}
