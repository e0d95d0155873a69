package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// model turns one word into token ids.
type model interface {
	tokenize(word string) ([]int64, error)
	id(token string) (int64, bool)
}

func parseModel(raw json.RawMessage) (model, error) {
	var c struct {
		Type                    string            `json:"type"`
		Vocab                   map[string]int64  `json:"vocab"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		MaxInputCharsPerWord    int               `json:"max_input_chars_per_word"`
		Merges                  []json.RawMessage `json:"merges"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		ByteFallback            bool              `json:"byte_fallback"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if c.Type == "" && c.Merges != nil {
		c.Type = "BPE"
	}
	if len(c.Vocab) == 0 {
		return nil, fmt.Errorf("model %s: the vocabulary is empty", c.Type)
	}
	str := func(p *string, def string) string {
		if p == nil {
			return def
		}
		return *p
	}
	switch c.Type {
	case "WordPiece":
		w := &wordPiece{vocab: c.Vocab, unk: str(c.UnkToken, "[UNK]"), prefix: str(c.ContinuingSubwordPrefix, "##"), max: c.MaxInputCharsPerWord}
		if w.max == 0 {
			w.max = 100
		}
		if _, ok := w.vocab[w.unk]; !ok {
			return nil, fmt.Errorf("model WordPiece: unk_token %q is not in the vocabulary", w.unk)
		}
		return w, nil
	case "BPE":
		if c.ByteFallback {
			return nil, fmt.Errorf("model BPE: byte_fallback is not supported")
		}
		b := &bpe{vocab: c.Vocab, unk: str(c.UnkToken, ""), prefix: str(c.ContinuingSubwordPrefix, ""),
			suffix: str(c.EndOfWordSuffix, ""), ignoreMerges: c.IgnoreMerges, ranks: map[[2]string]int{}}
		for i, raw := range c.Merges {
			var pair [2]string
			var s string
			if err := json.Unmarshal(raw, &s); err == nil {
				a, z, ok := strings.Cut(s, " ")
				if !ok {
					return nil, fmt.Errorf("model BPE: merges[%d] %q is not two tokens", i, s)
				}
				pair = [2]string{a, z}
			} else if err := json.Unmarshal(raw, &pair); err != nil {
				return nil, fmt.Errorf("model BPE: merges[%d] is neither \"a b\" nor [a, b]", i)
			}
			if _, dup := b.ranks[pair]; !dup {
				b.ranks[pair] = i
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("model %q is not supported (WordPiece and BPE are)", c.Type)
}

// wordPiece is BERT's model: the longest vocabulary entry from the start
// of the word, then the longest prefixed continuation, and so on; a word
// with a piece not in the vocabulary is the unknown token.
type wordPiece struct {
	vocab       map[string]int64
	unk, prefix string
	max         int
}

func (w *wordPiece) id(t string) (int64, bool) { id, ok := w.vocab[t]; return id, ok }

func (w *wordPiece) tokenize(word string) ([]int64, error) {
	if utf8.RuneCountInString(word) > w.max {
		return []int64{w.vocab[w.unk]}, nil
	}
	var ids []int64
	for start := 0; start < len(word); {
		end := len(word)
		found := false
		for end > start {
			piece := word[start:end]
			if start > 0 {
				piece = w.prefix + piece
			}
			if id, ok := w.vocab[piece]; ok {
				ids = append(ids, id)
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return []int64{w.vocab[w.unk]}, nil
		}
		start = end
	}
	return ids, nil
}

// bpe merges a word's characters pair by pair, the pair earliest in the
// merges list first, until no listed pair is left.
type bpe struct {
	vocab               map[string]int64
	ranks               map[[2]string]int
	unk, prefix, suffix string
	ignoreMerges        bool
}

func (b *bpe) id(t string) (int64, bool) { id, ok := b.vocab[t]; return id, ok }

// maxBPEWord bounds the characters merged as one word: merging is
// quadratic in a word's length, and a caller's text may hold a "word" of
// megabytes. A longer word is merged in pieces of this many characters,
// which no natural word reaches.
const maxBPEWord = 256

func (b *bpe) tokenize(word string) ([]int64, error) {
	if rs := []rune(word); len(rs) > maxBPEWord {
		var ids []int64
		for len(rs) > 0 {
			n := min(len(rs), maxBPEWord)
			part, err := b.tokenize(string(rs[:n]))
			if err != nil {
				return nil, err
			}
			ids = append(ids, part...)
			rs = rs[n:]
		}
		return ids, nil
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[word]; ok {
			return []int64{id}, nil
		}
	}
	var syms []string
	for i, r := range word {
		s := string(r)
		if i > 0 {
			s = b.prefix + s
		}
		syms = append(syms, s)
	}
	if len(syms) > 0 && b.suffix != "" {
		syms[len(syms)-1] += b.suffix
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := b.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		merged := syms[at] + strings.TrimPrefix(syms[at+1], b.prefix)
		syms = append(syms[:at], append([]string{merged}, syms[at+2:]...)...)
	}
	ids := make([]int64, 0, len(syms))
	for _, s := range syms {
		id, ok := b.vocab[s]
		if !ok {
			if b.unk == "" {
				continue // the Rust library drops such a symbol too
			}
			if id, ok = b.vocab[b.unk]; !ok {
				return nil, fmt.Errorf("symbol %q and unk_token %q are not in the vocabulary", s, b.unk)
			}
		}
		ids = append(ids, id)
	}
	return ids, nil
}
