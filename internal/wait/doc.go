// Package wait is the one way tests wait for something to become true.
//
// A test that must see an effect of work running on another goroutine (a
// message consumed, a replica ready, a row written) polls a condition with
// Eventually instead of sleeping for a guessed time: it goes on as soon as
// the condition holds, and on a loaded machine it waits longer instead of
// failing. Time that the code under test measures itself (windows,
// backoffs, leases) is not waited for at all: such code takes a
// quartz.Clock, and the test moves a quartz.Mock by hand.
//
// The package must stay free of anything but the standard library, and
// must not be imported by non-test code.
package wait
