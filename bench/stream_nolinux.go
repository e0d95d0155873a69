//go:build !linux

package bench

// hugeBuffer is n bytes from the Go heap where there is no madvise.
func hugeBuffer(n int) (b []byte, free func()) { return make([]byte, n), func() {} }
