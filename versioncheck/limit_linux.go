//go:build linux

package versioncheck

import "syscall"

// limitMemory caps this process's address space: an allocation past it
// fails (and the Go runtime exits) instead of the machine swapping.
func limitMemory(bytes int64) error {
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: uint64(bytes), Max: uint64(bytes)})
}
