package agent

import (
	"context"
	"net"
	"strconv"
	"testing"

	"modelplane/internal/freeport"
)

// TestSimDriverListensOnlyInItsRange: with a port range, a replica listens
// on a port of it, even when asked to come back at an address outside it,
// and the next free port is taken when the first is busy.
func TestSimDriverListensOnlyInItsRange(t *testing.T) {
	t.Parallel()
	// Two ports next to each other, the first one held busy.
	var first int
	var busy net.Listener
	for range 50 {
		p, err := freeport.Get()
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		probe, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		if err != nil {
			ln.Close()
			continue
		}
		probe.Close()
		first, busy = p, ln
		break
	}
	if busy == nil {
		t.Skip("no two adjacent free ports")
	}
	defer busy.Close()
	d := NewSimDriver(SimDriverConfig{Log: testLog(t), PortFirst: first, PortLast: first + 1})
	t.Cleanup(func() { d.Close(context.Background()) })
	r, err := d.Start(t.Context(), classifier("r1", 0), StartOptions{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(first+1)); r.Addr() != want {
		t.Errorf("replica at %s, want %s (the free port of the range)", r.Addr(), want)
	}
	if _, err := d.Start(t.Context(), classifier("r2", 1), StartOptions{}); err == nil {
		t.Error("a third replica started with every port of the range taken")
	}
}
