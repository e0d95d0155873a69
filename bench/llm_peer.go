package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/llm/llamacpp"
)

// llmPeer is the built-in engine against llama.cpp (node-llama-cpp's
// prebuilt CPU build) on the same GGUF files, in the same run: decode
// tokens/s at batch 1 and the aggregate over llmBatch concurrent
// sequences, for a memory-bound model (bigLLMConfig) in F16 and Q8_0.
type llmPeer struct {
	// Peer names the llama.cpp build; Skipped says why there is no
	// comparison (no node, npm or registry), and then Models has our
	// figures alone.
	Peer    string `json:"peer,omitempty"`
	Skipped string `json:"skipped,omitempty"`
	Config  string `json:"config"`
	L3Bytes int64  `json:"l3_cache_bytes"`
	// FMAPeakMaddsPerCPUS and Q8DotPeakMaddsPerCPUS are one thread's peak
	// rates here (fmaPeak, q8DotPeak) that bound the models' products.
	FMAPeakMaddsPerCPUS   float64 `json:"fma_peak_madds_per_cpu_s"`
	Q8DotPeakMaddsPerCPUS float64 `json:"q8_0_dot_peak_madds_per_cpu_s"`
	// Kernels is the kernel set the engine chose for this CPU;
	// StreamKernel the loop that measured each figure's stream bandwidth.
	Kernels      string `json:"kernels"`
	StreamKernel string `json:"stream_kernel"`
	// TransparentHugePages is the kernel's setting
	// (/sys/kernel/mm/transparent_hugepage/enabled): the weights' arena
	// is on 2 MiB pages at "madvise" and "always", not at "never".
	TransparentHugePages string `json:"transparent_hugepages"`
	// Prompt tokens prefilled (not timed) before Decode tokens are timed,
	// one at a time, alone and in each of Seqs sequences at once.
	Prompt int `json:"prompt_tokens"`
	Decode int `json:"decode_tokens"`
	Seqs   int `json:"seqs"`
	// Reps is how many times each figure was measured, the engines
	// alternating; each figure is its best.
	Reps   int             `json:"reps"`
	Models []llmPeerFigure `json:"models"`
	// Targets: at one thread, ours over llama.cpp's CPU-time tokens/s at
	// least TargetBatch1 at batch 1 and TargetSeqs with Seqs sequences,
	// for every model. TargetsMet is false when the peer was skipped.
	TargetBatch1 float64 `json:"target_batch1"`
	TargetSeqs   float64 `json:"target_seqs"`
	TargetsMet   bool    `json:"targets_met"`
}

// llmPeerFigure is one model at one thread count. Tokens/s are over wall
// time and over CPU time (the process's user and system time: what one
// dedicated core would give, on a machine shared with other work); the
// ratios are ours over llama.cpp's.
type llmPeerFigure struct {
	Type        string `json:"type"`
	Threads     int    `json:"threads"`
	FileBytes   int64  `json:"file_bytes"`
	WeightBytes int64  `json:"weight_bytes"`
	// HugePageBytes is how much more of the process was on huge pages
	// (AnonHugePages) after the model was loaded than before: its
	// weights' share of them.
	HugePageBytes int64 `json:"weights_on_huge_pages_bytes"`

	OursBatch1    float64 `json:"ours_tokens_per_s_batch1"`
	OursSeqs      float64 `json:"ours_tokens_per_s_seqs"`
	OursCPUBatch1 float64 `json:"ours_cpu_tokens_per_s_batch1"`
	OursCPUSeqs   float64 `json:"ours_cpu_tokens_per_s_seqs"`

	PeerBatch1    float64 `json:"llamacpp_tokens_per_s_batch1,omitempty"`
	PeerSeqs      float64 `json:"llamacpp_tokens_per_s_seqs,omitempty"`
	PeerCPUBatch1 float64 `json:"llamacpp_cpu_tokens_per_s_batch1,omitempty"`
	PeerCPUSeqs   float64 `json:"llamacpp_cpu_tokens_per_s_seqs,omitempty"`

	RatioBatch1    float64 `json:"ratio_batch1,omitempty"`
	RatioSeqs      float64 `json:"ratio_seqs,omitempty"`
	RatioCPUBatch1 float64 `json:"ratio_cpu_batch1,omitempty"`
	RatioCPUSeqs   float64 `json:"ratio_cpu_seqs,omitempty"`

	// The batch-1 limit: StreamBytesPerCPUS is this machine's
	// single-thread streaming read of a buffer of the file's size (bytes
	// per CPU-second, the best of Reps); a decode step at batch 1 reads
	// every weight once, so WeightBytes × CPU tokens/s is the bandwidth
	// each engine drew, and its share of the stream how close it came.
	StreamBytesPerCPUS float64 `json:"stream_bytes_per_cpu_s"`
	OursBytesPerCPUS   float64 `json:"ours_bytes_per_cpu_s_batch1"`
	PeerBytesPerCPUS   float64 `json:"llamacpp_bytes_per_cpu_s_batch1,omitempty"`
	OursShareOfStream  float64 `json:"ours_share_of_stream_batch1"`
	PeerShareOfStream  float64 `json:"llamacpp_share_of_stream_batch1,omitempty"`
	// ReadCeilingBytesPerCPUS is the most one thread read of a buffer of
	// the file's size on huge pages, the best of ReadVariants (AVX-512 or
	// AVX2 loads; see readCeiling), and each engine's share of it is the
	// fraction of the hardware it reached at batch 1. Zero, and no
	// variants, without either.
	ReadCeilingBytesPerCPUS float64       `json:"read_ceiling_bytes_per_cpu_s"`
	ReadVariants            []readVariant `json:"read_variants,omitempty"`
	OursShareOfCeiling      float64       `json:"ours_share_of_read_ceiling_batch1"`
	PeerShareOfCeiling      float64       `json:"llamacpp_share_of_read_ceiling_batch1,omitempty"`
	// SeqsCeilingCPU is the most tokens per CPU-second a step of Seqs
	// sequences could give on one thread here if its weight products ran
	// at the peak rate of their multiply-adds and nothing else took any
	// time: the FMA peak for F16 (widened to float32), the Q8_0 block
	// product's peak (q8DotPeak) for Q8_0 where the kernels are avx2; 0
	// where there is no such peak. CeilingOverPeerSeqs is it over
	// llama.cpp's CPU-time figure: below TargetSeqs, the target cannot be
	// met on this core by any kernel of that arithmetic.
	SeqsCeilingCPU      float64 `json:"seqs_ceiling_cpu_tokens_per_s,omitempty"`
	CeilingOverPeerSeqs float64 `json:"ceiling_over_llamacpp_seqs,omitempty"`
}

