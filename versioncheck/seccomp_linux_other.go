//go:build linux && !amd64

package versioncheck

// installSeccomp installs no filter off amd64: the deny list names amd64
// syscall numbers. The child keeps its other limits (docs/security.md).
func installSeccomp() error { return nil }
