package artifact

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Format is what a file was recognised as by its content.
type Format string

// The accepted formats. The first five hold models; JSON and text files are
// configs, tokenizers and vocabularies that travel with them.
const (
	FormatSafetensors Format = "safetensors"
	FormatONNX        Format = "onnx"
	FormatGGUF        Format = "gguf"
	FormatXGBoostJSON Format = "xgboost-json"
	FormatLightGBM    Format = "lightgbm"
	FormatJSON        Format = "json"
	FormatText        Format = "text"
)

// IsModel reports whether f holds a model rather than a config.
func (f Format) IsModel() bool {
	switch f {
	case FormatSafetensors, FormatONNX, FormatGGUF, FormatXGBoostJSON, FormatLightGBM:
		return true
	}
	return false
}

// headSize is how much of a file is read up front to choose how to inspect
// it. Binary formats are recognised from it (safetensors may read its header
// beyond); text needs the whole file, which is read as a stream.
const headSize = 64 << 10

// accepted lists the formats for the refusal message.
const accepted = "accepted: safetensors, onnx, gguf, json, utf-8 text"

// Detect reads the content of one file, size bytes from r, and says which
// accepted format it is, or returns a *Rejection naming name and the reason.
// Binary model formats are recognised from a bounded prefix (the safetensors
// header, the GGUF header, the ONNX top-level fields, whose payloads are
// skipped), so Detect may stop reading early, unless the file's first bytes
// also read as pickle opcodes, which Detect then follows to a verdict; JSON
// and text are checked to the end. Errors other than rejections come from
// reading r.
//
// The name never makes a file acceptable; it only adds checks: a .json file
// must be valid JSON, a .safetensors, .onnx or .gguf file must be that
// format, and a file named like a pickle (.bin, .pt, .pkl, ...) may only hold
// a binary model format.
func Detect(name string, r io.Reader, size int64) (Format, error) {
	f, _, err := detectFile(name, r, size)
	return f, err
}

// detectFile is Detect that also returns, for an ONNX model, the external
// data files its tensors name (relative to the model's directory, as
// written in the file), which the upload holds to the manifest.
func detectFile(name string, r io.Reader, size int64) (Format, []string, error) {
	if size < 0 {
		return "", nil, fmt.Errorf("detect %s: negative size %d", name, size)
	}
	head := make([]byte, min(size, headSize))
	if _, err := io.ReadFull(r, head); err != nil {
		return "", nil, fmt.Errorf("detect %s: %w", name, unexpected(err))
	}
	rest := io.LimitReader(r, size-int64(len(head)))
	var external []string
	f, err := detect(name, head, rest, size, &external)
	if err != nil {
		return "", nil, withPath(err, name)
	}
	if err := checkName(name, f); err != nil {
		return "", nil, withPath(err, name)
	}
	return f, external, nil
}

func detect(name string, head []byte, rest io.Reader, size int64, external *[]string) (Format, error) {
	// The pickle scan of a binary format sees every byte its checks read.
	pk := newPickleScanner(size)
	pk.write(head)
	tee := io.TeeReader(rest, pk)
	if n, ok := safetensorsCandidate(head, size); ok {
		if err := checkSafetensors(head, tee, n, size); err != nil {
			return "", err
		}
		return notPickle(FormatSafetensors, pk, tee)
	}
	if isGGUF(head) {
		if err := checkGGUF(head, size); err != nil {
			return "", err
		}
		return notPickle(FormatGGUF, pk, tee)
	}
	if looksLikeText(head, int64(len(head)) == size) {
		return checkText(name, head, rest, size)
	}
	// Binary and not safetensors or GGUF: ONNX or refused. The ONNX walk
	// fails on the first bytes of every format named in refusal below.
	ext, onnxErr := walkONNX(io.MultiReader(bytes.NewReader(head), tee), size)
	if onnxErr == nil {
		*external = ext
		return notPickle(FormatONNX, pk, tee)
	}
	if err := refusal(head, int64(len(head)) == size); err != nil {
		return "", err
	}
	if len(head) > 0 && head[0] == 0x08 { // ModelProto field 1, ir_version
		return "", reject("", "invalid onnx model: %v", onnxErr)
	}
	return "", reject("", "unknown format (%s)", accepted)
}

// notPickle finishes the pickle scan of a file of an accepted binary format,
// which was fed what the format's checks read, and refuses a polyglot: a
// valid model whose bytes, unpickled, make a call after an import (or pass
// the scan's bound). A loader that unpickles whatever it is given
// (torch.load on a renamed file) would run it, and protobuf fields, GGUF
// metadata and safetensors headers can all hold opcodes. While the scan has
// no verdict it reads on from rest, to the end of the file if need be; files
// these formats' writers make fail as opcodes within their first bytes
// (ONNX starts with 0x08, not an opcode), or, for some safetensors header
// lengths, soon after. A binary file that merely unpickles to a value, as
// such a safetensors file may, runs nothing and is not refused.
func notPickle(f Format, pk *pickleScanner, rest io.Reader) (Format, error) {
	buf := make([]byte, 32<<10)
	for !pk.done() {
		if _, err := rest.Read(buf); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("pickle scan: %w", err)
		}
	}
	if p := pk.end(true); p.called || p.limit {
		return "", reject("", "pickle content is not accepted (%s that also loads as raw pickle protocol %d)", f, p.proto)
	}
	return f, nil
}

