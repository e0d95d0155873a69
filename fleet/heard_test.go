package fleet

import (
	"testing"
	"time"
)

// TestHeardTreatsAFleetWideSilenceAsDeafness: while no heartbeat arrives the
// control plane counts as having just started listening (so it declares no
// node lost); once heartbeats resume it has listened since they resumed.
func TestHeardTreatsAFleetWideSilenceAsDeafness(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var h heard
	if got := h.since(t0); !got.Equal(t0) {
		t.Fatalf("never heard: since = %v, want now", got)
	}
	for s := 0; s <= 60; s += 3 {
		h.beat(t0.Add(time.Duration(s) * time.Second))
	}
	if got := h.since(t0.Add(61 * time.Second)); !got.Equal(t0) {
		t.Fatalf("steady heartbeats: since = %v, want %v", got, t0)
	}
	// NATS gone for 30 s: deaf the whole time.
	if now := t0.Add(90 * time.Second); !h.since(now).Equal(now) {
		t.Fatalf("silent fleet: since = %v, want now", h.since(now))
	}
	back := t0.Add(91 * time.Second)
	h.beat(back)
	if got := h.since(back.Add(2 * time.Second)); !got.Equal(back) {
		t.Fatalf("after the silence: since = %v, want %v", got, back)
	}
}
