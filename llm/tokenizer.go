package llm

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"modelplane/gguf"
)

// Token types of tokenizer.ggml.token_type.
const (
	tokNormal      = 1
	tokUnknown     = 2
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
	tokByte        = 6
)

// Tokenizer turns text into token ids and back, from a GGUF file's
// tokenizer.ggml.* metadata. Model "gpt2" is byte-level BPE with merges
// (GPT-2's byte-to-unicode mapping and pre-tokenisation); model "llama" is
// SentencePiece with scores (merges by highest score, "▁" for spaces,
// <0xXX> byte fallback). Control tokens (<|im_start|>, <s>, …) written in
// the text are recognised by Encode when special is true.
type Tokenizer struct {
	model    string
	tokens   []string
	types    []int32
	scores   []float32
	ids      map[string]int
	ranks    map[[2]string]int // gpt2 merges
	specials []string          // control/user-defined token texts, longest first
	// specialsBy are the specials by their first byte, longest first.
	specialsBy [256][]string
	maxBytes   int          // the longest token's text in bytes
	ops        atomic.Int64 // merge-queue operations (Ops)
	byteTok    [256]int     // llama byte fallback ids (-1 when absent)
	BOS, EOS   int          // -1 when absent
	addBOS     bool
	addSpace   bool
}

// NewTokenizer reads the tokenizer of a GGUF file.
func NewTokenizer(f *gguf.File) (*Tokenizer, error) {
	model, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return nil, fmt.Errorf("%w: tokenizer.ggml.model is missing", ErrInvalid)
	}
	kv, ok := f.Get("tokenizer.ggml.tokens")
	tokens, _ := kv.Value.([]string)
	if !ok || tokens == nil {
		return nil, fmt.Errorf("%w: tokenizer.ggml.tokens is missing or not an array of strings", ErrInvalid)
	}
	t := &Tokenizer{model: model, tokens: tokens, ids: make(map[string]int, len(tokens)), BOS: -1, EOS: -1}
	for i, s := range tokens {
		if _, dup := t.ids[s]; !dup {
			t.ids[s] = i
		}
	}
	if kv, ok := f.Get("tokenizer.ggml.token_type"); ok {
		types, _ := kv.Value.([]int32)
		if len(types) != len(tokens) {
			return nil, fmt.Errorf("%w: tokenizer.ggml.token_type has %d entries for %d tokens", ErrInvalid, len(types), len(tokens))
		}
		t.types = types
	}
	if kv, ok := f.Get("tokenizer.ggml.scores"); ok {
		scores, _ := kv.Value.([]float32)
		if len(scores) != len(tokens) {
			return nil, fmt.Errorf("%w: tokenizer.ggml.scores has %d entries for %d tokens", ErrInvalid, len(scores), len(tokens))
		}
		t.scores = scores
	}
	id := func(key string) (int, error) {
		v, ok := f.Uint(key)
		if !ok {
			return -1, nil
		}
		if v >= uint64(len(tokens)) {
			return -1, fmt.Errorf("%w: %s %d is not a token id (%d tokens)", ErrInvalid, key, v, len(tokens))
		}
		return int(v), nil
	}
	var err error
	if t.BOS, err = id("tokenizer.ggml.bos_token_id"); err != nil {
		return nil, err
	}
	if t.EOS, err = id("tokenizer.ggml.eos_token_id"); err != nil {
		return nil, err
	}
	switch model {
	case "gpt2":
		t.addBOS = false
		kv, ok := f.Get("tokenizer.ggml.merges")
		merges, _ := kv.Value.([]string)
		if ok && merges == nil && kv.Value != nil {
			return nil, fmt.Errorf("%w: tokenizer.ggml.merges is not an array of strings", ErrInvalid)
		}
		t.ranks = make(map[[2]string]int, len(merges))
		for i, m := range merges {
			a, b, ok := strings.Cut(m, " ")
			if !ok {
				return nil, fmt.Errorf("%w: tokenizer.ggml.merges[%d] %q is not two symbols", ErrInvalid, i, m)
			}
			if _, dup := t.ranks[[2]string{a, b}]; !dup {
				t.ranks[[2]string{a, b}] = i
			}
		}
	case "llama":
		t.addBOS, t.addSpace = true, true
		if t.scores == nil {
			return nil, fmt.Errorf("%w: tokenizer.ggml.scores is missing (SentencePiece needs them)", ErrInvalid)
		}
		for i := range t.byteTok {
			t.byteTok[i] = -1
			if id, ok := t.ids[fmt.Sprintf("<0x%02X>", i)]; ok {
				t.byteTok[i] = id
			}
		}
	default:
		return nil, fmt.Errorf("%w: tokenizer model %q (gpt2 and llama are supported)", ErrUnsupported, model)
	}
	if v, ok := f.Get("tokenizer.ggml.add_bos_token"); ok {
		b, _ := v.Value.(bool)
		t.addBOS = b
	}
	if v, ok := f.Get("tokenizer.ggml.add_space_prefix"); ok {
		b, _ := v.Value.(bool)
		t.addSpace = b
	}
	for i, s := range tokens {
		if s != "" && (t.typ(i) == tokControl || t.typ(i) == tokUserDefined) {
			t.specials = append(t.specials, s)
		}
	}
	sort.SliceStable(t.specials, func(a, b int) bool { return len(t.specials[a]) > len(t.specials[b]) })
	for _, s := range t.specials {
		t.specialsBy[s[0]] = append(t.specialsBy[s[0]], s)
	}
	for _, s := range tokens {
		t.maxBytes = max(t.maxBytes, len(s))
	}
	return t, nil
}

