package artifact

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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

type textError struct{ reason string }

func (e *textError) Error() string { return e.reason }

func (t *textState) check(b []byte) error {
	for len(t.carry) > 0 && len(b) > 0 {
		t.carry = append(t.carry, b[0])
		b = b[1:]
		if !utf8.FullRune(t.carry) {
			continue
		}
		r, n := utf8.DecodeRune(t.carry)
		if r == utf8.RuneError && n == 1 {
			return &textError{fmt.Sprintf("invalid utf-8 at offset %d", t.off)}
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
					return &textError{fmt.Sprintf("binary content (nul byte at offset %d)", t.off+int64(i))}
				}
				return &textError{fmt.Sprintf("binary content (control byte 0x%02x at offset %d)", c, t.off+int64(i))}
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
			return &textError{fmt.Sprintf("invalid utf-8 at offset %d", t.off+int64(i))}
		}
		i += n
	}
	t.off += int64(len(b))
	return nil
}

// textReader passes a stream through while checking it is text.
type textReader struct {
	r   io.Reader
	t   textState
	err error // the first text error, kept so it wins over what a reader above makes of it
}

func (tr *textReader) Read(p []byte) (int, error) {
	if tr.err != nil {
		return 0, tr.err
	}
	n, err := tr.r.Read(p)
	if cerr := tr.t.check(p[:n]); cerr != nil {
		tr.err = cerr
		return 0, cerr
	}
	if err == io.EOF && len(tr.t.carry) > 0 {
		tr.err = &textError{fmt.Sprintf("invalid utf-8 at offset %d (truncated)", tr.t.off)}
		return n, tr.err
	}
	return n, err
}

// maxJSONDepth bounds nesting so a hostile file cannot grow the walk's stack
// without limit.
const maxJSONDepth = 10000

// checkText checks the whole file is text and tells JSON, XGBoost JSON,
// LightGBM and plain text apart. JSON is recognised when the text starts
// with an object or array and parses as exactly one JSON value; a file named
// .json must be JSON.
func checkText(name string, head []byte, rest io.Reader, size int64) (Format, error) {
	tr := &textReader{r: io.MultiReader(bytes.NewReader(head), rest)}
	first := bytes.TrimLeft(head, " \t\r\n")
	isJSONName := strings.EqualFold(path.Ext(name), ".json")
	if isJSONName || len(first) > 0 && (first[0] == '{' || first[0] == '[') {
		f, jerr := walkJSON(tr)
		if tr.err != nil {
			return "", reject("", "%s", tr.err.Error())
		}
		if jerr == nil {
			return f, nil
		}
		if isJSONName {
			return "", reject("", "invalid json: %v", jerr)
		}
		// Not JSON after all (an INI section, say): plain text if the rest is.
	}
	if _, err := io.Copy(io.Discard, tr); err != nil {
		var te *textError
		if errors.As(err, &te) {
			return "", reject("", "%s", te.Error())
		}
		return "", err
	}
	if isLightGBM(head) {
		return FormatLightGBM, nil
	}
	return FormatText, nil
}

// walkJSON checks r holds exactly one JSON value, streaming token by token
// so memory stays bounded, and reports XGBoost's JSON model format (a
// top-level object with a "learner" key) apart from other JSON.
func walkJSON(r io.Reader) (Format, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	dec.UseNumber()
	type frame struct{ object, wantKey bool }
	var stack []frame
	format := FormatJSON
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", unexpected(err)
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top >= 0 && stack[top].object {
					stack[top].wantKey = true
				}
				if len(stack) == maxJSONDepth {
					return "", fmt.Errorf("nested deeper than %d", maxJSONDepth)
				}
				stack = append(stack, frame{object: v == '{', wantKey: v == '{'})
			default:
				stack = stack[:top]
			}
		case string:
			if top >= 0 && stack[top].object {
				if stack[top].wantKey && top == 0 && v == "learner" {
					format = FormatXGBoostJSON
				}
				stack[top].wantKey = !stack[top].wantKey
			}
		default:
			if top >= 0 && stack[top].object {
				stack[top].wantKey = true
			}
		}
		if len(stack) == 0 {
			break
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return "", errors.New("more than one top-level value")
		}
		return "", err
	}
	return format, nil
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
