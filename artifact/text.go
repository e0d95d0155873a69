package artifact

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// textControls marks the ASCII control characters text may contain.
var textControls = [32]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true}

// textState checks a stream of bytes for UTF-8 text, chunk by chunk.
type textState struct {
	off   int64  // offset of the next byte to check
	carry []byte // start of a rune cut by the end of the last chunk
}

func (t *textState) check(b []byte) error {
	for len(t.carry) > 0 && len(b) > 0 {
		t.carry = append(t.carry, b[0])
		b = b[1:]
		if !utf8.FullRune(t.carry) {
			continue
		}
		r, n := utf8.DecodeRune(t.carry)
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("invalid utf-8 at offset %d", t.off)
		}
		// A full rune is at most 4 bytes, so the carry (at most 3) plus
		// the bytes just taken hold exactly one rune.
		t.off += int64(len(t.carry))
		t.carry = t.carry[:0]
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && !textControls[c] {
				if c == 0 {
					return fmt.Errorf("binary content (nul byte at offset %d)", t.off+int64(i))
				}
				return fmt.Errorf("binary content (control byte 0x%02x at offset %d)", c, t.off+int64(i))
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			if !utf8.FullRune(b[i:]) {
				t.carry = append(t.carry[:0], b[i:]...)
				t.off += int64(i)
				return nil
			}
			return fmt.Errorf("invalid utf-8 at offset %d", t.off+int64(i))
		}
		i += n
	}
	t.off += int64(len(b))
	return nil
}

// checkText reads the whole file of size bytes and checks it is text,
// telling JSON, XGBoost JSON, LightGBM and plain text apart. JSON is
// recognised when the text starts with an object or array and is exactly one
// JSON value; a file named .json must be JSON.
//
// Protocol 0 pickles are text, so the whole file also goes through the
// pickle scan, to its end: a pickle's first argument can be longer than any
// prefix, and a pickle runs its calls before it reaches STOP or turns
// invalid. A file the scan refuses is refused as pickle even when it is not
// valid text either; the scan's verdict depends only on the bytes, so which
// refusal a file gets does not depend on how it is read.
func checkText(name string, head []byte, rest io.Reader, size int64) (Format, error) {
	isJSONName := strings.EqualFold(path.Ext(name), ".json")
	var js *jsonScanner
	var jsErr error
	if first := bytes.TrimLeft(head, " \t\r\n"); isJSONName || len(first) > 0 && (first[0] == '{' || first[0] == '[') {
		js = &jsonScanner{}
	}
	var text textState
	var textErr error
	pk := newPickleScanner(size)
	// feed checks the next bytes; it returns an error once the file is
	// refused, which needs the pickle scan to have come to its verdict.
	feed := func(b []byte) error {
		if textErr == nil {
			if err := text.check(b); err != nil {
				textErr = reject("", "%v", err)
			}
		}
		if textErr == nil && js != nil && jsErr == nil {
			jsErr = js.write(b)
		}
		if textErr == nil && isJSONName && jsErr != nil {
			textErr = reject("", "invalid json: %v", jsErr)
		}
		pk.write(b)
		if pk.done() {
			if p := pk.end(true); p.found {
				return refusePickle(p)
			}
			return textErr
		}
		return nil
	}
	if err := feed(head); err != nil {
		return "", err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := rest.Read(buf)
		if ferr := feed(buf[:n]); ferr != nil {
			return "", ferr
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if p := pk.end(true); p.found {
		return "", refusePickle(p)
	}
	if textErr != nil {
		return "", textErr
	}
	if len(text.carry) > 0 {
		return "", reject("", "invalid utf-8 at offset %d (truncated)", text.off)
	}
	if js != nil {
		if jsErr == nil {
			jsErr = js.end()
		}
		if jsErr == nil {
			return js.format(), nil
		}
		if isJSONName {
			return "", reject("", "invalid json: %v", jsErr)
		}
		// Not JSON after all (an INI section, say), but text.
	}
	if isLightGBM(head) {
		return FormatLightGBM, nil
	}
	return FormatText, nil
}

// isLightGBM reports whether text looks like a LightGBM model file: its first
// line is "tree", or one of its first lines is the "version=v" header.
func isLightGBM(head []byte) bool {
	lines := strings.SplitN(string(head[:min(len(head), 4096)]), "\n", 10)
	if strings.TrimRight(lines[0], "\r") == "tree" {
		return true
	}
	for _, l := range lines[:min(len(lines), 9)] {
		if strings.HasPrefix(l, "version=v") {
			return true
		}
	}
	return false
}
