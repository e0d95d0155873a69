// Package tokenizer is the built-in runtime's tokenizer: it loads a Hugging
// Face tokenizer.json (a WordPiece or BPE model with the normalizer,
// pre-tokenizer, post-processor, added tokens, truncation and padding that
// BERT's and GPT-2's files use) and turns text into token ids, the
// attention mask and token type ids, so a text pipeline needs no custom
// container. Served by the runtime as a tensor model (serveapi.TensorModel):
// input "text" BYTES [batch]; outputs "input_ids", "attention_mask" and
// "token_type_ids", INT64 [batch, tokens], each request padded to its
// longest text (so requests are never merged into one batch, which would
// pad one caller's rows to another's text).
//
// It also builds a WordPiece vocabulary from a corpus (Train), which the
// demo's text pipeline uses for its tokenizer.json.
//
// It owns the file's meaning and nothing of serving: no HTTP, no batching.
// A component this package does not implement (a Unigram model, a
// Metaspace pre-tokenizer, a regular-expression Split) is refused at load
// with its name, never silently skipped.
package tokenizer
