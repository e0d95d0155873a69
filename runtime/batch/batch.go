package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
)

// Errors a request may be answered with instead of the model's outputs.
var (
	// ErrQueueTimeout answers a request that waited in the queue for
	// QueueTimeout without being taken into a batch. It was never
	// executed, so the caller may retry it elsewhere (the server answers
	// 503 with Retry-After).
	ErrQueueTimeout = errors.New("request timed out in the queue")
	// ErrStopped answers a request that arrives after Stop began.
	ErrStopped = errors.New("batcher stopped")
)

// Runner scores rows of any kind R (a feature row, or one sample's slice
// of every input tensor): the model. Predict is only ever called by the
// batcher's one executor goroutine, and returns one output row per input
// row, in order.
type Runner[R any] interface {
	Predict(rows []R) ([]R, error)
}

// Predictor is the Runner of feature rows, the tabular models.
type Predictor = Runner[[]float32]

// Config is the batcher's settings.
type Config struct {
	// MaxBatchSize is the most rows executed together; below 1 it is 1,
	// which turns batching off. A request of more rows than this is
	// executed alone, never split.
	MaxBatchSize int
	// MaxQueueDelay is the longest the batcher holds a request to let
	// others join its batch. The adaptive window is at most this.
	MaxQueueDelay time.Duration
	// PreferredBatchSizes are row counts at which a batch is executed at
	// once, without waiting for its window to close.
	PreferredBatchSizes []int
	// QueueTimeout is how long a request may wait in the queue at all
	// (behind a busy executor included); 0 is no limit. Past it the
	// request is answered ErrQueueTimeout and never executed.
	QueueTimeout time.Duration
	// Clock is the time source; nil is the real clock.
	Clock quartz.Clock
	// OnBatch, when set, is called by the executor after each execution
	// and before its requests are answered, so that metrics count the batch
	// by the time a caller sees its answer.
	OnBatch func(Executed)
}

// Executed describes one execution of the model.
type Executed struct {
	// Requests and Rows are what the batch held.
	Requests, Rows int
	// Compute is how long Predict took.
	Compute time.Duration
	// Err is Predict's error, nil on success.
	Err error
}

// Result is one feature-row request's answer.
type Result = Answer[[]float32]

// Answer is one request's answer.
type Answer[R any] struct {
	// Outputs are the model's output rows for the request's rows, in order.
	Outputs []R
	// Queue is how long the request waited before its batch began.
	Queue time.Duration
	// Compute is how long its batch's Predict took.
	Compute time.Duration
	// BatchRows is the number of rows its batch held.
	BatchRows int
}

// Stats is the batcher's state at one moment.
type Stats struct {
	// QueuedRequests and QueuedRows wait for a batch.
	QueuedRequests, QueuedRows int
	// ExecutingRequests and ExecutingRows are in the batch being executed
	// (0 while the executor is idle).
	ExecutingRequests, ExecutingRows int
	// LastBatchRows is the size of the last batch executed.
	LastBatchRows int
	// Batches and Rows count executions and the rows they held since
	// the start.
	Batches, Rows uint64
}

// Request states: a request is taken by exactly one of the executor (into a
// batch) and its own timeout or cancellation, by compare-and-swap, so that a
// request answered with an error is never executed.
const (
	stateQueued int32 = iota
	stateTaken
	stateAbandoned
)

type request[R any] struct {
	// key groups requests that may share a batch (see Queue.DoKeyed).
	key     string
	rows    []R
	arrived time.Time
	state   atomic.Int32
	done    chan outcome[R] // buffered: the answer never blocks the executor
}

type outcome[R any] struct {
	res Answer[R]
	err error
}

// gapWeight is the weight of the newest inter-arrival gap in the rate
// estimate: enough history to ride out one odd gap, short enough that the
// window follows a change of load within a handful of requests.
const gapWeight = 0.25

// Batcher is the Queue of feature rows.
type Batcher = Queue[[]float32]

