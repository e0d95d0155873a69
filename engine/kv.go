package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
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
// Prefix reuse, as vLLM's automatic prefix caching: a full page of a
// prompt is named by a hash chain, PageHashes[i] naming the prompt's
// first (i+1)×PageTokens tokens (a hash of PageHashes[i-1] and page i's
// tokens), so two prompts with the same leading tokens name their leading
// pages alike. Once MarkComputed says a sequence's page holds K/V, the page
// is registered under its hash, and a later sequence whose chain starts
// the same references it instead of taking a new page and computing it
// again. A page is shared by reference count; a partly filled page is
// never registered, since its owner writes into it, nor is a page not yet
// computed, since nobody could read it. Sequences that only name a prefix
// (Allocate's prefixKey) get a chain made from the key.
//
// When the last holder of a registered page lets go, the page is freed
// (the default: sharing lasts while some sequence holds the prefix), or,
// with CachePrefixes, kept cached: it holds nothing for any sequence but
// keeps its K/V and its hash, in a least-recently-released list. Cached
// pages count as available: taking a page takes a free one first, else
// evicts the cached page released longest ago, so a cache never refuses
// a sequence its idle pages could serve, and eviction always comes before
// any preemption.
//
// A KV is not safe for concurrent use; the Scheduler that owns one guards
// it.
type KV struct {
	pageTokens int
	cache      bool
	ref        []int32  // holders of each page; 0 means free or cached
	hash       []uint64 // a registered page's hash
	registered []bool
	byHash     map[uint64]int32
	free       []int32 // pages holding nothing, used as a stack
	lru        lruList // cached pages: registered, held by nobody
	seqs       map[string]*kvSeq
}

type kvSeq struct {
	pages  []int32
	tokens int
	// hashes is the hash chain of its leading full pages that may be
	// shared (at most one per full page), and shared how many of them
	// came from the cache when it was allocated.
	hashes []uint64
	shared int
}

// NewKV returns a cache of pages pages of pageTokens tokens each, all free.
func NewKV(pages, pageTokens int) *KV {
	if pages < 0 || pageTokens < 1 {
		panic(fmt.Sprintf("engine.NewKV(%d, %d): want pages >= 0 and pageTokens >= 1", pages, pageTokens))
	}
	k := &KV{
		pageTokens: pageTokens,
		ref:        make([]int32, pages),
		hash:       make([]uint64, pages),
		registered: make([]bool, pages),
		byHash:     map[uint64]int32{},
		free:       make([]int32, pages),
		lru:        newLRU(pages),
		seqs:       map[string]*kvSeq{},
	}
	// Hand out low page ids first, so a fresh cache reads naturally.
	for i := range pages {
		k.free[i] = int32(pages - 1 - i)
	}
	return k
}

// CachePrefixes turns prefix caching on or off: whether a registered page
// its last holder released stays cached (see KV) or is freed. Turning it
// off frees the cached pages.
func (k *KV) CachePrefixes(on bool) {
	k.cache = on
	if !on {
		for k.lru.n > 0 {
			k.free = append(k.free, k.evict())
		}
	}
}

// PageTokens is the number of tokens a page holds.
func (k *KV) PageTokens() int { return k.pageTokens }

// Total is the number of pages in the cache.
func (k *KV) Total() int { return len(k.ref) }

// FreePages is the number of pages that hold nothing: no sequence holds
// them and they are not cached. It is exact: a shared page counts once, as
// used, until its last holder frees it.
func (k *KV) FreePages() int { return len(k.free) }

// CachedPages is the number of cached pages: computed prefix pages no
// sequence holds, kept for reuse and evicted when pages are needed.
func (k *KV) CachedPages() int { return k.lru.n }

// AvailablePages is FreePages plus CachedPages: what allocation can take.
func (k *KV) AvailablePages() int { return len(k.free) + k.lru.n }

// UsedPages is the distinct pages some sequence holds: Total less the free
// and the cached.
func (k *KV) UsedPages() int { return len(k.ref) - len(k.free) - k.lru.n }

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
// prefix would take from the computed pages registered under the prefix
// (held by other sequences or cached), instead of from the pool.
func (k *KV) SharedPages(prefixKey string, prefixTokens, tokens int) int {
	hit, _ := k.match(k.keyHashes(prefixKey, prefixTokens, tokens), tokens)
	return hit
}

