package wait

import (
	"fmt"
	"testing"
	"time"
)

// Interval is how often Eventually checks its condition: short enough that
// a test goes on soon after the condition holds, long enough that polling
// a database or an HTTP endpoint does not load a small machine.
const Interval = 10 * time.Millisecond

// Eventually calls cond every Interval until it returns true, and fails
// the test with the message of format and args, and how long it waited,
// once timeout has passed without it. cond is called at least once, and
// once more after the deadline, so a condition that holds exactly then
// still passes.
//
// The message is formatted only on failure: an argument that is a
// fmt.Stringer, such as a Show, reports the state at that moment, not at
// the call. Like t.FailNow, Eventually must be called
// from the goroutine running the test.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			if cond() {
				return
			}
			t.Fatalf("%s (waited %v)", fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
		}
		<-tick.C
	}
}

// Show is an argument of Eventually's message that is read when the
// message is formatted, on failure, and printed with %+v: the state the
// condition gave up on, not the state when the wait began.
type Show func() any

// String formats the value f returns now.
func (f Show) String() string { return fmt.Sprintf("%+v", f()) }

// Receive returns the next value from ch, failing the test with the
// message of format and args, as Eventually does, when none comes within
// timeout.
func Receive[T any](t testing.TB, timeout time.Duration, ch <-chan T, format string, args ...any) T {
	t.Helper()
	var v T
	Eventually(t, timeout, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	}, format, args...)
	return v
}
