package bench

import (
	"time"

	"github.com/coder/quartz"
)

// standingClock is a quartz.Clock whose time stands at at: the chargeback
// benchmark reads and seals closed periods, which only ask the time. Its
// timers are the real clock's (none of those services sets one outside
// their Start, which the benchmark does not call).
type standingClock struct {
	quartz.Clock
	at time.Time
}

func newStandingClock(at time.Time) standingClock {
	return standingClock{Clock: quartz.NewReal(), at: at}
}

// Now returns the instant the clock stands at.
func (c standingClock) Now(...string) time.Time { return c.at }

// Since returns how long before the standing instant t was.
func (c standingClock) Since(t time.Time, _ ...string) time.Duration { return c.at.Sub(t) }

// Until returns how long after the standing instant t is.
func (c standingClock) Until(t time.Time, _ ...string) time.Duration { return t.Sub(c.at) }

// engineClock is a cpuClock as the LLM engine reads it: t0 plus the CPU
// time so far. The engine only reads the time; its timers would be the
// real clock's.
type engineClock struct {
	quartz.Clock
	t0  time.Time
	cpu *cpuClock
}

func newEngineClock(t0 time.Time, cpu *cpuClock) engineClock {
	return engineClock{Clock: quartz.NewReal(), t0: t0, cpu: cpu}
}

// Now returns t0 plus the CPU time so far.
func (c engineClock) Now(...string) time.Time { return c.t0.Add(c.cpu.now()) }

// Since returns the CPU time since t.
func (c engineClock) Since(t time.Time, _ ...string) time.Duration { return c.Now().Sub(t) }

// Until returns the CPU time until t.
func (c engineClock) Until(t time.Time, _ ...string) time.Duration { return t.Sub(c.Now()) }
