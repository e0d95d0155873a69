//go:build !linux

package versioncheck

import (
	"errors"
	"syscall"
)

// childAttr has no user, namespaces or death signal to set off Linux; the
// child still gets an empty environment and the time limit.
func childAttr(int, int, bool) *syscall.SysProcAttr { return nil }

func nsRefused(error) bool { return false }

// limitSelf sets nothing off Linux; the time limit still holds.
func limitSelf(ChildLimits) error { return nil }

var errNoSeccomp = errors.New("seccomp is linux only")

func installSeccomp() error { return errNoSeccomp }
