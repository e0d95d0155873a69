package artifact

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"
)

// maxSafetensorsHeader is the largest header the reference implementation
// reads (100 MB); a larger length is not a safetensors file.
const maxSafetensorsHeader = 100_000_000

// safetensorsCandidate reports whether head starts like a safetensors file:
// a little-endian uint64 header length that fits the file and the limit,
// followed by '{'. It returns the header length.
func safetensorsCandidate(head []byte, size int64) (int64, bool) {
	if len(head) < 9 {
		return 0, false
	}
	n := binary.LittleEndian.Uint64(head)
	if n < 2 || n > maxSafetensorsHeader || n > uint64(size-8) || head[8] != '{' {
		return 0, false
	}
	return int64(n), true
}

// checkSafetensors reads the n-byte header (from head, then rest) and checks
// it with parseSafetensorsHeader.
func checkSafetensors(head []byte, rest io.Reader, n, size int64) error {
	var hdr []byte
	if 8+n <= int64(len(head)) {
		hdr = head[8 : 8+n]
	} else {
		hdr = make([]byte, n)
		copied := copy(hdr, head[8:])
		if _, err := io.ReadFull(rest, hdr[copied:]); err != nil {
			return fmt.Errorf("read safetensors header: %w", unexpected(err))
		}
	}
	if err := parseSafetensorsHeader(hdr, size-8-n); err != nil {
		return reject("", "invalid safetensors header: %v", err)
	}
	return nil
}

type tensorInfo struct {
	DType       string   `json:"dtype"`
	Shape       []uint64 `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// parseSafetensorsHeader checks a safetensors JSON header: an object whose
// optional "__metadata__" maps strings to strings and whose other entries
// are tensors with a dtype, a shape and data offsets inside the dataLen
// bytes that follow the header.
func parseSafetensorsHeader(hdr []byte, dataLen int64) error {
	if !utf8.Valid(hdr) {
		return fmt.Errorf("header is not utf-8")
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &entries); err != nil {
		return fmt.Errorf("header is not a json object: %v", err)
	}
	if entries == nil {
		return fmt.Errorf("header is not a json object")
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad tensor reported is the same every time
	for _, name := range names {
		raw := entries[name]
		if name == "__metadata__" {
			var meta map[string]string
			if err := json.Unmarshal(raw, &meta); err != nil {
				return fmt.Errorf("__metadata__ is not an object of strings")
			}
			continue
		}
		var t tensorInfo
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("tensor %q: dtype, shape and data_offsets must be a string and arrays of non-negative integers", name)
		}
		switch {
		case t.DType == "":
			return fmt.Errorf("tensor %q: no dtype", name)
		case t.Shape == nil:
			return fmt.Errorf("tensor %q: no shape", name)
		case len(t.DataOffsets) != 2:
			return fmt.Errorf("tensor %q: data_offsets must be two numbers", name)
		case t.DataOffsets[0] > t.DataOffsets[1] || t.DataOffsets[1] > uint64(dataLen):
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d data bytes", name, t.DataOffsets[0], t.DataOffsets[1], dataLen)
		}
	}
	return nil
}
