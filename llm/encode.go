package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrTooLong is a text that cannot fit the token limit it was encoded
// against. Encoding stops as soon as that is certain: at once when the text
// has more bytes than limit tokens of the longest vocabulary entry could
// hold, else at the first word past the limit.
var ErrTooLong = errors.New("text longer than the token limit")

// Segment is a piece of text to encode. Special marks text that a chat
// template wrote: control tokens written in it (<|im_start|>, …) become
// those tokens. Everything else, such as a user's message, is text even
// where it spells a control token.
type Segment struct {
	Text    string
	Special bool
}

// Encode tokenises text. With special, control and user-defined token
// texts in it (as a chat template writes them) become those tokens; BOS is
// prepended when the tokenizer adds it.
func (t *Tokenizer) Encode(text string, special bool) []int {
	out, _ := t.EncodeSegments(context.Background(), []Segment{{Text: text, Special: special}}, 0)
	return out
}

// MaxTokenBytes is the most bytes of text one token stands for (the
// longest vocabulary entry), so a text of n bytes is at least
// n/MaxTokenBytes tokens.
func (t *Tokenizer) MaxTokenBytes() int { return t.maxBytes }

// EncodeSegments tokenises the segments as one text (BOS first when the
// tokenizer adds it): words and merges run across segment boundaries, but
// control tokens are recognised only inside Special segments. With limit
// above 0 a text that would be more than limit tokens is ErrTooLong: one
// longer than limit×MaxTokenBytes bytes without any work, any other as soon
// as its tokens pass the limit. Encoding stops with ctx's error when ctx is
// done. The work is O(n log n) in the text's bytes.
func (t *Tokenizer) EncodeSegments(ctx context.Context, segs []Segment, limit int) ([]int, error) {
	n := 0
	for _, s := range segs {
		n += len(s.Text)
	}
	if limit > 0 && n > limit*max(1, t.maxBytes) {
		return nil, fmt.Errorf("%d bytes are more than %d tokens: %w", n, limit, ErrTooLong)
	}
	var b strings.Builder
	b.Grow(n)
	// The control tokens found, in order: at byte at of the joined text.
	type mark struct{ at, id, n int }
	var marks []mark
	for _, s := range segs {
		base := b.Len()
		b.WriteString(s.Text)
		if !s.Special || len(t.specials) == 0 {
			continue
		}
		for i := 0; i < len(s.Text); {
			hit := ""
			for _, sp := range t.specialsBy[s.Text[i]] {
				if strings.HasPrefix(s.Text[i:], sp) {
					hit = sp
					break
				}
			}
			if hit == "" {
				i++
				continue
			}
			marks = append(marks, mark{at: base + i, id: t.ids[hit], n: len(hit)})
			i += len(hit)
		}
	}
	text := b.String()
	e := encoder{t: t, ctx: ctx, limit: limit}
	if t.AddsBOS() {
		e.out = append(e.out, t.BOS)
	}
	first, pos := true, 0
	for _, m := range append(marks, mark{at: len(text), id: -1}) {
		if m.at > pos {
			if err := e.text(text[pos:m.at], first); err != nil {
				return nil, err
			}
		}
		first = false
		if m.id < 0 {
			break
		}
		if err := e.add(m.id); err != nil {
			return nil, err
		}
		pos = m.at + m.n
	}
	t.ops.Add(int64(e.ops))
	return e.out, nil
}

// Ops is the number of merge-queue operations (pushes and pops) all
// encodings so far have made: a measure of the encoder's work that tests
// hold to O(n log n).
func (t *Tokenizer) Ops() int64 { return t.ops.Load() }

// encoder is one encoding's state.
type encoder struct {
	t     *Tokenizer
	ctx   context.Context
	limit int
	out   []int
	ops   int
	words int
}

func (e *encoder) add(ids ...int) error {
	e.out = append(e.out, ids...)
	if e.limit > 0 && len(e.out) > e.limit {
		return fmt.Errorf("more than %d tokens: %w", e.limit, ErrTooLong)
	}
	return nil
}

// check is ctx's error, looked at every 64 words and every 4,096 merges.
func (e *encoder) check() error {
	if err := e.ctx.Err(); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return nil
}

func (e *encoder) text(s string, first bool) error {
	if e.t.model == "llama" {
		if first && e.t.addSpace {
			s = " " + s
		}
		return e.spm(strings.ReplaceAll(s, " ", "▁"))
	}
	for _, w := range pretokenize(s) {
		if e.words++; e.words%64 == 0 {
			if err := e.check(); err != nil {
				return err
			}
		}
		if err := e.bpe(w); err != nil {
			return err
		}
	}
	return nil
}

