//go:build !purego

package bench

import "golang.org/x/sys/cpu"

// streamKernel names the loop streamRead runs here.
func streamKernel() string {
	if cpu.X86.HasAVX2 {
		return "avx2"
	}
	return "go"
}

// streamRead folds every byte of b into a word (see streamReadAVX2).
func streamRead(b []byte) uint64 {
	if !cpu.X86.HasAVX2 {
		return streamReadGo(b)
	}
	m := len(b) &^ 255
	s := uint64(0)
	if m > 0 {
		s = streamReadAVX2(&b[0], m)
	}
	return s ^ streamReadGo(b[m:])
}

//go:noescape
func streamReadAVX2(p *byte, n int) uint64

// streamRows reads b (see streamRows512) k rows of rowBytes at a time,
// prefetching dist bytes ahead of each row when dist > 0, and what is
// left past the last whole group with the plain loop; ok is false where
// the CPU has neither AVX-512 nor AVX2.
func streamRows(b []byte, k, rowBytes, dist int) (fold uint64, ok bool) {
	if k != 1 && k != 2 && k != 4 {
		panic("streamRows: k must be 1, 2 or 4")
	}
	if !cpu.X86.HasAVX512F && !cpu.X86.HasAVX2 {
		return 0, false
	}
	groups := len(b) / (k * rowBytes)
	m := groups * k * rowBytes
	if groups > 0 {
		if cpu.X86.HasAVX512F {
			fold = streamRows512(&b[0], groups, rowBytes, k, dist)
		} else {
			fold = streamRowsAVX2(&b[0], groups, rowBytes, k, dist)
		}
	}
	return fold ^ streamReadGo(b[m:]), true
}

//go:noescape
func streamRows512(p *byte, groups, rowBytes, k, dist int) uint64

//go:noescape
func streamRowsAVX2(p *byte, groups, rowBytes, k, dist int) uint64