// Queue queues requests of rows R and executes them in batches. Start it
// once; Stop drains it. Safe for concurrent use.
type Queue[R any] struct {
	p     Runner[R]
	cfg   Config
	clock quartz.Clock

	wake   chan struct{} // capacity 1: an arrival or Stop since the executor last looked
	exited chan struct{}

	mu       sync.Mutex
	queue    []*request[R]
	rows     int // rows in queue
	stopping bool
	// gap is the smoothed inter-arrival gap in nanoseconds (negative
	// before the second arrival); last is the latest arrival.
	gap  float64
	last time.Time
	st   Stats

	startOnce, stopOnce sync.Once
}

// New returns a batcher of feature rows; Start runs its executor.
func New(p Predictor, cfg Config) (*Batcher, error) { return NewQueue(p, cfg) }

// NewQueue returns a batcher of p; Start runs its executor.
func NewQueue[R any](p Runner[R], cfg Config) (*Queue[R], error) {
	if p == nil {
		return nil, errors.New("batch: nil predictor")
	}
	if cfg.MaxBatchSize < 1 {
		cfg.MaxBatchSize = 1
	}
	if cfg.MaxQueueDelay < 0 || cfg.QueueTimeout < 0 {
		return nil, errors.New("batch: negative delay or timeout")
	}
	for _, s := range cfg.PreferredBatchSizes {
		if s < 1 || s > cfg.MaxBatchSize {
			return nil, fmt.Errorf("batch: preferred batch size %d is not between 1 and the max batch size %d", s, cfg.MaxBatchSize)
		}
	}
	cfg.PreferredBatchSizes = slices.Clone(cfg.PreferredBatchSizes)
	slices.Sort(cfg.PreferredBatchSizes)
	clock := cfg.Clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Queue[R]{p: p, cfg: cfg, clock: clock, wake: make(chan struct{}, 1), exited: make(chan struct{}), gap: -1}, nil
}

// Start runs the executor goroutine. Calling it again does nothing.
func (b *Queue[R]) Start() {
	b.startOnce.Do(func() { go b.loop() })
}

// Stop refuses new requests, executes every queued one (without waiting
// for windows) and returns when the executor has ended or ctx does. A
// batcher never started answers its queue with ErrStopped.
func (b *Queue[R]) Stop(ctx context.Context) error {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		b.stopping = true
		b.mu.Unlock()
		b.signal()
		started := true
		b.startOnce.Do(func() { started = false })
		if !started {
			b.mu.Lock()
			for _, r := range b.queue {
				if r.state.CompareAndSwap(stateQueued, stateAbandoned) {
					r.done <- outcome[R]{err: ErrStopped}
				}
			}
			b.queue, b.rows = nil, 0
			b.mu.Unlock()
			close(b.exited)
		}
	})
	select {
	case <-b.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the batcher's current state.
func (b *Queue[R]) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	st.QueuedRequests, st.QueuedRows = len(b.queue), b.rows
	return st
}

// Do queues rows as one request and waits for its answer: the model's
// outputs, ErrQueueTimeout, ErrStopped, ctx's error (the request is then
// never executed, if it was still queued) or the model's error.
func (b *Queue[R]) Do(ctx context.Context, rows []R) (Answer[R], error) {
	return b.DoKeyed(ctx, "", rows)
}

// DoKeyed is Do for a request that shares a batch only with requests of
// the same key: a tensor model's rows batch together along the first axis
// only when their other dimensions agree, which the key names.
func (b *Queue[R]) DoKeyed(ctx context.Context, key string, rows []R) (Answer[R], error) {
	r, err := b.enqueue(ctx, key, rows)
	if err != nil {
		return Answer[R]{}, err
	}
	var timeout <-chan time.Time
	if b.cfg.QueueTimeout > 0 {
		t := b.clock.NewTimer(b.cfg.QueueTimeout, "batch", "timeout")
		defer t.Stop()
		timeout = t.C
	}
	select {
	case o := <-r.done:
		return o.res, o.err
	case <-timeout:
		if b.abandon(r) {
			return Answer[R]{}, ErrQueueTimeout
		}
	case <-ctx.Done():
		if b.abandon(r) {
			return Answer[R]{}, ctx.Err()
		}
	}
	// The executor took the request first: it is being executed, and its
	// answer comes.
	o := <-r.done
	return o.res, o.err
}