// refusal names what a binary file that is not an accepted format is, when
// it is something known to be refused.
func refusal(head []byte, complete bool) error {
	switch {
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		return reject("", "pickle content is not accepted (raw pickle protocol %d)", head[1])
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		if zipHasPickle(head) {
			return reject("", "zip archives are not accepted (torch .pt/.pth zips contain pickle)")
		}
		return reject("", "zip archives are not accepted")
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		inner := inflate(gzipReader(head))
		switch {
		case isTar(inner):
			return reject("", "tar archives are not accepted as a file (upload the files, or the whole version as one tar)")
		case isPickle(inner):
			return reject("", "pickle content is not accepted (gzip-compressed pickle, as joblib writes)")
		}
		return reject("", "gzip-compressed files are not accepted")
	case isZlib(head):
		if isPickle(inflate(zlibReader(head))) {
			return reject("", "pickle content is not accepted (joblib zlib-compressed pickle)")
		}
		return reject("", "zlib-compressed files are not accepted")
	case bytes.HasPrefix(head, []byte("ZF")) && len(head) > zfileHeader && isZlib(head[zfileHeader:]):
		return reject("", "pickle content is not accepted (joblib zfile-compressed pickle)")
	case isTar(head):
		return reject("", "tar archives are not accepted as a file (upload the files, or the whole version as one tar)")
	case bytes.HasPrefix(head, []byte("\x93NUMPY")):
		return reject("", "numpy files are not accepted (they may hold pickle)")
	case bytes.HasPrefix(head, []byte("\x89HDF\r\n\x1a\n")):
		return reject("", "hdf5 files are not accepted")
	}
	for _, c := range compressors {
		if bytes.HasPrefix(head, c.magic) {
			return reject("", "%s-compressed files are not accepted", c.name)
		}
	}
	if p := scanPickle(head, complete); p.found {
		return reject("", "pickle content is not accepted (raw pickle protocol %d)", p.proto)
	}
	return nil
}

// compressors are the other compressions joblib and friends use.
var compressors = []struct {
	magic []byte
	name  string
}{
	{[]byte("BZh"), "bzip2"},
	{[]byte("\xfd7zXZ\x00"), "xz"},
	{[]byte{0x5d, 0x00, 0x00}, "lzma"},
	{[]byte{0x04, 0x22, 0x4d, 0x18}, "lz4"},
	{[]byte{0x28, 0xb5, 0x2f, 0xfd}, "zstd"},
}

// zfileHeader is the length of the header of joblib's old compressed format:
// "ZF" then the payload length in hex padded with spaces to 18 bytes.
const zfileHeader = 2 + 18

// isZlib reports whether b starts with a zlib header (RFC 1950): deflate
// with a window of at most 32 KiB, no preset dictionary, and a header check
// that is a multiple of 31.
func isZlib(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && b[1]&0x20 == 0 &&
		(uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

func gzipReader(b []byte) io.Reader {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	return r
}

func zlibReader(b []byte) io.Reader {
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	return r
}

// inflate returns the first bytes of a decompressed stream, as many as the
// compressed prefix yields.
func inflate(r io.Reader) []byte {
	if r == nil {
		return nil
	}
	out := make([]byte, 1024)
	n, _ := io.ReadFull(r, out)
	return out[:n]
}

func isPickle(b []byte) bool {
	if len(b) >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5 {
		return true
	}
	return scanPickle(b, false).found
}

func isTar(b []byte) bool {
	return len(b) >= 263 && bytes.Equal(b[257:262], []byte("ustar"))
}

// zipHasPickle walks the local file headers in b and reports whether an
// entry is a pickle, as in PyTorch's zip checkpoints (archive/data.pkl).
func zipHasPickle(b []byte) bool {
	for len(b) >= 30 && bytes.HasPrefix(b, []byte("PK\x03\x04")) {
		flags := binary.LittleEndian.Uint16(b[6:])
		csize := int(binary.LittleEndian.Uint32(b[18:]))
		nlen := int(binary.LittleEndian.Uint16(b[26:]))
		xlen := int(binary.LittleEndian.Uint16(b[28:]))
		if len(b) < 30+nlen {
			return false
		}
		if strings.HasSuffix(strings.ToLower(string(b[30:30+nlen])), ".pkl") {
			return true
		}
		if flags&0x08 != 0 { // size in a data descriptor after the data
			return false
		}
		next := 30 + nlen + xlen + csize
		if next > len(b) {
			return false
		}
		b = b[next:]
	}
	return false
}

// looksLikeText reports whether b is UTF-8 text: valid UTF-8 (a rune cut at
// the end of an incomplete prefix is fine) and no control characters other
// than tab, newline, vertical tab, form feed and carriage return. Ruling out
// NUL and the other controls is what keeps ONNX, protocol 1+ pickles and
// other binaries out of the text path.
func looksLikeText(b []byte, complete bool) bool {
	var t textState
	if err := t.check(b); err != nil {
		return false
	}
	return !complete || len(t.carry) == 0
}

// pickleNames are extensions of files that loaders open with pickle.
var pickleNames = map[string]bool{
	".bin": true, ".pt": true, ".pth": true, ".pkl": true, ".pickle": true,
	".joblib": true, ".ckpt": true, ".sav": true, ".npy": true, ".npz": true,
}

// checkName applies the stricter checks a file's name asks for.
func checkName(name string, f Format) error {
	ext := strings.ToLower(path.Ext(name))
	want := map[string]Format{".safetensors": FormatSafetensors, ".onnx": FormatONNX, ".gguf": FormatGGUF}[ext]
	switch {
	case want != "" && f != want:
		return reject("", "content is %s, not %s", f, want)
	case pickleNames[ext] && f != FormatSafetensors && f != FormatONNX && f != FormatGGUF:
		return reject("", "%s content under a pickle file name (%s) is not accepted", f, ext)
	}
	return nil
}

// unexpected reports a short read as what it is.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// refusePickle is the refusal of content the pickle scan found.
func refusePickle(p pickleScan) error {
	return reject("", "pickle content is not accepted (raw pickle protocol %d)", p.proto)
}
