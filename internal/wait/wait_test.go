package wait_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/internal/wait"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	wait.Eventually(t, time.Minute, func() bool { return n.Add(1) == 3 }, "never true")
	if got := n.Load(); got != 3 {
		t.Fatalf("condition called %d times, want 3: Eventually must return as soon as it holds", got)
	}
}

// recorder is a testing.TB that keeps what Fatalf said instead of failing.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

// Fatalf records the message and ends the goroutine, as t.Fatalf does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestEventuallyFailsWithMessageAndWait(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	var seen struct{ v int }
	func() {
		defer func() {
			if p := recover(); p != r {
				panic(p)
			}
		}()
		wait.Eventually(r, 3*wait.Interval, func() bool { seen.v++; return false }, "count at %v, want %d", wait.Show(func() any { return seen.v }), -1)
	}()
	if !strings.HasPrefix(r.msg, fmt.Sprintf("count at %d, want -1 (waited ", seen.v)) || !strings.HasSuffix(r.msg, "ms)") {
		t.Fatalf("message %q, want the condition's last state and how long it waited", r.msg)
	}
}

func TestReceiveReturnsTheValueOrFails(t *testing.T) {
	t.Parallel()
	// Unbuffered: Receive sees the value only once the sender is ready,
	// so it may poll several times first.
	ch := make(chan int)
	go func() { ch <- 7 }()
	if got := wait.Receive(t, time.Minute, ch, "nothing sent"); got != 7 {
		t.Fatalf("Receive = %d, want 7", got)
	}
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				panic(p)
			}
		}()
		wait.Receive(r, 3*wait.Interval, make(chan string), "no %s", "reply")
	}()
	if !strings.HasPrefix(r.msg, "no reply (waited ") {
		t.Fatalf("message %q, want the caller's and how long it waited", r.msg)
	}
}
