package llm

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"modelplane/gguf"
)

// TestWeightsAreInOneHugePageArena loads the demo model in F16 and Q8_0
// and checks that every weight matrix is in one mapping, in the order the
// forward pass reads them, and that the mapping is on huge pages
// (AnonHugePages in /proc/self/smaps) when the kernel's transparent huge
// pages take advice.
func TestWeightsAreInOneHugePageArena(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			m, err := Load(demoPath(t, typ))
			if err != nil {
				t.Fatal(err)
			}
			at := func(w *matrix) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(w.data))) }
			order := []*matrix{m.embd}
			for _, l := range m.layers {
				order = append(order, l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down)
			}
			keep := m.embd.keep
			if keep == nil {
				t.Fatal("the weights are not in an arena")
			}
			for i, w := range order {
				if w.keep != keep {
					t.Fatalf("matrix %d is in another arena", i)
				}
				if i > 0 && at(w) <= at(order[i-1]) {
					t.Fatalf("matrix %d at %#x is before matrix %d at %#x, want the forward pass's order", i, at(w), i-1, at(order[i-1]))
				}
				if at(w)%64 != 0 {
					t.Errorf("matrix %d at %#x, want a cache line's start", i, at(w))
				}
			}
			thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
			if err != nil || strings.Contains(string(thp), "[never]") {
				t.Logf("transparent huge pages: %q (%v): the arena is on 4 KiB pages", thp, err)
				return
			}
			if at(m.embd)%hugePage != 0 {
				t.Errorf("the arena starts at %#x, want a 2 MiB boundary", at(m.embd))
			}
			huge, err := anonHugePagesAt(at(m.embd))
			if err != nil {
				t.Fatal(err)
			}
			if huge == 0 {
				t.Errorf("the arena's mapping has no huge pages with transparent huge pages %q", thp)
			}
		})
	}
}

// anonHugePagesAt is AnonHugePages, in kB, of the mapping holding p.
func anonHugePagesAt(p uintptr) (int, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	in := false
	for l := range strings.Lines(string(b)) {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(l, "%x-%x", &lo, &hi); n == 2 {
			in = lo <= p && p < hi
			continue
		}
		var kb int
		if _, err := fmt.Sscanf(l, "AnonHugePages: %d kB", &kb); err == nil && in {
			return kb, nil
		}
	}
	return 0, fmt.Errorf("no mapping holds %#x", p)
}
