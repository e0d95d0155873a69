package llm

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on x86-64 and arm64.
const hugePage = 2 << 20

// arena is one anonymous mapping that holds every weight matrix of a
// model, aligned to 2 MiB and advised MADV_HUGEPAGE before a byte is
// written, so the whole of it (not only the aligned middle of each large
// matrix, as when each matrix came from the Go heap) can be on 2 MiB
// pages. A decode step streams every weight once, and with 4 KiB pages a
// 500 MB model is 130,000 TLB misses a token. The advice needs the
// kernel's transparent huge pages at "madvise" or "always"
// (/sys/kernel/mm/transparent_hugepage/enabled); at "never" the mapping
// is on 4 KiB pages and nothing else changes. A matrix keeps its arena
// alive (matrix.keep); the mapping is unmapped once no matrix holds it.
type arena struct {
	free []byte // the part of the mapping not yet handed out
}

// newArena maps n bytes; nil when the mapping fails, and then alloc takes
// memory from the Go heap.
func newArena(n int) *arena {
	if n <= 0 {
		return nil
	}
	size := (n + hugePage - 1) &^ (hugePage - 1)
	mem, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	off := int((p+hugePage-1)&^(hugePage-1) - p)
	a := &arena{free: mem[off : off+size]}
	_ = unix.Madvise(a.free, unix.MADV_HUGEPAGE) // advice: an error changes only speed
	runtime.AddCleanup(a, func(mem []byte) { _ = unix.Munmap(mem) }, mem)
	return a
}
