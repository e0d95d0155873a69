package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits a normalized text into words for the model.
type preTokenizer func(words []string) []string

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return func(w []string) []string { return w }, nil
	}
	var c struct {
		Type           string            `json:"type"`
		AddPrefixSpace *bool             `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
		PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	each := func(f func(string) []string) preTokenizer {
		return func(words []string) []string {
			var out []string
			for _, w := range words {
				out = append(out, f(w)...)
			}
			return out
		}
	}
	switch c.Type {
	case "BertPreTokenizer":
		return each(splitBert), nil
	case "WhitespaceSplit":
		return each(strings.Fields), nil
	case "Whitespace":
		return each(splitWords), nil
	case "Punctuation":
		return each(splitPunct), nil
	case "ByteLevel":
		prefix := c.AddPrefixSpace == nil || *c.AddPrefixSpace
		regex := c.UseRegex == nil || *c.UseRegex
		return each(func(s string) []string {
			if prefix && s != "" && !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			parts := []string{s}
			if regex {
				parts = splitGPT2(s)
			}
			for i, p := range parts {
				parts[i] = byteLevel(p)
			}
			return parts
		}), nil
	case "Sequence":
		var seq []preTokenizer
		for _, r := range c.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, err
			}
			seq = append(seq, p)
		}
		return func(words []string) []string {
			for _, p := range seq {
				words = p(words)
			}
			return words
		}, nil
	}
	return nil, fmt.Errorf("pre_tokenizer %q is not supported", c.Type)
}

// splitBert splits on whitespace, which is dropped, and around every
// punctuation character, which is a word of its own.
func splitBert(s string) []string {
	var out []string
	start := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		case isPunct(r):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			out = append(out, string(r))
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// splitPunct isolates every punctuation character, keeping the rest.
func splitPunct(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		if isPunct(r) {
			if start < i {
				out = append(out, s[start:i])
			}
			out = append(out, string(r))
			start = i + utf8.RuneLen(r)
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Nd, r)
}

// splitWords is the Whitespace pre-tokenizer's \w+|[^\w\s]+.
func splitWords(s string) []string {
	var out []string
	start, kind := -1, 0 // kind 1: word, 2: other
	for i, r := range s {
		k := 2
		switch {
		case unicode.IsSpace(r):
			k = 0
		case isWordRune(r):
			k = 1
		}
		if k != kind && start >= 0 {
			out = append(out, s[start:i])
			start = -1
		}
		if k != 0 && start < 0 {
			start = i
		}
		kind = k
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// splitGPT2 is GPT-2's pattern, written out because Go's regexp has no
// look-ahead:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string) []string {
	var out []string
	rs := []rune(s)
	isL := func(r rune) bool { return unicode.IsLetter(r) }
	isN := func(r rune) bool { return unicode.IsNumber(r) }
	isS := unicode.IsSpace
	isO := func(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }
	run := func(i int, f func(rune) bool) int {
		for i < len(rs) && f(rs[i]) {
			i++
		}
		return i
	}
	for i := 0; i < len(rs); {
		if rs[i] == '\'' {
			matched := false
			for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
				cr := []rune(c)
				if i+1+len(cr) <= len(rs) && string(rs[i+1:i+1+len(cr)]) == c {
					out = append(out, string(rs[i:i+1+len(cr)]))
					i += 1 + len(cr)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		j := i
		if rs[j] == ' ' && j+1 < len(rs) {
			j++
		}
		end := -1
		for _, f := range []func(rune) bool{isL, isN, isO} {
			if f(rs[j]) {
				end = run(j, f)
				break
			}
		}
		if end > i {
			out = append(out, string(rs[i:end]))
			i = end
			continue
		}
		// Whitespace: a run not followed by a non-space, else the run but
		// its last character (which then leads the next word).
		e := run(i, isS)
		if e < len(rs) && e-i > 1 {
			e--
		}
		out = append(out, string(rs[i:e]))
		i = e
	}
	return out
}

// byteChars is GPT-2's map of bytes to printable characters: the bytes
// that print stand for themselves, the others for 256 and up in order.
var byteChars = func() [256]rune {
	var m [256]rune
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

func byteLevel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteChars[s[i]])
	}
	return b.String()
}