// enqueue queues a request, unless the batcher is stopping or ctx has
// already ended (a caller that left never queues work).
func (b *Queue[R]) enqueue(ctx context.Context, key string, rows []R) (*request[R], error) {
	if len(rows) == 0 {
		return nil, errors.New("batch: a request needs at least one row")
	}
	r := &request[R]{key: key, rows: rows, done: make(chan outcome[R], 1)}
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return nil, ErrStopped
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	r.arrived = b.clock.Now("batch", "arrive")
	b.observeArrivalLocked(r.arrived)
	b.queue = append(b.queue, r)
	b.rows += len(rows)
	b.mu.Unlock()
	b.signal()
	return r, nil
}

// observeArrivalLocked updates the smoothed inter-arrival gap. A gap is
// counted as at most twice the max delay: any gap past the max delay means
// low load already, and an hour's idleness must not take dozens of arrivals
// to forget.
func (b *Queue[R]) observeArrivalLocked(now time.Time) {
	if !b.last.IsZero() {
		g := float64(min(now.Sub(b.last), 2*b.cfg.MaxQueueDelay))
		if b.gap < 0 {
			b.gap = g
		} else {
			b.gap += gapWeight * (g - b.gap)
		}
	}
	b.last = now
}

// abandon takes a queued request out for its caller; false when the
// executor took it first.
func (b *Queue[R]) abandon(r *request[R]) bool {
	if !r.state.CompareAndSwap(stateQueued, stateAbandoned) {
		return false
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, r); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.rows -= len(r.rows)
	}
	b.mu.Unlock()
	return true
}

func (b *Queue[R]) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// loop is the executor: it steps until the queue is empty and waits for an
// arrival, or for the window of the queued batch to close.
func (b *Queue[R]) loop() {
	defer close(b.exited)
	for {
		ran, wait, idle := b.step()
		switch {
		case ran:
			continue
		case idle:
			b.mu.Lock()
			stop := b.stopping && len(b.queue) == 0
			b.mu.Unlock()
			if stop {
				return
			}
			<-b.wake
		default:
			t := b.clock.NewTimer(wait, "batch", "window")
			select {
			case <-t.C:
			case <-b.wake:
			}
			t.Stop()
		}
	}
}

// step is one pass of the executor: it answers the requests past their
// queue timeout, then either executes one batch (ran), reports an empty
// queue (idle), or says how long the batch's window stays open (wait).
func (b *Queue[R]) step() (ran bool, wait time.Duration, idle bool) {
	b.mu.Lock()
	now := b.clock.Now("batch", "plan")
	b.expireLocked(now)
	if len(b.queue) == 0 {
		b.mu.Unlock()
		return false, 0, true
	}
	if until := b.closesLocked(now); until.After(now) {
		b.mu.Unlock()
		return false, until.Sub(now), false
	}
	batch := b.takeLocked()
	b.mu.Unlock()
	b.execute(batch, now)
	return true, 0, false
}

