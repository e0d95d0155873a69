package artifact

import (
	"bytes"
	"encoding/binary"
)

// isGGUF reports whether head starts with the GGUF magic and a known
// version (1 to 3).
func isGGUF(head []byte) bool {
	if len(head) < 8 || !bytes.HasPrefix(head, []byte("GGUF")) {
		return false
	}
	v := binary.LittleEndian.Uint32(head[4:])
	return v >= 1 && v <= 3
}

// checkGGUF checks the tensor and metadata counts of a GGUF header fit the
// file: each tensor description takes at least 24 bytes and each metadata
// entry at least 12.
func checkGGUF(head []byte, size int64) error {
	var tensors, kvs uint64
	if binary.LittleEndian.Uint32(head[4:]) == 1 {
		if len(head) < 16 {
			return reject("", "invalid gguf header: truncated")
		}
		tensors = uint64(binary.LittleEndian.Uint32(head[8:]))
		kvs = uint64(binary.LittleEndian.Uint32(head[12:]))
	} else {
		if len(head) < 24 {
			return reject("", "invalid gguf header: truncated")
		}
		tensors = binary.LittleEndian.Uint64(head[8:])
		kvs = binary.LittleEndian.Uint64(head[16:])
	}
	if s := uint64(size); tensors > s/24 || kvs > s/12 || tensors*24+kvs*12 > s {
		return reject("", "invalid gguf header: %d tensors and %d metadata entries cannot fit in %d bytes", tensors, kvs, size)
	}
	return nil
}
