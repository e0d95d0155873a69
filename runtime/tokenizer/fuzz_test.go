package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

// Any text encodes without a panic into ids of the vocabulary, with a
// mask and type ids as long, by a WordPiece and a byte-level BPE file.
func FuzzEncode(f *testing.F) {
	wp, err := Train([]string{"the invoice is due", "the contract is signed", "héllo 世界 🚀"}, 200, 1, 32)
	if err != nil {
		f.Fatal(err)
	}
	vocab, merges := trainBPE([]string{"the invoice is due", "it's what we've said"}, 40)
	toks := map[string]*Tokenizer{}
	for name, b := range map[string][]byte{"wordpiece": wp, "bpe": bpeFile(vocab, merges, true, false, json.RawMessage(`null`))} {
		tok, err := Parse(b)
		if err != nil {
			f.Fatal(err)
		}
		toks[name] = tok
	}
	size := int64(len(vocab) + 1)
	for _, s := range []string{"", "the invoice", "[CLS] x [SEP]", "a\u0000b\ufffd", "  \t\n ", "it's 'll 'd", "\xff\xfe", "中文", "<|endoftext|>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for name, tok := range toks {
			e, err := tok.Encode(text)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, text, err)
			}
			if len(e.Mask) != len(e.IDs) || len(e.TypeIDs) != len(e.IDs) {
				t.Fatalf("%s: %q: %d ids, %d mask, %d types", name, text, len(e.IDs), len(e.Mask), len(e.TypeIDs))
			}
			if name == "wordpiece" && len(e.IDs) > 32 {
				t.Fatalf("%s: %q: %d ids past max_length 32", name, text, len(e.IDs))
			}
			for _, id := range e.IDs {
				if id < 0 || name == "bpe" && id >= size {
					t.Fatalf("%s: %q: id %d outside the vocabulary", name, text, id)
				}
			}
		}
	})
}

// No file makes Parse panic.
func FuzzParse(f *testing.F) {
	wp, _ := Train([]string{"a b c"}, 50, 1, 8)
	f.Add(wp)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","a"],"a b"]}}`))
	f.Add([]byte(`{"model":{"type":"WordPiece","vocab":{"[UNK]":0}},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"x"}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := Parse(b)
		if err == nil {
			_, _ = tok.Encode("the quick brown fox")
		}
	})
}

// A "word" of a hundred thousand letters is merged in pieces, not as one
// (merging is quadratic), and every letter is still covered.
func TestLongWord(t *testing.T) {
	vocab, merges := trainBPE([]string{"aaaa aaaa bbbb"}, 10)
	tok, err := Parse(bpeFile(vocab, merges, false, false, json.RawMessage(`null`)))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tok.Encode(strings.Repeat("a", 100_000))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.IDs) < 100_000/maxBPEWord {
		t.Fatalf("%d ids for 100000 letters", len(e.IDs))
	}
}