// keyHashes is the hash chain of a prefix named by a key: one hash per
// full page of its first min(prefixTokens, tokens) tokens.
func (k *KV) keyHashes(prefixKey string, prefixTokens, tokens int) []uint64 {
	if prefixKey == "" {
		return nil
	}
	n := max(0, min(prefixTokens, tokens)) / k.pageTokens
	hs := make([]uint64, n)
	var b [8]byte
	for i := range hs {
		h := fnv.New64a()
		if i > 0 {
			binary.LittleEndian.PutUint64(b[:], hs[i-1])
			_, _ = h.Write(b[:])
		}
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		_, _ = h.Write(b[:])
		_, _ = h.Write([]byte(prefixKey))
		hs[i] = h.Sum64()
	}
	return hs
}

// saltHashes is a hash chain salted: each hash replaced by SHA-256 of the
// salt's length, the salt and the hash, cut to 64 bits. A chain still
// names its prefix (each hash already names all the tokens before it),
// and chains of different salts share no hash but by a 64-bit collision.
func saltHashes(salt string, hs []uint64) []uint64 {
	out := make([]uint64, len(hs))
	buf := make([]byte, 0, 16+len(salt))
	for i, h := range hs {
		buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(len(salt)))
		buf = append(buf, salt...)
		buf = binary.LittleEndian.AppendUint64(buf, h)
		sum := sha256.Sum256(buf)
		out[i] = binary.LittleEndian.Uint64(sum[:8])
	}
	return out
}

// match is how many leading pages of a chain are registered (hit), and how
// many of those are cached, held by nobody (idle): taking them makes them
// unavailable, as taking a free page would.
func (k *KV) match(hashes []uint64, tokens int) (hit, idle int) {
	hashes = hashes[:min(len(hashes), max(0, tokens)/k.pageTokens)]
	for _, h := range hashes {
		pg, ok := k.byHash[h]
		if !ok {
			break
		}
		hit++
		if k.ref[pg] == 0 {
			idle++
		}
	}
	return hit, idle
}

// Allocate gives a new sequence the pages for its first tokens tokens. When
// prefixKey is set, the first prefixTokens tokens are that prefix: its full
// pages already computed (by a sequence still holding them, or cached) are
// shared, and this sequence's own full prefix pages become shareable as
// MarkComputed reports them computed. It returns how many pages were
// shared, whose tokens need no prefill. It fails with ErrOutOfPages,
// changing nothing, when the available pages do not cover the rest, and
// panics when the id already holds pages (a scheduler bug).
func (k *KV) Allocate(id string, tokens int, prefixKey string, prefixTokens int) (shared int, err error) {
	return k.allocate(id, tokens, k.keyHashes(prefixKey, prefixTokens, tokens))
}

// allocate is Allocate with the prompt's hash chain.
func (k *KV) allocate(id string, tokens int, hashes []uint64) (shared int, err error) {
	if k.seqs[id] != nil {
		panic(fmt.Sprintf("engine.KV.Allocate(%q): already holds pages", id))
	}
	tokens = max(tokens, 0)
	need := k.PagesFor(tokens)
	hit, idle := k.match(hashes, tokens)
	if avail := k.AvailablePages() - idle; need-hit > avail {
		return 0, fmt.Errorf("allocate %d pages for %q with %d available: %w", need-hit, id, avail, ErrOutOfPages)
	}
	hashes = hashes[:min(len(hashes), tokens/k.pageTokens)]
	s := &kvSeq{pages: make([]int32, 0, need), tokens: tokens, hashes: append([]uint64(nil), hashes...), shared: hit}
	// The shared pages first, so that taking new ones cannot evict them.
	for _, h := range hashes[:hit] {
		pg := k.byHash[h]
		if k.ref[pg] == 0 {
			k.lru.remove(pg)
		}
		k.ref[pg]++
		s.pages = append(s.pages, pg)
	}
	for len(s.pages) < need {
		s.pages = append(s.pages, k.take())
	}
	k.seqs[id] = s
	return hit, nil
}

