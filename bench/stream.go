package bench

import (
	"encoding/binary"
	goruntime "runtime"
)

// streamBandwidth is this machine's single-thread streaming read
// bandwidth in bytes per CPU-second: the best of reps reads of a buffer of
// n bytes, each timed by the process's CPU time as the engines' tokens/s
// are. For a buffer well past the caches it is the bound of a decode step
// at batch 1, which reads every weight once.
func streamBandwidth(n int64, reps int) float64 {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	b := make([]byte, n)
	for i := range b { // touch every page, so no read sees a fault
		b[i] = byte(i)
	}
	best := 0.0
	for range reps {
		c0 := cpuTime()
		streamRead(b) // asm, or a Go loop the compiler keeps: a call is never dropped
		if d := (cpuTime() - c0).Seconds(); d > 0 {
			best = max(best, float64(n)/d)
		}
	}
	return best
}

// streamReadGo is streamRead without SIMD: eight bytes a load.
func streamReadGo(b []byte) uint64 {
	var s0, s1 uint64
	for len(b) >= 16 {
		s0 ^= binary.LittleEndian.Uint64(b)
		s1 ^= binary.LittleEndian.Uint64(b[8:])
		b = b[16:]
	}
	for _, c := range b {
		s0 ^= uint64(c)
	}
	return s0 ^ s1
}