// llmPeerSizes size measurePeer; tests run it small.
type llmPeerSizes struct {
	Config               llm.Config
	Types                []gguf.TensorType
	Prompt, Decode, Seqs int
	Reps                 int
	Threads              []int
}

func defaultPeerSizes() llmPeerSizes {
	threads := []int{1}
	if n := goruntime.NumCPU(); n > 1 {
		threads = append(threads, n)
	}
	return llmPeerSizes{Config: bigLLMConfig, Types: []gguf.TensorType{gguf.F16, gguf.Q8_0},
		Prompt: 8, Decode: 16, Seqs: llmBatch, Reps: 3, Threads: threads}
}

// measurePeer writes each model, measures both engines on it (the peer
// when it can be had) and removes it.
func measurePeer(ctx context.Context, sz llmPeerSizes) (*llmPeer, error) {
	res := &llmPeer{Config: fmt.Sprintf("%+v", sz.Config), L3Bytes: l3Bytes(), Kernels: llm.Kernels(), StreamKernel: streamKernel(),
		FMAPeakMaddsPerCPUS: round3(fmaPeak(fmaPeakSteps, 5)), Q8DotPeakMaddsPerCPUS: round3(q8DotPeak(q8DotPeakSteps, 5)),
		TransparentHugePages: transparentHugePages(),
		Prompt:               sz.Prompt, Decode: sz.Decode, Seqs: sz.Seqs, Reps: sz.Reps, TargetBatch1: 1, TargetSeqs: 1.5}
	peer, err := llamacpp.Open(ctx, llamacpp.DefaultDir())
	switch {
	case errors.Is(err, llamacpp.ErrUnavailable):
		res.Skipped = err.Error()
		peer = nil
	case err != nil:
		return nil, err
	default:
		if res.Peer, err = peer.Build(ctx); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "bench-llm-peer")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prompt := make([]int, sz.Prompt)
	for i := range prompt {
		prompt[i] = 'a' + i%26
	}
	met := peer != nil
	for _, typ := range sz.Types {
		path := filepath.Join(dir, "model-"+strings.ToLower(typ.String())+".gguf")
		if err := writeModelFile(path, sz.Config, typ); err != nil {
			return nil, err
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		huge := anonHugePages()
		m, err := llm.Load(path)
		if err != nil {
			return nil, err
		}
		huge = anonHugePages() - huge
		stream := streamBandwidth(st.Size(), sz.Reps)
		ceiling, variants := readCeiling(st.Size(), sz.Reps)
		for _, threads := range sz.Threads {
			f := llmPeerFigure{Type: typ.String(), Threads: threads, FileBytes: st.Size(), WeightBytes: m.WeightBytes(),
				HugePageBytes: huge, StreamBytesPerCPUS: round3(stream),
				ReadCeilingBytesPerCPUS: ceiling, ReadVariants: variants}
			for range sz.Reps {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				b1, b1cpu := decodeSpeed(m, threads, prompt, sz.Decode, 1)
				sq, sqcpu := decodeSpeed(m, threads, prompt, sz.Decode, sz.Seqs)
				f.OursBatch1, f.OursCPUBatch1 = max(f.OursBatch1, b1), max(f.OursCPUBatch1, b1cpu)
				f.OursSeqs, f.OursCPUSeqs = max(f.OursSeqs, sq), max(f.OursCPUSeqs, sqcpu)
				if peer == nil {
					continue
				}
				sp, err := peer.Speed(ctx, path, threads, sz.Decode, sz.Seqs, prompt)
				if err != nil {
					return nil, err
				}
				f.PeerBatch1, f.PeerCPUBatch1 = max(f.PeerBatch1, sp.Batch1), max(f.PeerCPUBatch1, sp.CPUBatch1)
				f.PeerSeqs, f.PeerCPUSeqs = max(f.PeerSeqs, sp.Seqs), max(f.PeerCPUSeqs, sp.CPUSeqs)
			}
			round := func(v float64) float64 { return round3(v) }
			f.OursBatch1, f.OursSeqs, f.OursCPUBatch1, f.OursCPUSeqs = round(f.OursBatch1), round(f.OursSeqs), round(f.OursCPUBatch1), round(f.OursCPUSeqs)
			if peer != nil {
				f.PeerBatch1, f.PeerSeqs, f.PeerCPUBatch1, f.PeerCPUSeqs = round(f.PeerBatch1), round(f.PeerSeqs), round(f.PeerCPUBatch1), round(f.PeerCPUSeqs)
				f.RatioBatch1, f.RatioSeqs = round(f.OursBatch1/f.PeerBatch1), round(f.OursSeqs/f.PeerSeqs)
				f.RatioCPUBatch1, f.RatioCPUSeqs = round(f.OursCPUBatch1/f.PeerCPUBatch1), round(f.OursCPUSeqs/f.PeerCPUSeqs)
				if threads == 1 && (f.RatioCPUBatch1 < res.TargetBatch1 || f.RatioCPUSeqs < res.TargetSeqs) {
					met = false
				}
			}
			f.OursBytesPerCPUS = round3(float64(f.WeightBytes) * f.OursCPUBatch1)
			if peer != nil {
				f.PeerBytesPerCPUS = round3(float64(f.WeightBytes) * f.PeerCPUBatch1)
			}
			if stream > 0 {
				f.OursShareOfStream, f.PeerShareOfStream = round3(f.OursBytesPerCPUS/stream), round3(f.PeerBytesPerCPUS/stream)
			}
			if ceiling > 0 {
				f.OursShareOfCeiling, f.PeerShareOfCeiling = round3(f.OursBytesPerCPUS/ceiling), round3(f.PeerBytesPerCPUS/ceiling)
			}
			peak := res.FMAPeakMaddsPerCPUS
			if typ == gguf.Q8_0 {
				peak = 0
				if res.Kernels == "avx2" {
					peak = res.Q8DotPeakMaddsPerCPUS
				}
			}
			if peak > 0 && threads == 1 {
				f.SeqsCeilingCPU = round3(peak / float64(weights(sz.Config)))
				if f.PeerCPUSeqs > 0 {
					f.CeilingOverPeerSeqs = round3(f.SeqsCeilingCPU / f.PeerCPUSeqs)
				}
			}
			res.Models = append(res.Models, f)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	res.TargetsMet = met
	return res, nil
}

func writeModelFile(path string, c llm.Config, typ gguf.TensorType) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := llm.WriteModel(f, c, typ); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// decodeSpeed is peer.mjs's speed measurement on our engine: seqs
// sequences prefill prompt (not timed), then decode tokens of each are
// computed one step at a time, every step one Forward call of all of
// them, feeding back a fixed token; tokens/s over wall and CPU time.
// The logits are computed (llama.cpp's evaluations skip the output head:
// 0.2% of this model's weights).
func decodeSpeed(m *llm.Model, threads int, prompt []int, decode, seqs int) (wall, cpu float64) {
	prev := goruntime.GOMAXPROCS(threads)
	defer goruntime.GOMAXPROCS(prev)
	m.SetThreads(threads)
	defer m.SetThreads(1)
	const page = 16
	per := (len(prompt) + decode + page - 1) / page
	kv := llm.NewKV(m.Config(), seqs*per, page)
	batch := make([]llm.Seq, seqs)
	for i := range batch {
		pages := make([]int32, per)
		for j := range pages {
			pages[j] = int32(i*per + j)
		}
		batch[i] = llm.Seq{Tokens: slices.Clone(prompt), Pages: pages}
	}
	m.Forward(kv, batch)
	start, c0 := time.Now(), cpuTime()
	for s := range decode {
		for i := range batch {
			batch[i].Pos = len(prompt) + s
			batch[i].Tokens = []int{prompt[s%len(prompt)]}
		}
		m.Forward(kv, batch)
	}
	n := float64(decode * seqs)
	return n / time.Since(start).Seconds(), n / (cpuTime() - c0).Seconds()
}

// transparentHugePages is the bracketed word of the kernel's THP setting
// ("always", "madvise" or "never"), or "" where there is none.
func transparentHugePages() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	lo, hi := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if lo < 0 || hi < lo {
		return ""
	}
	return s[lo+1 : hi]
}

// anonHugePages is the process's memory on transparent huge pages in
// bytes (AnonHugePages of /proc/self/smaps_rollup), or 0 where there is
// no such file.
func anonHugePages() int64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for l := range strings.Lines(string(b)) {
		var kb int64
		if _, err := fmt.Sscanf(l, "AnonHugePages: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}