func (t *Tokenizer) typ(i int) int32 {
	if t.types == nil {
		return tokNormal
	}
	return t.types[i]
}

// Len is the vocabulary size.
func (t *Tokenizer) Len() int { return len(t.tokens) }

// Model is "gpt2" or "llama".
func (t *Tokenizer) Model() string { return t.model }

// Token returns the vocabulary string of id ("" when out of range).
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// ID returns the id of a vocabulary string.
func (t *Tokenizer) ID(s string) (int, bool) { id, ok := t.ids[s]; return id, ok }

// IsControl reports whether id is a control token (its bytes are not text).
func (t *Tokenizer) IsControl(id int) bool {
	return id >= 0 && id < len(t.tokens) && t.typ(id) == tokControl
}

// AddsBOS reports whether Encode puts BOS first (tokenizer.ggml.add_bos_token,
// default on for SentencePiece, off for GPT-2 BPE).
func (t *Tokenizer) AddsBOS() bool { return t.addBOS && t.BOS >= 0 }

// Decode returns the text of ids, control tokens left out.
func (t *Tokenizer) Decode(ids []int) string {
	var b []byte
	for i, id := range ids {
		b = append(b, t.bytesOf(id, i == 0 || (i == 1 && ids[0] == t.BOS))...)
	}
	return string(b)
}

// TokenBytes returns the bytes one token contributes to the text, for
// streaming; a token may end inside a UTF-8 character, which UTF8Buffer
// holds back. first says the token starts the output (SentencePiece drops
// the space it prefixed to the text).
func (t *Tokenizer) TokenBytes(id int, first bool) []byte { return t.bytesOf(id, first) }

func (t *Tokenizer) bytesOf(id int, first bool) []byte {
	if id < 0 || id >= len(t.tokens) || t.typ(id) == tokControl || t.typ(id) == tokUnused {
		return nil
	}
	s := t.tokens[id]
	if t.model == "llama" {
		if t.typ(id) == tokByte {
			var v byte
			if _, err := fmt.Sscanf(s, "<0x%02X>", &v); err == nil {
				return []byte{v}
			}
		}
		s = strings.ReplaceAll(s, "▁", " ")
		if first && t.addSpace {
			s = strings.TrimPrefix(s, " ")
		}
		return []byte(s)
	}
	if t.typ(id) == tokUserDefined {
		return []byte(s)
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if v, ok := unicodeToByte[r]; ok {
			b = append(b, v)
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return b
}

// UTF8Buffer joins streamed token bytes into whole UTF-8 characters: Write
// returns the text complete so far, always valid UTF-8, and keeps an
// unfinished character for the next call; a byte that can begin no
// character is U+FFFD at once. Flush returns what is left, an unfinished
// character as U+FFFD. The text of any split of a byte string into Writes,
// then Flush, is the same.
type UTF8Buffer struct{ pending []byte }

// Write adds b and returns the text that is complete.
func (u *UTF8Buffer) Write(b []byte) string {
	u.pending = append(u.pending, b...)
	var out strings.Builder
	i := 0
	for i < len(u.pending) && utf8.FullRune(u.pending[i:]) {
		r, w := utf8.DecodeRune(u.pending[i:])
		if r == utf8.RuneError && w == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(u.pending[i : i+w])
		}
		i += w
	}
	u.pending = append(u.pending[:0], u.pending[i:]...)
	return out.String()
}

// Flush returns any held-back bytes: an unfinished character is U+FFFD.
func (u *UTF8Buffer) Flush() string {
	out := strings.ToValidUTF8(string(u.pending), "\uFFFD")
	u.pending = u.pending[:0]
	return out
}

// byteToUnicode is GPT-2's reversible map from bytes to printable runes.
var byteToUnicode, unicodeToByte = func() ([256]rune, map[rune]byte) {
	var b2u [256]rune
	u2b := map[rune]byte{}
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			b2u[b] = rune(b)
		} else {
			b2u[b] = rune(256 + n)
			n++
		}
		u2b[b2u[b]] = byte(b)
	}
	return b2u, u2b
}()

// ByteToken is the GPT-2 byte-level vocabulary string of byte b.
func ByteToken(b byte) string { return string(byteToUnicode[b]) }

// pretokenize splits text as GPT-2's pattern does:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// It works on byte offsets so that invalid UTF-8 survives unchanged (an
// invalid byte counts as a symbol).
func pretokenize(s string) []string {
	var out []string
	class := func(i int) (int, int) { // class and width of the rune at i
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w <= 1:
			return 4, 1
		case unicode.IsLetter(r):
			return 1, w
		case unicode.IsNumber(r):
			return 2, w
		case unicode.IsSpace(r):
			return 3, w
		}
		return 4, w
	}
	i := 0
	for i < len(s) {
		if s[i] == '\'' {
			matched := false
			for _, c := range []string{"re", "ve", "ll", "s", "t", "m", "d"} {
				if strings.HasPrefix(s[i+1:], c) {
					out = append(out, "'"+c)
					i += 1 + len(c)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		j := i
		if s[j] == ' ' && j+1 < len(s) {
			if c, _ := class(j + 1); c != 3 {
				j++
			}
		}
		if c, w := class(j); c != 3 {
			k := j + w
			for k < len(s) {
				c2, w2 := class(k)
				if c2 != c {
					break
				}
				k += w2
			}
			out = append(out, s[i:k])
			i = k
			continue
		}
		// Whitespace run: leave the last space to prefix a following word.
		k, last := i, i
		for k < len(s) {
			c, w := class(k)
			if c != 3 {
				break
			}
			last = k
			k += w
		}
		if k < len(s) && last > i {
			k = last
		}
		out = append(out, s[i:k])
		i = k
	}
	return out
}
