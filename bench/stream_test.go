package bench

import (
	"math/rand/v2"
	"testing"
)

// The SIMD loop reads every byte: its fold equals the plain loop's on
// buffers of every length around its 256-byte step, and a flipped bit
// anywhere changes it.
func TestStreamReadReadsEveryByte(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 255, 256, 257, 511, 512, 4096 + 77} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := streamReadGo(b)
		if got := streamRead(b); got != want {
			t.Errorf("%s kernel, %d bytes: got %#x, want %#x", streamKernel(), n, got, want)
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if n == 0 {
				break
			}
			b[i] ^= 4
			if got := streamRead(b); got == want {
				t.Errorf("%d bytes: byte %d flipped, fold unchanged", n, i)
			}
			b[i] ^= 4
		}
	}
}

func TestStreamBandwidthIsMeasured(t *testing.T) {
	t.Parallel()
	if bw := streamBandwidth(8<<20, 3); bw <= 0 {
		t.Fatalf("bandwidth %v, want > 0", bw)
	}
}

// Every way of reading rows reads every byte once: its fold equals the
// plain loop's for one, two and four rows at a time, with and without
// prefetch, on buffers that end inside a group, and a flipped bit in any
// row changes it.
func TestStreamRowsReadsEveryByte(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 4*512*3+300)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	want := streamReadGo(b)
	for _, k := range []int{1, 2, 4} {
		for _, rowBytes := range []int{256, 512} {
			for _, dist := range []int{0, k * rowBytes} {
				got, ok := streamRows(b, k, rowBytes, dist)
				if !ok {
					t.Skipf("no AVX-512 or AVX2 here: readCeiling reports nothing")
				}
				if got != want {
					t.Errorf("%d rows of %d, prefetch %d: got %#x, want %#x", k, rowBytes, dist, got, want)
				}
				for _, i := range []int{0, rowBytes + 7, (k-1)*rowBytes + 3, len(b) - 1} {
					b[i] ^= 16
					if got, _ := streamRows(b, k, rowBytes, dist); got == want {
						t.Errorf("%d rows of %d: byte %d flipped, fold unchanged", k, rowBytes, i)
					}
					b[i] ^= 16
				}
			}
		}
	}
}

func TestReadCeilingIsTheBestVariant(t *testing.T) {
	t.Parallel()
	best, vs := readCeiling(8<<20, 2)
	if vs == nil {
		t.Skip("no AVX-512 or AVX2 here: no ceiling")
	}
	if len(vs) != len(readVariants) {
		t.Fatalf("%d variants measured, want %d", len(vs), len(readVariants))
	}
	top := 0.0
	for _, v := range vs {
		if v.BytesPerCPUS <= 0 || v.RowBytes <= 0 {
			t.Errorf("variant %+v: want a row size and a rate above 0", v)
		}
		top = max(top, v.BytesPerCPUS)
	}
	if best != top {
		t.Errorf("ceiling %v, want the best variant's %v", best, top)
	}
}
