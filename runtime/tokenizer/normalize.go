package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is split.
type normalizer func(string) string

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return func(s string) string { return s }, nil
	}
	var c struct {
		Type               string            `json:"type"`
		CleanText          *bool             `json:"clean_text"`
		HandleChineseChars *bool             `json:"handle_chinese_chars"`
		StripAccents       *bool             `json:"strip_accents"`
		Lowercase          *bool             `json:"lowercase"`
		Normalizers        []json.RawMessage `json:"normalizers"`
		Left, Right        bool
		Prepend            string `json:"prepend"`
		Pattern            struct{ String *string }
		Content            string `json:"content"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	on := func(b *bool, def bool) bool {
		if b == nil {
			return def
		}
		return *b
	}
	switch c.Type {
	case "BertNormalizer":
		clean, chinese, lower := on(c.CleanText, true), on(c.HandleChineseChars, true), on(c.Lowercase, true)
		strip := on(c.StripAccents, lower) // null follows lowercase, as BERT's does
		return func(s string) string { return bertNormalize(s, clean, chinese, strip, lower) }, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFC":
		return norm.NFC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "StripAccents":
		return stripMarks, nil
	case "Strip":
		return func(s string) string {
			if c.Left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if c.Right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "Prepend":
		return func(s string) string {
			if s == "" {
				return s
			}
			return c.Prepend + s
		}, nil
	case "Replace":
		if c.Pattern.String == nil {
			return nil, fmt.Errorf("normalizer Replace: only a String pattern is supported")
		}
		return func(s string) string { return strings.ReplaceAll(s, *c.Pattern.String, c.Content) }, nil
	case "Sequence":
		var seq []normalizer
		for _, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			seq = append(seq, n)
		}
		return func(s string) string {
			for _, n := range seq {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported", c.Type)
}

// bertNormalize is BERT's normalizer: control characters dropped and
// whitespace made a space, CJK characters set apart by spaces, accents
// stripped, lower case.
func bertNormalize(s string, clean, chinese, strip, lower bool) string {
	var b strings.Builder
	for _, r := range s {
		if clean {
			if r == 0 || r == 0xfffd || isControl(r) {
				continue
			}
			if isWhitespace(r) {
				b.WriteByte(' ')
				continue
			}
		}
		if chinese && isCJK(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	out := b.String()
	if strip {
		out = stripMarks(out)
	}
	if lower {
		out = strings.ToLower(out)
	}
	return out
}

// stripMarks decomposes s and drops the combining marks (accents).
func stripMarks(s string) string {
	var b strings.Builder
	for _, r := range norm.NFD.String(s) {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isWhitespace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.Zs, r)
}

func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Co, r)
}

// isCJK reports the CJK Unified Ideographs blocks BERT sets apart.
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B820 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// isPunct is BERT's punctuation: ASCII symbols and Unicode P*.
func isPunct(r rune) bool {
	if r >= 33 && r <= 47 || r >= 58 && r <= 64 || r >= 91 && r <= 96 || r >= 123 && r <= 126 {
		return true
	}
	return unicode.IsPunct(r)
}
