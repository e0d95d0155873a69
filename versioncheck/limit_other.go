//go:build !linux

package versioncheck

// limitMemory is a no-op where RLIMIT_AS is not available; the time limit
// still holds.
func limitMemory(int64) error { return nil }
