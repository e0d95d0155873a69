package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Tokenizer is a loaded tokenizer.json.
type Tokenizer struct {
	normalize normalizer
	split     preTokenizer
	model     model
	post      postProcessor
	// added are the added tokens matched in the raw text, longest first.
	added     []addedToken
	maxLength int
	truncLeft bool
	padID     int64
	padTypeID int64
	fixedPad  int
	padLeft   bool
}

// Encoding is one text's tokens: ids, their type ids and the attention
// mask (1 for a token, 0 for padding).
type Encoding struct {
	IDs, TypeIDs, Mask []int64
}

// MaxFileBytes bounds the tokenizer.json read.
const MaxFileBytes = 64 << 20

// Load reads and checks the tokenizer.json at path.
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if fi.Size() > MaxFileBytes {
		return nil, fmt.Errorf("tokenizer: %s is over %d bytes", path, MaxFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(b)
}

// Parse reads a tokenizer.json's bytes.
func Parse(b []byte) (*Tokenizer, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if len(f.Model) == 0 {
		return nil, errors.New("tokenizer.json: no model")
	}
	t := &Tokenizer{}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if t.split, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if t.model, err = parseModel(f.Model); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	for _, a := range f.AddedTokens {
		if a.Content != "" && !a.Normalized {
			t.added = append(t.added, a)
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })
	if tr := f.Truncation; tr != nil {
		t.maxLength, t.truncLeft = tr.MaxLength, tr.Direction == "Left"
	}
	if p := f.Padding; p != nil {
		t.padID, t.padTypeID, t.padLeft = p.PadID, p.PadTypeID, p.Direction == "Left"
		var fixed struct{ Fixed int }
		if json.Unmarshal(p.Strategy, &fixed) == nil {
			t.fixedPad = fixed.Fixed
		}
	}
	return t, nil
}

// Encode tokenizes one text: added tokens found in the raw text, the rest
// normalized, split and run through the model; truncated to the file's
// max_length (special tokens included) and given the post-processor's
// special tokens.
func (t *Tokenizer) Encode(text string) (Encoding, error) {
	var ids []int64
	for _, seg := range t.segments(text) {
		if seg.added != nil {
			ids = append(ids, seg.added.ID)
			continue
		}
		for _, w := range t.split([]string{t.normalize(seg.text)}) {
			if w == "" {
				continue
			}
			wi, err := t.model.tokenize(w)
			if err != nil {
				return Encoding{}, err
			}
			ids = append(ids, wi...)
		}
	}
	if t.maxLength > 0 {
		room := max(t.maxLength-t.post.added(), 0)
		if len(ids) > room {
			if t.truncLeft {
				ids = ids[len(ids)-room:]
			} else {
				ids = ids[:room]
			}
		}
	}
	ids, types := t.post.apply(ids)
	mask := make([]int64, len(ids))
	for i := range mask {
		mask[i] = 1
	}
	return Encoding{IDs: ids, TypeIDs: types, Mask: mask}, nil
}

// segment is a piece of the raw text: an added token, or text between.
type segment struct {
	text  string
	added *addedToken
}

// segments cuts text at the added tokens, longest first at each place.
func (t *Tokenizer) segments(text string) []segment {
	if len(t.added) == 0 {
		return []segment{{text: text}}
	}
	var out []segment
	start := 0
	for i := 0; i < len(text); {
		var hit *addedToken
		for k := range t.added {
			if strings.HasPrefix(text[i:], t.added[k].Content) {
				hit = &t.added[k]
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		if start < i {
			out = append(out, segment{text: text[start:i]})
		}
		out = append(out, segment{added: hit})
		i += len(hit.Content)
		start = i
	}
	if start < len(text) {
		out = append(out, segment{text: text[start:]})
	}
	return out
}

// Pad makes encodings one length: the longest, or the file's fixed
// length, padding on the file's side with its pad id and a mask of 0.
func (t *Tokenizer) Pad(encs []Encoding) int {
	n := t.fixedPad
	for _, e := range encs {
		n = max(n, len(e.IDs))
	}
	for i, e := range encs {
		extra := n - len(e.IDs)
		if extra == 0 {
			continue
		}
		pad := func(s []int64, v int64) []int64 {
			p := make([]int64, extra)
			for k := range p {
				p[k] = v
			}
			if t.padLeft {
				return append(p, s...)
			}
			return append(s, p...)
		}
		encs[i] = Encoding{IDs: pad(e.IDs, t.padID), TypeIDs: pad(e.TypeIDs, t.padTypeID), Mask: pad(e.Mask, 0)}
	}
	return n
}
