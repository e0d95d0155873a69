package bench

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeBuffer maps n bytes advised MADV_HUGEPAGE before a byte is written,
// as the engine's weights are (llm's arena), so a read of it sees 2 MiB
// pages where the kernel's transparent huge pages allow; free unmaps it.
// It falls back to the Go heap when the mapping fails.
func hugeBuffer(n int) (b []byte, free func()) {
	const huge = 2 << 20
	mem, err := unix.Mmap(-1, 0, n+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), func() {}
	}
	off := 0
	if a := int(uintptr(unsafe.Pointer(unsafe.SliceData(mem))) & (huge - 1)); a != 0 {
		off = huge - a
	}
	b = mem[off : off+n]
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // advice: an error changes only speed
	return b, func() { _ = unix.Munmap(mem) }
}
