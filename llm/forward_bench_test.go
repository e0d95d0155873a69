package llm

import (
	"fmt"
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
