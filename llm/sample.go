package llm

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Argmax returns the index of the largest logit (the first on ties).
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sampler draws tokens from logits with temperature and nucleus (top_p)
// sampling from its own seeded source: the same seed and the same logits
// give the same tokens. Temperature 0 is greedy.
type Sampler struct {
	Temperature float64
	TopP        float64 // 0 or ≥1 keeps every token
	rng         *rand.Rand
}

// NewSampler returns a sampler seeded with seed.
func NewSampler(temperature, topP float64, seed uint64) *Sampler {
	return &Sampler{Temperature: temperature, TopP: topP, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Sample draws one token id.
func (s *Sampler) Sample(logits []float32) int {
	if s.Temperature <= 0 {
		return Argmax(logits)
	}
	mx := logits[Argmax(logits)]
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v-mx) / s.Temperature)
		sum += p[i]
	}
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	keep := len(idx)
	if s.TopP > 0 && s.TopP < 1 {
		var c float64
		for i, j := range idx {
			c += p[j] / sum
			if c >= s.TopP {
				keep = i + 1
				break
			}
		}
	}
	var total float64
	for _, j := range idx[:keep] {
		total += p[j]
	}
	r := s.rng.Float64() * total
	for _, j := range idx[:keep] {
		r -= p[j]
		if r <= 0 {
			return j
		}
	}
	return idx[keep-1]
}