// Grow adds tokens tokens to a sequence, taking a page whenever one fills.
// It fails with ErrOutOfPages, changing nothing, when the available pages
// do not cover them.
func (k *KV) Grow(id string, tokens int) error {
	s := k.seqs[id]
	if s == nil {
		return fmt.Errorf("grow %q: %w", id, ErrUnknownSequence)
	}
	if tokens <= 0 {
		return nil
	}
	need := k.PagesFor(s.tokens+tokens) - len(s.pages)
	if need > k.AvailablePages() {
		return fmt.Errorf("grow %q by %d pages with %d available: %w", id, need, k.AvailablePages(), ErrOutOfPages)
	}
	for range need {
		s.pages = append(s.pages, k.take())
	}
	s.tokens += tokens
	return nil
}

// Free releases every page of a finished or cancelled sequence and returns
// how many became available: freed, or cached when prefix caching keeps
// them (shared pages other sequences still hold do not count). Freeing an
// id that holds nothing returns 0.
func (k *KV) Free(id string) int {
	s := k.seqs[id]
	if s == nil {
		return 0
	}
	delete(k.seqs, id)
	n := 0
	var cached []int32
	for _, pg := range s.pages {
		k.ref[pg]--
		if k.ref[pg] > 0 {
			continue
		}
		n++
		switch {
		case k.registered[pg] && k.cache:
			cached = append(cached, pg)
		case k.registered[pg]:
			k.unregister(pg)
			k.free = append(k.free, pg)
		default:
			k.free = append(k.free, pg)
		}
	}
	// The last page of a chain first: a chain is evicted from its end, so
	// its head, which more prompts share, stays longest.
	for i := len(cached) - 1; i >= 0; i-- {
		k.lru.pushBack(cached[i])
	}
	return n
}

// MarkComputed records that the first tokens tokens of a sequence hold
// computed K/V: its full pages among them that its hash chain names are
// registered, so later sequences may share them. A page whose hash is
// registered already (another sequence computed the same tokens first)
// stays its own.
func (k *KV) MarkComputed(id string, tokens int) {
	s := k.seqs[id]
	if s == nil {
		return
	}
	n := min(len(s.hashes), tokens/k.pageTokens)
	for i := s.shared; i < n; i++ {
		pg := s.pages[i]
		if k.registered[pg] {
			continue
		}
		if _, taken := k.byHash[s.hashes[i]]; taken {
			continue
		}
		k.registered[pg], k.hash[pg] = true, s.hashes[i]
		k.byHash[s.hashes[i]] = pg
	}
}

// Preempt releases every page of a sequence evicted under memory pressure,
// like Free, and returns the number of tokens it held: the sequence must
// prefill them again (those in still-shared or cached prefix pages
// excepted) before it can go on.
func (k *KV) Preempt(id string) (tokens int) {
	tokens = k.Tokens(id)
	k.Free(id)
	return tokens
}

// exclusivePages is the number of the sequence's pages no other sequence
// holds: what freeing it would make available.
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

// take hands out a page: a free one, else the cached page released longest
// ago, which it evicts. The caller checked AvailablePages.
func (k *KV) take() int32 {
	var pg int32
	if n := len(k.free); n > 0 {
		pg = k.free[n-1]
		k.free = k.free[:n-1]
	} else {
		pg = k.evict()
	}
	k.ref[pg] = 1
	return pg
}

// evict drops the oldest cached page from the cache and returns it.
func (k *KV) evict() int32 {
	pg := k.lru.popFront()
	k.unregister(pg)
	return pg
}

func (k *KV) unregister(pg int32) {
	delete(k.byHash, k.hash[pg])
	k.registered[pg], k.hash[pg] = false, 0
}

