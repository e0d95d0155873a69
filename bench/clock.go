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
