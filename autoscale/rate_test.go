package autoscale

import (
	"math"
	"testing"
	"time"
)

// TestCountersMeasureTheWindow: a replica's requests per second are the
// counter's growth over the last RateWindow (from the newest heartbeat at
// or before its start), so one busy interval between two heartbeats does
// not read as the replica's rate, and a heartbeat read twice adds nothing.
func TestCountersMeasureTheWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var c Counters
	n := int64(0)
	rate := func(at time.Duration) (float64, bool) {
		t.Helper()
		return c.Rate("r-1", t0.Add(at), t0.Add(at), n)
	}
	if _, ok := rate(0); ok {
		t.Fatal("one reading of a replica there at the first round gave a rate; want none (the caller's)")
	}
	// 100 req/s for 15 s, heartbeats every 3 s.
	for at := 3 * time.Second; at <= 15*time.Second; at += 3 * time.Second {
		n += 300
		if r, ok := rate(at); !ok || math.Abs(r-100) > 1e-9 {
			t.Fatalf("at %s: %v, %v; want 100/s", at, r, ok)
		}
	}
	// 300 req/s between two heartbeats: the window reads (4×300+900)/15.
	n += 900
	if r, ok := rate(18 * time.Second); !ok || math.Abs(r-140) > 1e-9 {
		t.Fatalf("after a busy interval: %v, %v; want 140/s over the window, not 300", r, ok)
	}
	// The same heartbeat read again by the next round.
	if r, ok := c.Rate("r-1", t0.Add(20*time.Second), t0.Add(18*time.Second), n); !ok || math.Abs(r-140) > 1e-9 {
		t.Fatalf("the same heartbeat again: %v, %v; want 140/s", r, ok)
	}
	// The busy interval leaves the window 15 s later.
	for at := 21 * time.Second; at <= 33*time.Second; at += 3 * time.Second {
		n += 300
		_, _ = rate(at)
	}
	if r, ok := rate(33 * time.Second); !ok || math.Abs(r-100) > 1e-9 {
		t.Fatalf("once the busy interval left the window: %v, %v; want 100/s", r, ok)
	}
}

// TestCountersMeasureANewReplicaOverTheWindow: a replica that appears
// after the first round is measured over the whole window (its requests
// since it was first seen, over 15 s), as the scenarios measure it, so
// the arrivals it takes while catching up do not read as the load; a
// counter that went down, or one Reset, starts over.
func TestCountersMeasureANewReplicaOverTheWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var c Counters
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	c.Rate("old", at(0), at(0), 0)
	c.Retain()
	// New at 60 s, 30 requests in its first 3 s.
	if r, ok := c.Rate("new", at(60*time.Second), at(60*time.Second), 0); !ok || r != 0 {
		t.Fatalf("a new replica's first reading: %v, %v; want 0", r, ok)
	}
	if r, ok := c.Rate("new", at(63*time.Second), at(63*time.Second), 30); !ok || math.Abs(r-2) > 1e-9 {
		t.Fatalf("a new replica after 3 s: %v, %v; want 30 requests over the 15 s window, 2/s", r, ok)
	}
	// Past the window it is measured as any other.
	if r, ok := c.Rate("new", at(78*time.Second), at(78*time.Second), 30+150); !ok || math.Abs(r-10) > 1e-9 {
		t.Fatalf("the replica 18 s on: %v, %v; want 10/s", r, ok)
	}
	// Its runtime restarts: the counter went down.
	if _, ok := c.Rate("new", at(81*time.Second), at(81*time.Second), 5); ok {
		t.Fatal("a counter that went down gave a rate from one reading")
	}
	if r, ok := c.Rate("new", at(84*time.Second), at(84*time.Second), 35); !ok || math.Abs(r-10) > 1e-9 {
		t.Fatalf("after the restart: %v, %v; want 30 over 3 s, 10/s", r, ok)
	}
	// Reset (an unread counter): no rate across the gap.
	c.Reset("new", at(86*time.Second))
	if _, ok := c.Rate("new", at(87*time.Second), at(87*time.Second), 500); ok {
		t.Fatal("a reading after Reset gave a rate from one reading")
	}
	// A replica not seen in a round is forgotten: seen again, it is new.
	c.Retain()
	c.Retain()
	if _, ok := c.history["new"]; ok {
		t.Fatal("a replica absent from a round was kept")
	}
}
