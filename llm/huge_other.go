//go:build !linux

package llm

// hugePages is advice the kernel takes on Linux only.
func hugePages([]byte) {}