// bpe encodes one pre-tokenised word with GPT-2's merges, lowest rank
// first and leftmost among equals.
func (e *encoder) bpe(word string) error {
	var b strings.Builder
	b.Grow(2 * len(word))
	for i := 0; i < len(word); i++ {
		b.WriteRune(byteToUnicode[word[i]])
	}
	m := b.String()
	ranks := e.t.ranks
	syms, err := e.merge(m, func(l, r, _ string) (float64, bool) {
		rank, ok := ranks[[2]string{l, r}]
		return -float64(rank), ok
	})
	if err != nil {
		return err
	}
	for _, s := range syms {
		if id, ok := e.t.ids[s]; ok {
			if err := e.add(id); err != nil {
				return err
			}
			continue
		}
		// A merge result missing from the vocabulary: fall back to its runes.
		for _, r := range s {
			if id, ok := e.t.ids[string(r)]; ok {
				if err := e.add(id); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// spm encodes text (spaces already "▁") with SentencePiece's merges: the
// pair whose joined piece has the highest score first, leftmost among
// equals, with byte fallback for what the vocabulary lacks.
func (e *encoder) spm(s string) error {
	ids, scores := e.t.ids, e.t.scores
	syms, err := e.merge(s, func(_, _, joined string) (float64, bool) {
		id, ok := ids[joined]
		if !ok {
			return 0, false
		}
		return float64(scores[id]), true
	})
	if err != nil {
		return err
	}
	for _, sym := range syms {
		if id, ok := ids[sym]; ok {
			if err := e.add(id); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < len(sym); i++ {
			if id := e.t.byteTok[sym[i]]; id >= 0 {
				if err := e.add(id); err != nil {
					return err
				}
			} else if id, ok := ids["<unk>"]; ok {
				if err := e.add(id); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// merge splits s into its runes (an invalid byte is a symbol of its own)
// and merges adjacent symbols while pair names a merge for them, the pair
// (pair's priority; joined is l and r as one substring of s) of highest
// priority first and the leftmost among equals, as the
// textbook loop that rescans the word after every merge does, but with a
// priority queue of candidate pairs: O(n log n) for n runes instead of
// O(n²). A queued pair whose symbols have changed since is skipped when
// it comes up.
func (e *encoder) merge(s string, pair func(l, r, joined string) (float64, bool)) ([]string, error) {
	var start, end, prev, next []int
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		start, end = append(start, i), append(end, i+w)
		i += w
	}
	n := len(start)
	if n <= 1 {
		if n == 0 {
			return nil, nil
		}
		return []string{s}, nil
	}
	prev, next = make([]int, n), make([]int, n)
	for i := range n {
		prev[i], next[i] = i-1, i+1
	}
	next[n-1] = -1
	alive := make([]bool, n)
	for i := range alive {
		alive[i] = true
	}
	q := &pairQueue{}
	*q = make(pairQueue, 0, n)
	push := func(l int) {
		r := next[l]
		if l < 0 || r < 0 {
			return
		}
		if p, ok := pair(s[start[l]:end[l]], s[start[r]:end[r]], s[start[l]:end[r]]); ok {
			e.ops++
			q.push(candidate{prio: p, left: l, lend: end[l], rend: end[r]})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(i)
	}
	for len(*q) > 0 {
		c := q.pop()
		if e.ops++; e.ops%4096 == 0 {
			if err := e.check(); err != nil {
				return nil, err
			}
		}
		l := c.left
		r := next[l]
		if !alive[l] || end[l] != c.lend || r < 0 || end[r] != c.rend {
			continue // stale: one of its symbols has merged since
		}
		end[l] = end[r]
		alive[r] = false
		next[l] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = l
		}
		if prev[l] >= 0 {
			push(prev[l])
		}
		push(l)
	}
	var syms []string
	for i := 0; i >= 0; i = next[i] {
		syms = append(syms, s[start[i]:end[i]])
	}
	return syms, nil
}

// candidate is a queued merge of the symbol at left with its right
// neighbour, as they were when queued (their ends).
type candidate struct {
	prio             float64
	left, lend, rend int
}

// pairQueue is a binary heap that pops the highest priority first, then
// the leftmost. (Not container/heap: its interface boxes every element.)
type pairQueue []candidate

func (q pairQueue) less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio > q[j].prio
	}
	return q[i].left < q[j].left
}

func (q *pairQueue) push(c candidate) {
	*q = append(*q, c)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *pairQueue) pop() candidate {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < n && h.less(l, best) {
			best = l
		}
		if r := l + 1; r < n && h.less(r, best) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}
