//go:build !linux

package llm

// arena is the weights' mapping where the kernel takes huge-page advice
// (arena_linux.go); elsewhere the weights are on the Go heap.
type arena struct{ free []byte }

func newArena(int) *arena { return nil }
