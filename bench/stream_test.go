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
