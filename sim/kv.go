package sim

import (
	"errors"
	"fmt"
)

// ErrOutOfPages is returned by KV.Allocate and KV.Grow when the free pages do
// not cover the request; the cache is then unchanged.
var ErrOutOfPages = errors.New("out of kv pages")

// ErrUnknownSequence is returned by KV.Grow for an id that holds no pages.
var ErrUnknownSequence = errors.New("unknown sequence")

// KV is a paged KV-cache manager: GPU memory for attention state cut into
// fixed pages of PageTokens tokens. A sequence of n tokens holds exactly
// ceil(n / PageTokens) pages, allocated as it grows and released at once
// when it finishes, is cancelled or is preempted.
//
// Prefix reuse: sequences whose prompts start with the same tokens (a
// common system prompt) name that prefix with the same key. The full pages
// of the prefix are then shared: the first sequence owns them and computes
// them, and once MarkComputed says they hold K/V, later sequences reference
// them instead of taking new pages and computing them again. A shared page
// returns to the free pool only when its last owner lets go. A partly
// filled page is never shared, since its owner writes into it; nor is a
// page not yet computed, since nobody could read it.
//
// A KV is not safe for concurrent use; the Scheduler that owns one guards
// it.
type KV struct {
	pageTokens int
	ref        []int32 // owners of each page; 0 means free
	free       []int32 // free page ids, used as a stack
	seqs       map[string]*kvSeq
	prefixes   map[string]*prefixPages
}

type kvSeq struct {
	pages  []int32
	tokens int
	// prefix is the key of the prefix pages this sequence shares, and shared
	// how many leading pages of its own they are; "" and 0 when none.
	prefix string
	shared int
}

// prefixPages are the full pages holding one prefix. Each owner holds a
// leading run of them, so the owner counts never grow along the list and
// pages whose last owner left form a suffix, which is cut off. The first
// ready pages hold computed K/V and may be shared.
type prefixPages struct {
	pages []int32
	ready int
}

// NewKV returns a cache of pages pages of pageTokens tokens each, all free.
func NewKV(pages, pageTokens int) *KV {
	if pages < 0 || pageTokens < 1 {
		panic(fmt.Sprintf("sim.NewKV(%d, %d): want pages >= 0 and pageTokens >= 1", pages, pageTokens))
	}
	k := &KV{
		pageTokens: pageTokens,
		ref:        make([]int32, pages),
		free:       make([]int32, pages),
		seqs:       map[string]*kvSeq{},
		prefixes:   map[string]*prefixPages{},
	}
	// Hand out low page ids first, so a fresh cache reads naturally.
	for i := range pages {
		k.free[i] = int32(pages - 1 - i)
	}
	return k
}

// PageTokens is the number of tokens a page holds.
func (k *KV) PageTokens() int { return k.pageTokens }

// Total is the number of pages in the cache.
func (k *KV) Total() int { return len(k.ref) }

// FreePages is the number of pages no sequence holds. It is exact: a shared
// page counts once, as used, until its last owner frees it.
func (k *KV) FreePages() int { return len(k.free) }

// UsedPages is Total minus FreePages: the distinct pages held.
func (k *KV) UsedPages() int { return len(k.ref) - len(k.free) }

// PagesFor is the number of pages n tokens occupy: ceil(n / PageTokens).
func (k *KV) PagesFor(tokens int) int {
	if tokens <= 0 {
		return 0
	}
	return (tokens + k.pageTokens - 1) / k.pageTokens
}

// Tokens is the number of tokens the sequence holds, 0 when it holds none.
func (k *KV) Tokens(id string) int {
	if s := k.seqs[id]; s != nil {
		return s.tokens
	}
	return 0
}

// Pages is the number of pages the sequence holds, shared ones included.
func (k *KV) Pages(id string) int {
	if s := k.seqs[id]; s != nil {
		return len(s.pages)
	}
	return 0
}

// PageIDs is the sequence's block table, a copy: the page of each run of
// PageTokens positions, in order, shared prefix pages first. Nil when it
// holds none.
func (k *KV) PageIDs(id string) []int32 {
	if s := k.seqs[id]; s != nil {
		return append([]int32(nil), s.pages...)
	}
	return nil
}

// Holds reports whether the sequence holds pages.
func (k *KV) Holds(id string) bool { return k.seqs[id] != nil }

// SharedPages is how many pages an Allocate of tokens tokens with this
// prefix would take from the computed prefix pages other sequences hold,
// instead of from the free pool.
func (k *KV) SharedPages(prefixKey string, prefixTokens, tokens int) int {
	if prefixKey == "" {
		return 0
	}
	p := k.prefixes[prefixKey]
	if p == nil {
		return 0
	}
	return min(p.ready, k.fullPrefixPages(prefixTokens, tokens))
}

