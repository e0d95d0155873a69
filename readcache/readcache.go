package readcache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Options bound a Cache; zero values take the defaults.
type Options struct {
	// Clock dates every answer (quartz.NewReal() when nil).
	Clock quartz.Clock
	// Fresh is how long an answer is served without a refresh (default
	// 15 s).
	Fresh time.Duration
	// MaxAge is the staleness bound: no answer older is served (default
	// 2 minutes; at least Fresh).
	MaxAge time.Duration
	// MaxEntries caps the keys kept (default 1,024): past it, the oldest
	// answer goes.
	MaxEntries int
	// ReadTimeout bounds every read, which no caller's context limits
	// (default 30 s).
	ReadTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	if o.Fresh <= 0 {
		o.Fresh = 15 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 2 * time.Minute
	}
	o.MaxAge = max(o.MaxAge, o.Fresh)
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1024
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	return o
}

// Cache keeps one answer per key.
type Cache[K comparable, V any] struct {
	opts Options

	mu      sync.Mutex
	entries map[K]*entry[V]
}

type entry[V any] struct {
	value V
	at    time.Time
	ok    bool
	// loading is closed when the read under way ends; nil when none is.
	loading chan struct{}
	err     error
}

// New returns an empty Cache.
func New[K comparable, V any](opts Options) *Cache[K, V] {
	return &Cache[K, V]{opts: opts.withDefaults(), entries: map[K]*entry[V]{}}
}

// Answer is a value and the time it was read.
type Answer[V any] struct {
	Value V
	At    time.Time
}

// Get returns key's answer: a kept one within the bounds above, or the
// answer of read, called now (at most once at a time per key). read never
// runs on a caller's context: it gets one of its own, bounded by
// Options.ReadTimeout, that keeps ctx's values but not its cancellation or
// deadline, so a caller that goes away (a closed page, a client's
// timeout) fails neither the other callers waiting on the same read nor
// the answer kept for the next. A caller whose ctx ends first returns
// ctx's error while the read goes on.
func (c *Cache[K, V]) Get(ctx context.Context, key K, read func(context.Context) (V, error)) (Answer[V], error) {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	e := c.entries[key]
	if e != nil && e.ok && now.Sub(e.at) < c.opts.MaxAge {
		a := Answer[V]{Value: e.value, At: e.at}
		if now.Sub(e.at) >= c.opts.Fresh && e.loading == nil {
			c.startLocked(ctx, e, read)
		}
		c.mu.Unlock()
		return a, nil
	}
	if e == nil {
		e = &entry[V]{}
		c.entries[key] = e
	}
	done := e.loading
	if done == nil {
		done = c.startLocked(ctx, e, read)
		c.evictLocked()
	}
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return Answer[V]{}, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil && !e.ok {
		return Answer[V]{}, e.err
	}
	if !e.ok {
		return Answer[V]{}, errors.New("readcache: read ended without an answer")
	}
	return Answer[V]{Value: e.value, At: e.at}, nil
}

// startLocked starts a read of e in the background, on a context of its
// own (see Get), and returns the channel closed when it ends.
func (c *Cache[K, V]) startLocked(ctx context.Context, e *entry[V], read func(context.Context) (V, error)) chan struct{} {
	done := make(chan struct{})
	e.loading = done
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReadTimeout)
	go func() {
		defer cancel()
		c.finish(rctx, e, done, read)
	}()
	return done
}

// finish runs read and stores its answer, dated when the read began (what
// it saw is at least that old). A failed read keeps the answer there was
// and returns its error to the callers waiting on it.
func (c *Cache[K, V]) finish(ctx context.Context, e *entry[V], done chan struct{}, read func(context.Context) (V, error)) {
	at := c.opts.Clock.Now()
	v, err := read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	e.err = err
	if err == nil {
		e.value, e.at, e.ok = v, at, true
	} else if e.ok && c.opts.Clock.Now().Sub(e.at) >= c.opts.MaxAge {
		e.ok = false
	}
	e.loading = nil
	close(done)
}

// evictLocked drops the oldest answers past MaxEntries; keys being read
// stay.
func (c *Cache[K, V]) evictLocked() {
	for len(c.entries) > c.opts.MaxEntries {
		var oldest K
		var at time.Time
		found := false
		for k, e := range c.entries {
			if e.loading != nil {
				continue
			}
			if !found || e.at.Before(at) {
				oldest, at, found = k, e.at, true
			}
		}
		if !found {
			return
		}
		delete(c.entries, oldest)
	}
}
