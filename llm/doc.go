// Package llm runs llama-architecture language models read from GGUF files
// on the CPU: the weights (F32, F16, Q8_0, Q4_0, Q4_K or Q6_K, held in
// their file's type and block layout), the tokenizer
// the file carries (tokenizer.ggml.*: GPT-2 byte-level BPE or SentencePiece),
// its chat template (recognised among the common ones) and the forward pass
// over a paged K/V store.
//
// The paged store is the vLLM shape: KV holds fixed-size pages of K and V
// for every layer, and each sequence brings its block table (Seq.Pages).
// Forward computes only the new tokens of each sequence (positions from
// Seq.Pos on), writes their K/V into the pages and reads earlier positions
// from them, so a prefix another sequence already computed is never
// recomputed; Stats counts the positions computed. Each sequence's numbers
// are computed in the same order whether it runs alone or in a batch, so
// batching never changes a sequence's logits. A call is one batched pass:
// the new tokens of all its sequences are the rows of every matrix
// product, so a weight row is read once a step for the whole batch, and
// only attention runs per sequence. The products' kernels are chosen at
// start by the CPU (kernels_amd64.go: AVX-512 tiles, AVX2, or Go); every
// (activation row, weight row) pair is summed the same way whatever tile
// it is in, so batching never changes a bit. Quantised weights take
// activations quantised as llama.cpp quantises them (quant.go), and
// subpackage llamacpp runs llama.cpp itself as the tests' oracle and the
// benchmark's peer.
//
// It does not schedule, allocate pages, sample beyond the helpers in
// sample.go, or serve HTTP: the engine that owns the scheduler builds on
// Forward. It imports only the standard library, package gguf and
// golang.org/x/sys (CPU features, the weights' mapping and its madvise).
package llm