func (k *KV) fullPrefixPages(prefixTokens, tokens int) int {
	return max(0, min(prefixTokens, tokens)) / k.pageTokens
}

// Allocate gives a new sequence the pages for its first tokens tokens. When
// prefixKey is set, the first prefixTokens tokens are that prefix: its full,
// computed pages already held by others are shared, and when nobody holds
// the prefix, this sequence's own full prefix pages become it (shareable as
// MarkComputed reports them computed). It returns how many pages were
// shared, whose tokens need no prefill. It fails with
// ErrOutOfPages, changing nothing, when the free pages do not cover the
// rest, and panics when the id already holds pages (a scheduler bug).
func (k *KV) Allocate(id string, tokens int, prefixKey string, prefixTokens int) (shared int, err error) {
	if k.seqs[id] != nil {
		panic(fmt.Sprintf("sim.KV.Allocate(%q): already holds pages", id))
	}
	tokens = max(tokens, 0)
	need := k.PagesFor(tokens)
	shared = k.SharedPages(prefixKey, prefixTokens, tokens)
	if need-shared > len(k.free) {
		return 0, fmt.Errorf("allocate %d pages for %q with %d free: %w", need-shared, id, len(k.free), ErrOutOfPages)
	}
	s := &kvSeq{pages: make([]int32, 0, need), tokens: tokens}
	if shared > 0 {
		p := k.prefixes[prefixKey]
		for _, pg := range p.pages[:shared] {
			k.ref[pg]++
			s.pages = append(s.pages, pg)
		}
		s.prefix, s.shared = prefixKey, shared
	}
	for len(s.pages) < need {
		s.pages = append(s.pages, k.take())
	}
	if full := k.fullPrefixPages(prefixTokens, tokens); prefixKey != "" && k.prefixes[prefixKey] == nil && full > 0 {
		// Nobody holds this prefix: this sequence's pages become it.
		k.prefixes[prefixKey] = &prefixPages{pages: append([]int32(nil), s.pages[:full]...)}
		s.prefix, s.shared = prefixKey, full
	}
	k.seqs[id] = s
	return shared, nil
}

// Grow adds tokens tokens to a sequence, taking a page whenever one fills.
// It fails with ErrOutOfPages, changing nothing, when the free pages do not
// cover them.
func (k *KV) Grow(id string, tokens int) error {
	s := k.seqs[id]
	if s == nil {
		return fmt.Errorf("grow %q: %w", id, ErrUnknownSequence)
	}
	if tokens <= 0 {
		return nil
	}
	need := k.PagesFor(s.tokens+tokens) - len(s.pages)
	if need > len(k.free) {
		return fmt.Errorf("grow %q by %d pages with %d free: %w", id, need, len(k.free), ErrOutOfPages)
	}
	for range need {
		s.pages = append(s.pages, k.take())
	}
	s.tokens += tokens
	return nil
}

// Free releases every page of a finished or cancelled sequence and returns
// how many went back to the free pool (shared pages other sequences still
// hold do not). Freeing an id that holds nothing returns 0.
func (k *KV) Free(id string) int {
	s := k.seqs[id]
	if s == nil {
		return 0
	}
	delete(k.seqs, id)
	n := 0
	for _, pg := range s.pages {
		k.ref[pg]--
		if k.ref[pg] == 0 {
			k.free = append(k.free, pg)
			n++
		}
	}
	if s.prefix != "" {
		p := k.prefixes[s.prefix]
		cut := len(p.pages)
		for i, pg := range p.pages {
			if k.ref[pg] == 0 {
				cut = i
				break
			}
		}
		p.pages = p.pages[:cut]
		p.ready = min(p.ready, cut)
		if cut == 0 {
			delete(k.prefixes, s.prefix)
		}
	}
	return n
}

// MarkComputed records that the first tokens tokens of a sequence hold
// computed K/V, so the full prefix pages among them may be shared.
func (k *KV) MarkComputed(id string, tokens int) {
	s := k.seqs[id]
	if s == nil || s.prefix == "" {
		return
	}
	p := k.prefixes[s.prefix]
	p.ready = max(p.ready, min(s.shared, tokens/k.pageTokens))
}

// Preempt releases every page of a sequence evicted under memory pressure,
// like Free, and returns the number of tokens it held: the sequence must
// prefill them again (those in still-shared prefix pages excepted) before it
// can go on.
func (k *KV) Preempt(id string) (tokens int) {
	tokens = k.Tokens(id)
	k.Free(id)
	return tokens
}

