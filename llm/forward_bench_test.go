package llm

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"modelplane/gguf"
)

// BenchmarkForwardDecode runs one decode step of batch sequences, each
// with 64 positions already in its pages, on the demo model (F32): the
// cost of a step as the batch grows. ns/token is a step's time over its
// tokens, cpu-ns/token the same in the process's CPU time, which a busy
// machine moves less. Run it with -cpu 1 to match bench llm's one core.
func BenchmarkForwardDecode(b *testing.B) {
	m := demoModel(b, gguf.F32)
	const history = 64
	for _, batch := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			perSeq := (history + pageTokens) / pageTokens
			kv := NewKV(m.Config(), batch*perSeq, pageTokens)
			seqs := make([]Seq, batch)
			prompt := make([]int, history)
			for i := range seqs {
				for j := range prompt {
					prompt[j] = 'a' + (i+j)%26
				}
				seqs[i] = Seq{Tokens: append([]int{}, prompt...), Pages: pagesFor(i*perSeq, history+1)}
			}
			m.Forward(kv, seqs)
			for i := range seqs {
				seqs[i] = Seq{Tokens: []int{'a' + i}, Pos: history, Pages: seqs[i].Pages}
			}
			b.ResetTimer()
			cpu := cpuTime(b)
			for range b.N {
				m.Forward(kv, seqs) // rewrites position 64 each time
			}
			cpu = cpuTime(b) - cpu
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/token")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*batch), "cpu-ns/token")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMatmulDecode is the product of a decode step's activation rows
// (1, 2, 4, 8 or 16) with a weight matrix of 2,048 columns, as a step runs each
// of its matrices, from the cache and from memory: "l2" is 512 KiB of
// weights, which stay in the L2 cache between products, "mem" 256 MiB in
// an arena (huge pages where the kernel takes the advice), which every
// product streams from memory. cpu-GB/s is weight bytes over the
// process's CPU time and cpu-Gmadd/s multiply-adds (rows × columns ×
// batch) over it. At batch 1, l2 is what the kernel issues with no
// memory wait and mem what it draws from memory, to set beside bench
// llm's stream_bytes_per_cpu_s; at batch 16, l2 is the kernel's
// arithmetic rate, which bounds a step of 16 sequences from below; 2 to
// 8 are the steps continuous batching runs below its saturation. Run it
// with -cpu 1.
func BenchmarkMatmulDecode(b *testing.B) {
	const cols = 2048
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0} {
		rng := rand.New(rand.NewPCG(5, 6))
		rowBytes, err := typ.RowBytes(cols)
		if err != nil {
			b.Fatal(err)
		}
		hotRows := (512 << 10) / int(rowBytes)
		x := make([]float32, hotRows*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		hot := encodeTensor(x, typ)
		for _, size := range []struct {
			name   string
			copies int
		}{{"l2", 1}, {"mem", 512}} {
			rows := hotRows * size.copies
			data := make([]byte, 0, len(hot)*size.copies)
			for range size.copies {
				data = append(data, hot...)
			}
			w, err := newMatrix(newArena(int(matrixBytes(uint64(len(data))))), typ, rows, cols, data)
			if err != nil {
				b.Fatal(err)
			}
			for _, batch := range []int{1, 2, 4, 8, 16} {
				b.Run(fmt.Sprintf("%s/%s/batch=%d", typ, size.name, batch), func(b *testing.B) {
					act := x[:batch*cols]
					dst := make([]float32, batch*rows)
					b.SetBytes(int64(len(data)))
					b.ResetTimer()
					cpu := cpuTime(b)
					for range b.N {
						matmul(1, dst, act, w, batch)
					}
					s := (cpuTime(b) - cpu).Seconds()
					b.ReportMetric(float64(len(data))*float64(b.N)/s/1e9, "cpu-GB/s")
					b.ReportMetric(float64(rows*cols*batch)*float64(b.N)/s/1e9, "cpu-Gmadd/s")
				})
			}
		}
	}
}
