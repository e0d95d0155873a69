package tokenizer

import (
	"encoding/json"
	"sort"
	"strings"
)

// BERT's special tokens, in the order Train gives them ids.
var specialTokens = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}

// Train builds a BERT-style WordPiece tokenizer.json from texts: BERT's
// normalizer (lower case, accents stripped) and pre-tokenizer, the special
// tokens [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, every character
// seen (alone and as a "##" continuation, so that no word of the corpus's
// alphabet is unknown), then the words seen at least minCount times, most
// frequent first, up to size entries in all. The post-processor wraps a
// text in [CLS] … [SEP]; padding pads with [PAD] and truncation holds a
// text to maxLength tokens. The output is deterministic.
func Train(texts []string, size, minCount, maxLength int) ([]byte, error) {
	norm := func(s string) string { return bertNormalize(s, true, true, true, true) }
	counts := map[string]int{}
	chars := map[string]bool{}
	for _, t := range texts {
		for _, w := range splitBert(norm(t)) {
			counts[w]++
			for _, r := range w {
				chars[string(r)] = true
			}
		}
	}
	vocab := map[string]int64{}
	add := func(tok string) {
		if _, ok := vocab[tok]; !ok && (len(vocab) < size || size <= 0) {
			vocab[tok] = int64(len(vocab))
		}
	}
	for _, s := range specialTokens {
		add(s)
	}
	alphabet := make([]string, 0, len(chars))
	for c := range chars {
		alphabet = append(alphabet, c)
	}
	sort.Strings(alphabet)
	for _, c := range alphabet {
		add(c)
	}
	for _, c := range alphabet {
		add("##" + c)
	}
	words := make([]string, 0, len(counts))
	for w, n := range counts {
		if n >= minCount && len([]rune(w)) > 1 {
			words = append(words, w)
		}
	}
	sort.Slice(words, func(i, j int) bool {
		if counts[words[i]] != counts[words[j]] {
			return counts[words[i]] > counts[words[j]]
		}
		return words[i] < words[j]
	})
	for _, w := range words {
		add(w)
	}
	type special struct {
		ID     string   `json:"id"`
		IDs    []int64  `json:"ids"`
		Tokens []string `json:"tokens"`
	}
	seq := func(typeID int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": "A", "type_id": typeID}}
	}
	tok := func(name string) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": name, "type_id": 0}}
	}
	var added []map[string]any
	for i, s := range specialTokens {
		added = append(added, map[string]any{"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true})
	}
	f := map[string]any{
		"version":       "1.0",
		"truncation":    map[string]any{"direction": "Right", "max_length": maxLength, "strategy": "LongestFirst", "stride": 0},
		"padding":       map[string]any{"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": nil, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
		"added_tokens":  added,
		"normalizer":    map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": nil, "lowercase": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{tok("[CLS]"), seq(0), tok("[SEP]")},
			"pair":   []any{tok("[CLS]"), seq(0), tok("[SEP]"), map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}, map[string]any{"SpecialToken": map[string]any{"id": "[SEP]", "type_id": 1}}},
			"special_tokens": map[string]special{
				"[CLS]": {ID: "[CLS]", IDs: []int64{vocab["[CLS]"]}, Tokens: []string{"[CLS]"}},
				"[SEP]": {ID: "[SEP]", IDs: []int64{vocab["[SEP]"]}, Tokens: []string{"[SEP]"}},
			}},
		"decoder": map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": vocab},
	}
	return json.MarshalIndent(f, "", " ")
}

// Words are the normalized words of a text as the trained tokenizer splits
// them, for a caller that builds features over the same vocabulary.
func Words(text string) []string {
	return splitBert(strings.TrimSpace(bertNormalize(text, true, true, true, true)))
}
