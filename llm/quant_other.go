//go:build !amd64 || purego

package llm

// quantRowQ8_0 quantises a row of activations to Q8_0 blocks.
func quantRowQ8_0(r *q8Row, x []float32) { quantRowQ8_0Go(r, x) }