// exclusivePages is the number of the sequence's pages no other sequence
// holds: what freeing it would return to the pool.
func (k *KV) exclusivePages(id string) int {
	s := k.seqs[id]
	if s == nil {
		return 0
	}
	n := 0
	for _, pg := range s.pages {
		if k.ref[pg] == 1 {
			n++
		}
	}
	return n
}

func (k *KV) take() int32 {
	pg := k.free[len(k.free)-1]
	k.free = k.free[:len(k.free)-1]
	k.ref[pg] = 1
	return pg
}

// Check verifies the cache's invariants and returns the first violation:
// every sequence holds exactly ceil(tokens / PageTokens) pages, none twice;
// each page's owner count equals the number of sequences holding it; a
// page held by more than one sequence is a prefix page held by sequences
// of that prefix; free pages are exactly the unowned ones, each listed
// once, so free + distinct owned = total. It is for tests and costs
// O(pages + held pages).
func (k *KV) Check() error {
	owners := make([]int32, len(k.ref))
	// seenBy[pg] is the number (from 1) of the last sequence seen holding
	// pg: a slice rather than a set per sequence, as tests call Check after
	// every step.
	seenBy := make([]int32, len(k.ref))
	var nth int32
	for id, s := range k.seqs {
		if want := k.PagesFor(s.tokens); len(s.pages) != want {
			return fmt.Errorf("sequence %q holds %d pages for %d tokens; want %d", id, len(s.pages), s.tokens, want)
		}
		nth++
		for _, pg := range s.pages {
			if pg < 0 || int(pg) >= len(k.ref) {
				return fmt.Errorf("sequence %q holds page %d outside the cache", id, pg)
			}
			if seenBy[pg] == nth {
				return fmt.Errorf("sequence %q holds page %d twice", id, pg)
			}
			seenBy[pg] = nth
			owners[pg]++
		}
		if s.prefix != "" {
			p := k.prefixes[s.prefix]
			if p == nil || s.shared > len(p.pages) || s.shared > len(s.pages) {
				return fmt.Errorf("sequence %q shares %d pages of prefix %q, which holds fewer", id, s.shared, s.prefix)
			}
			for i := range s.shared {
				if s.pages[i] != p.pages[i] {
					return fmt.Errorf("sequence %q page %d is %d; its prefix %q has %d there", id, i, s.pages[i], s.prefix, p.pages[i])
				}
			}
		}
	}
	prefixPage := map[int32]string{}
	isPrefixPage := make([]bool, len(k.ref))
	for key, p := range k.prefixes {
		if len(p.pages) == 0 {
			return fmt.Errorf("prefix %q is kept with no pages", key)
		}
		if p.ready < 0 || p.ready > len(p.pages) {
			return fmt.Errorf("prefix %q has %d ready of %d pages", key, p.ready, len(p.pages))
		}
		for _, pg := range p.pages {
			if pg < 0 || int(pg) >= len(k.ref) {
				return fmt.Errorf("prefix %q holds page %d outside the cache", key, pg)
			}
			if other, ok := prefixPage[pg]; ok {
				return fmt.Errorf("page %d belongs to prefixes %q and %q", pg, other, key)
			}
			prefixPage[pg] = key
			isPrefixPage[pg] = true
		}
	}
	for id, s := range k.seqs {
		for i, pg := range s.pages {
			if owners[pg] > 1 && (i >= s.shared || prefixPage[pg] != s.prefix) {
				return fmt.Errorf("page %d is held by %d sequences but is not a prefix page of %q", pg, owners[pg], id)
			}
		}
	}
	inFree := make([]bool, len(k.ref))
	for _, pg := range k.free {
		if inFree[pg] {
			return fmt.Errorf("page %d is free twice", pg)
		}
		inFree[pg] = true
	}
	owned := 0
	for pg, n := range owners {
		if k.ref[pg] != n {
			return fmt.Errorf("page %d counts %d owners; %d sequences hold it", pg, k.ref[pg], n)
		}
		if (n == 0) != inFree[pg] {
			return fmt.Errorf("page %d has %d owners and free=%v", pg, n, inFree[pg])
		}
		if isPrefixPage[pg] && n == 0 {
			return fmt.Errorf("prefix page %d has no owner", pg)
		}
		if n > 0 {
			owned++
		}
	}
	if len(k.free)+owned != len(k.ref) {
		return fmt.Errorf("free %d + owned %d != total %d", len(k.free), owned, len(k.ref))
	}
	return nil
}
