// Package gguf reads and writes GGUF files (version 3), the single-file
// model format of llama.cpp: a header, typed metadata key/values (scalars,
// strings and arrays), tensor descriptions and an aligned data section.
//
// Open reads the header and tensor table only; tensor bytes are read on
// demand through io.ReaderAt (TensorBytes), so a large file is never
// slurped whole. Every malformed input (short file, bad magic or version,
// an unknown value or tensor type, a tensor past the end of the file) is an
// error wrapping ErrInvalid that names what is wrong.
//
// It knows nothing of model architectures; package llm interprets the
// metadata and tensors. It imports only the standard library.
package gguf
