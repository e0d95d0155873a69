// Package llm runs llama-architecture language models read from GGUF files
// on the CPU: the weights (F32, F16 or Q8_0, held as float32), the tokenizer
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
// only attention runs per sequence. On amd64 the products are SSE
// assembly (dot_amd64.s) whose lanes sum in the Go reference's order.
//
// It does not schedule, allocate pages, sample beyond the helpers in
// sample.go, or serve HTTP: the engine that owns the scheduler builds on
// Forward. It imports only the standard library and package gguf.
package llm