// expireLocked answers ErrQueueTimeout to every queued request that has
// waited QueueTimeout; the request's own timer may not have fired yet.
func (b *Queue[R]) expireLocked(now time.Time) {
	if b.cfg.QueueTimeout <= 0 {
		return
	}
	kept := b.queue[:0]
	for _, r := range b.queue {
		if now.Sub(r.arrived) >= b.cfg.QueueTimeout && r.state.CompareAndSwap(stateQueued, stateAbandoned) {
			b.rows -= len(r.rows)
			r.done <- outcome[R]{err: ErrQueueTimeout}
			continue
		}
		kept = append(kept, r)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
}

// closesLocked is when the queued batch is executed. At once when it holds
// the max batch size, exactly a preferred size, or the batcher is stopping.
// Otherwise its window, counted from its oldest request's arrival, is the
// time the arrival rate needs to bring the rows still missing to the next
// preferred size (or the max): zero at low load, where fewer than one
// arrival is expected within the max delay (a lone request is executed at
// once), and growing with the load up to the max delay, which caps it, so
// that no request is held for others past MaxQueueDelay.
func (b *Queue[R]) closesLocked(now time.Time) time.Time {
	rows := min(b.rows, b.cfg.MaxBatchSize)
	if b.stopping || rows >= b.cfg.MaxBatchSize || slices.Contains(b.cfg.PreferredBatchSizes, rows) {
		return now
	}
	if b.gap < 0 || b.gap >= float64(b.cfg.MaxQueueDelay) {
		return now
	}
	target := b.cfg.MaxBatchSize
	if i, _ := slices.BinarySearch(b.cfg.PreferredBatchSizes, rows); i < len(b.cfg.PreferredBatchSizes) {
		target = b.cfg.PreferredBatchSizes[i]
	}
	fill := b.last.Add(time.Duration(float64(target-rows) * b.gap))
	return minTime(fill, b.queue[0].arrived.Add(b.cfg.MaxQueueDelay))
}

func minTime(a, c time.Time) time.Time {
	if a.Before(c) {
		return a
	}
	return c
}

// takeLocked takes the oldest requests that fit in MaxBatchSize rows (at
// least one, in arrival order) into a batch. Only requests of the oldest
// one's key join it; the others keep their place for a later batch.
func (b *Queue[R]) takeLocked() []*request[R] {
	var batch []*request[R]
	rows := 0
	kept := b.queue[:0]
	full := false
	for _, r := range b.queue {
		if full || len(batch) > 0 && (r.key != batch[0].key || rows+len(r.rows) > b.cfg.MaxBatchSize) {
			// A request of the batch's key that does not fit ends the
			// batch, so that a later one never overtakes it.
			full = full || len(batch) > 0 && r.key == batch[0].key
			kept = append(kept, r)
			continue
		}
		// Every queued request is still queued: one its caller abandons
		// leaves the queue under the lock held here.
		if r.state.CompareAndSwap(stateQueued, stateTaken) {
			batch = append(batch, r)
			rows += len(r.rows)
		}
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	b.rows -= rows
	b.st.ExecutingRequests, b.st.ExecutingRows = len(batch), rows
	return batch
}

// execute runs one batch through the model and answers its requests.
func (b *Queue[R]) execute(batch []*request[R], start time.Time) {
	var rows []R
	for _, r := range batch {
		rows = append(rows, r.rows...)
	}
	out, err := b.predict(rows)
	end := b.clock.Now("batch", "executed")
	if err == nil && len(out) != len(rows) {
		err = fmt.Errorf("model returned %d output rows for %d input rows", len(out), len(rows))
	}
	compute := end.Sub(start)
	b.mu.Lock()
	b.st.ExecutingRequests, b.st.ExecutingRows = 0, 0
	b.st.LastBatchRows = len(rows)
	b.st.Batches++
	b.st.Rows += uint64(len(rows))
	b.mu.Unlock()
	if b.cfg.OnBatch != nil {
		b.cfg.OnBatch(Executed{Requests: len(batch), Rows: len(rows), Compute: compute, Err: err})
	}
	i := 0
	for _, r := range batch {
		o := outcome[R]{err: err}
		if err == nil {
			o.res = Answer[R]{Outputs: out[i : i+len(r.rows) : i+len(r.rows)], Queue: start.Sub(r.arrived), Compute: compute, BatchRows: len(rows)}
		}
		i += len(r.rows)
		r.done <- o
	}
}

// predict calls the model, turning a panic into an error: Predict must not
// panic, but one that does must fail its batch, not the process.
func (b *Queue[R]) predict(rows []R) (out []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("model panicked: %v", p)
		}
	}()
	return b.p.Predict(rows)
}
