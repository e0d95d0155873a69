package autoscale

import "time"

// RateWindow is how far back a replica's requests per second (RPS), and
// its tokens and prompt tokens per second, are measured: by the control
// plane's loop from the counters in the replica's heartbeats (Counters),
// and by the simulated replicas of the scenarios, whose figures are
// therefore the loop's. A counter's growth between two heartbeats (3 s
// apart) swings with each second's arrivals, and the scale-down window
// then holds the highest swing: at 3 s every built-in scenario but burst
// held more replicas (docs/autoscaling.md, "One rate window").
const RateWindow = 15 * time.Second

// Counters turns each replica's counters (requests, tokens, prompt
// tokens), as its heartbeats report them, into rates per second over the
// last RateWindow, as the scenarios measure them; each is kept under a key
// of the caller's that names the replica and the counter. A replica that
// appeared after the first round is measured over the whole window for
// its first window (over the rounds so far when they are fewer):
// least-outstanding routing sends a new replica every arrival until it
// catches up, and its rate over its own short life would ask for a second
// scale-up. A replica there at the first round, or whose readings started
// over, is measured over its readings until they span the window. The
// zero Counters is ready; it is not safe for concurrent use.
type Counters struct {
	start   time.Time // the first round
	history map[string]*counter
}

type counter struct {
	first time.Time // the round the replica was first seen in
	// readings within the window, oldest first, and the newest before it
	readings []reading
	seen     bool // since the last Retain
}

type reading struct {
	at time.Time
	n  int64
}

// Rate records, in the round at now, the reading n of the counter key
// reported by a heartbeat observed at at, and returns its rate per
// second; false when it cannot tell yet: one reading of a replica that
// was there at the first round (or whose readings started over), which
// the caller measures otherwise. A counter that went down (the runtime
// restarted) starts over from n; a heartbeat seen before (the loop reads
// the stored one each round) adds nothing.
func (c *Counters) Rate(key string, now, at time.Time, n int64) (float64, bool) {
	h := c.of(key, now)
	if k := len(h.readings); k == 0 || n < h.readings[k-1].n {
		h.readings = append(h.readings[:0], reading{at, n})
	} else if at.After(h.readings[k-1].at) {
		h.readings = append(h.readings, reading{at, n})
	}
	last := h.readings[len(h.readings)-1]
	// Keep the newest reading at or before the window's start as the base.
	from := last.at.Add(-RateWindow)
	drop := 0
	for drop+1 < len(h.readings) && !h.readings[drop+1].at.After(from) {
		drop++
	}
	h.readings = append(h.readings[:0], h.readings[drop:]...)
	base := h.readings[0]
	over := last.at.Sub(base.at)
	// New: first seen after the first round, less than a window ago.
	young := h.first.After(c.start) && now.Sub(h.first) < RateWindow
	if young && base.at.After(from) {
		over = min(RateWindow, now.Sub(c.start))
	}
	if over <= 0 {
		return 0, young
	}
	return float64(last.n-base.n) / over.Seconds(), true
}

// Reset drops key's readings in the round at now: the counter could not
// be read, so no rate is made across the gap.
func (c *Counters) Reset(key string, now time.Time) {
	h := c.of(key, now)
	h.readings = h.readings[:0]
}

func (c *Counters) of(key string, now time.Time) *counter {
	if c.history == nil {
		c.history, c.start = map[string]*counter{}, now
	}
	h := c.history[key]
	if h == nil {
		h = &counter{first: now}
		c.history[key] = h
	}
	h.seen = true
	return h
}

// Retain forgets every counter neither Rate nor Reset saw since the last
// Retain: it ends a round of the loop.
func (c *Counters) Retain() {
	for name, h := range c.history {
		if !h.seen {
			delete(c.history, name)
		}
		h.seen = false
	}
}
