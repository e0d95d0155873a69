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

// readVariant is one way of reading a buffer past the caches with
// AVX-512 or AVX2 loads (streamRows): Rows rows of RowBytes at a time, their lines
// interleaved, each line prefetched PrefetchBytes ahead of its row (none
// at 0). BytesPerCPUS is the best of the reps.
type readVariant struct {
	Rows          int     `json:"rows"`
	RowBytes      int     `json:"row_bytes"`
	PrefetchBytes int     `json:"prefetch_bytes"`
	BytesPerCPUS  float64 `json:"bytes_per_cpu_s"`
}

// readVariants are the ways readCeiling tries: one stream with no
// prefetch and with lines prefetched 0.5 to 4 KiB ahead, and two or four
// rows of 4 KiB (an F16 row of 2,048 columns) interleaved, with no
// prefetch and with the next group's rows prefetched at the same offsets,
// as the F16 tile reads.
var readVariants = []readVariant{
	{Rows: 1}, {Rows: 1, PrefetchBytes: 512}, {Rows: 1, PrefetchBytes: 1024}, {Rows: 1, PrefetchBytes: 2048}, {Rows: 1, PrefetchBytes: 4096},
	{Rows: 2, RowBytes: 4096}, {Rows: 2, RowBytes: 4096, PrefetchBytes: 2 * 4096},
	{Rows: 4, RowBytes: 4096}, {Rows: 4, RowBytes: 4096, PrefetchBytes: 4 * 4096},
}

// readCeiling is the most one thread reads here, in bytes per CPU-second:
// the best of readVariants over a buffer of n bytes on huge pages, each
// measured reps times. It returns every variant's figure beside it, or
// nothing where the CPU has neither AVX-512 nor AVX2.
func readCeiling(n int64, reps int) (best float64, variants []readVariant) {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	b, free := hugeBuffer(int(n))
	defer free()
	for i := range b { // touch every page, so no read sees a fault
		b[i] = byte(i)
	}
	for _, v := range readVariants {
		if v.RowBytes == 0 {
			v.RowBytes = len(b) &^ 255
		}
		for range reps {
			c0 := cpuTime()
			if _, ok := streamRows(b, v.Rows, v.RowBytes, v.PrefetchBytes); !ok {
				return 0, nil
			}
			if d := (cpuTime() - c0).Seconds(); d > 0 {
				v.BytesPerCPUS = max(v.BytesPerCPUS, float64(n)/d)
			}
		}
		v.BytesPerCPUS = round3(v.BytesPerCPUS)
		best = max(best, v.BytesPerCPUS)
		variants = append(variants, v)
	}
	return best, variants
}
