package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Service is a background loop. Start returns once the loop runs (or fails
// to start, with the reason); the loop then runs until Stop is called or
// ctx ends. Stop returns once the loop has ended; it may be called without
// a Start, and more than once. A stopped Service may be started again: a
// leader lease starts and stops its loops at every change of leadership.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// ErrStarted is returned by a Start whose Service is already running.
var ErrStarted = errors.New("already started")

// Runner runs a Service's one goroutine. Embed it: the loop's Start calls
// Go with its run function, and Runner's Stop is the loop's Stop.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Go starts run on its own goroutine with a context that ends at Stop or
// when ctx ends. It returns ErrStarted while a previous run is still held
// (Stop releases it, even when run ended by itself).
func (r *Runner) Go(ctx context.Context, run func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.cancel, r.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
	return nil
}

// Stop cancels the run and waits for it to return.
func (r *Runner) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Tick calls fn at once, then again every interval and whenever wake
// receives (a nil wake never does), until ctx ends. The ticker is clock's,
// so a test with a quartz mock decides when the next round runs.
func Tick(ctx context.Context, clock quartz.Clock, interval time.Duration, wake <-chan struct{}, fn func(ctx context.Context)) {
	t := clock.NewTicker(interval)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// Sleep waits d on clock, or less when ctx ends first; it reports whether
// the whole wait passed.
func Sleep(ctx context.Context, clock quartz.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Func is a Service made of one blocking function: run works until its
// context ends. It suits a loop with no state of its own to hold between
// runs.
type Func struct {
	Runner
	run func(ctx context.Context)
}

// NewFunc returns run as a Service.
func NewFunc(run func(ctx context.Context)) *Func { return &Func{run: run} }

// Start runs the function on its own goroutine.
func (f *Func) Start(ctx context.Context) error { return f.Go(ctx, f.run) }

// Group starts its services in order and stops them in reverse, so a
// service may rely on the ones listed before it. It is a Service itself.
type Group struct {
	services []Service
	mu       sync.Mutex
	started  []Service
}

// NewGroup returns a Group of services.
func NewGroup(services ...Service) *Group { return &Group{services: services} }

// Add appends services; they start with the next Start.
func (g *Group) Add(services ...Service) { g.services = append(g.services, services...) }

// Start starts every service in order. When one fails, those already
// started are stopped and the error names the one that failed.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started != nil {
		return ErrStarted
	}
	g.started = []Service{}
	for _, s := range g.services {
		if err := s.Start(ctx); err != nil {
			g.stopLocked()
			return fmt.Errorf("start %T: %w", s, err)
		}
		g.started = append(g.started, s)
	}
	return nil
}

// Stop stops the started services in reverse order.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopLocked()
}

func (g *Group) stopLocked() {
	for i := len(g.started) - 1; i >= 0; i-- {
		g.started[i].Stop()
	}
	g.started = nil
}
