package llm

// alloc hands out n bytes from the arena, their start aligned to a cache
// line, or from the Go heap when a is nil or full.
func (a *arena) alloc(n int) []byte {
	step := (n + 63) &^ 63
	if a == nil || step > len(a.free) {
		return make([]byte, n)
	}
	b := a.free[:n:n]
	a.free = a.free[step:]
	return b
}