// Check verifies the cache's invariants and returns the first violation:
// every sequence holds exactly ceil(tokens / PageTokens) pages, none twice;
// each page's holder count equals the number of sequences holding it; a
// page held by more than one sequence is a registered page each holds at
// the place its hash names; the hash index and the registered pages agree;
// free pages are exactly the unheld, unregistered ones and cached pages
// the unheld, registered ones (none without CachePrefixes), each listed
// once, so free + cached + distinct held = total. It is for tests and
// costs O(pages + held pages).
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
		if len(s.hashes) > len(s.pages) || s.shared > len(s.hashes) {
			return fmt.Errorf("sequence %q has %d hashes and %d shared for %d pages", id, len(s.hashes), s.shared, len(s.pages))
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
	}
	for id, s := range k.seqs {
		for i, pg := range s.pages {
			if owners[pg] > 1 && (!k.registered[pg] || i >= len(s.hashes) || s.hashes[i] != k.hash[pg]) {
				return fmt.Errorf("page %d is held by %d sequences but is not registered under %q's hash at %d", pg, owners[pg], id, i)
			}
			if i < s.shared && (!k.registered[pg] || s.hashes[i] != k.hash[pg]) {
				return fmt.Errorf("sequence %q shares page %d at %d, which is not registered under its hash", id, pg, i)
			}
		}
	}
	nreg := 0
	for pg, r := range k.registered {
		if !r {
			continue
		}
		nreg++
		if got, ok := k.byHash[k.hash[pg]]; !ok || got != int32(pg) {
			return fmt.Errorf("page %d is registered under a hash that names page %d", pg, got)
		}
	}
	if nreg != len(k.byHash) {
		return fmt.Errorf("%d pages registered; the hash index holds %d", nreg, len(k.byHash))
	}
	inFree := make([]bool, len(k.ref))
	for _, pg := range k.free {
		if inFree[pg] {
			return fmt.Errorf("page %d is free twice", pg)
		}
		inFree[pg] = true
	}
	inLRU := make([]bool, len(k.ref))
	n := 0
	for pg := k.lru.head; pg >= 0; pg = k.lru.next[pg] {
		if inLRU[pg] || n > len(k.ref) {
			return fmt.Errorf("page %d is cached twice", pg)
		}
		inLRU[pg] = true
		n++
	}
	if n != k.lru.n {
		return fmt.Errorf("the cache lists %d pages and counts %d", n, k.lru.n)
	}
	if n > 0 && !k.cache {
		return fmt.Errorf("%d pages cached without prefix caching", n)
	}
	owned := 0
	for pg, o := range owners {
		if k.ref[pg] != o {
			return fmt.Errorf("page %d counts %d holders; %d sequences hold it", pg, k.ref[pg], o)
		}
		switch {
		case o > 0 && (inFree[pg] || inLRU[pg]):
			return fmt.Errorf("page %d has %d holders and free=%v cached=%v", pg, o, inFree[pg], inLRU[pg])
		case o == 0 && inFree[pg] == inLRU[pg]:
			return fmt.Errorf("page %d has no holder and free=%v cached=%v", pg, inFree[pg], inLRU[pg])
		case inFree[pg] && k.registered[pg]:
			return fmt.Errorf("free page %d is registered", pg)
		case inLRU[pg] && !k.registered[pg]:
			return fmt.Errorf("cached page %d is not registered", pg)
		}
		if o > 0 {
			owned++
		}
	}
	if len(k.free)+k.lru.n+owned != len(k.ref) {
		return fmt.Errorf("free %d + cached %d + held %d != total %d", len(k.free), k.lru.n, owned, len(k.ref))
	}
	return nil
}

// lruList is a doubly linked list of page ids over arrays, oldest first.
type lruList struct {
	prev, next []int32
	head, tail int32
	n          int
}

func newLRU(pages int) lruList {
	return lruList{prev: make([]int32, pages), next: make([]int32, pages), head: -1, tail: -1}
}

func (l *lruList) pushBack(pg int32) {
	l.prev[pg], l.next[pg] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = pg
	} else {
		l.head = pg
	}
	l.tail = pg
	l.n++
}

func (l *lruList) remove(pg int32) {
	p, n := l.prev[pg], l.next[pg]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.prev[pg], l.next[pg] = -1, -1
	l.n--
}

func (l *lruList) popFront() int32 {
	pg := l.head
	l.remove(pg)
	return pg
}
