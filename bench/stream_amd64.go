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
