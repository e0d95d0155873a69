package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"modelplane/sim/profile"
)

// chain is a test hash chain: page i of prompt p.
func chain(p, pages int) []uint64 {
	hs := make([]uint64, pages)
	for i := range hs {
		hs[i] = uint64(p)<<32 | uint64(i+1)
	}
	return hs
}

// With prefix caching, a released sequence's computed pages stay cached
// and serve a later sequence; they are evicted least recently released
// first, a chain from its end, and only when no free page is left.
func TestKVPrefixCache(t *testing.T) {
	t.Parallel()
	k := NewKV(10, 16)
	k.CachePrefixes(true)
	if _, err := k.allocate("a", 64, chain(1, 4)); err != nil {
		t.Fatal(err)
	}
	k.MarkComputed("a", 64)
	if n := k.Free("a"); n != 4 || k.CachedPages() != 4 || k.FreePages() != 6 || k.UsedPages() != 0 {
		t.Fatalf("Free(a) = %d; cached %d, free %d, used %d; want 4, 4, 6, 0", n, k.CachedPages(), k.FreePages(), k.UsedPages())
	}
	// b shares a's first three pages from the cache; its fourth differs.
	hs := append(chain(1, 3), 99)
	if shared, err := k.allocate("b", 64, hs); err != nil || shared != 3 {
		t.Fatalf("allocate(b) = %d, %v; want 3 shared", shared, err)
	}
	if k.CachedPages() != 1 || k.UsedPages() != 4 {
		t.Errorf("after b: cached %d, used %d; want 1 (a's last page) and 4", k.CachedPages(), k.UsedPages())
	}
	k.MarkComputed("b", 64)
	k.Free("b")
	// Now cached: a's page 3 (released first), then b's chain, from its end.
	if k.CachedPages() != 5 || k.FreePages() != 5 {
		t.Fatalf("cached %d, free %d; want 5 and 5", k.CachedPages(), k.FreePages())
	}
	// c takes 7 pages: 5 free, then evicts two, oldest first: a's page 3,
	// then b's page 3 (the end of the chain released last).
	if _, err := k.allocate("c", 7*16, nil); err != nil {
		t.Fatal(err)
	}
	if hit, _ := k.match(chain(1, 4), 64); hit != 3 {
		t.Errorf("a's chain hits %d pages after eviction; want 3 (its head)", hit)
	}
	if hit, _ := k.match(hs, 64); hit != 3 {
		t.Errorf("b's chain hits %d pages; want 3, its own last page evicted", hit)
	}
	// Refusal counts cached pages as available, less those the chain
	// itself would revive.
	if _, err := k.allocate("d", 4*16, chain(1, 4)); !errors.Is(err, ErrOutOfPages) {
		t.Errorf("d needs 1 new page with 3 cached, all its own: %v; want ErrOutOfPages", err)
	}
	if shared, err := k.allocate("e", 3*16, chain(1, 3)); err != nil || shared != 3 {
		t.Errorf("e = %d, %v; want its 3 pages from the cache", shared, err)
	}
	if err := k.Check(); err != nil {
		t.Error(err)
	}
	k.Free("c")
	k.Free("e")
	if k.UsedPages() != 0 || k.FreePages()+k.CachedPages() != k.Total() {
		t.Errorf("after all left: used %d, free %d + cached %d != %d", k.UsedPages(), k.FreePages(), k.CachedPages(), k.Total())
	}
	k.CachePrefixes(false)
	if k.CachedPages() != 0 || k.FreePages() != k.Total() {
		t.Errorf("caching off: cached %d, free %d; want 0 and %d", k.CachedPages(), k.FreePages(), k.Total())
	}
	if err := k.Check(); err != nil {
		t.Error(err)
	}
}

// TestKVPrefixCacheProperties runs random operations on a caching KV with
// chains that share heads, checking the invariants after each: an
// allocation is refused only when the pages it needs (less those it
// shares, plus the cached ones among them) exceed the available ones,
// and a refusal changes nothing.
func TestKVPrefixCacheProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(60) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 0x6361))
			k := NewKV(16+r.IntN(64), 16)
			k.CachePrefixes(true)
			var ids []string
			for op := range 300 {
				switch c := r.IntN(10); {
				case c < 5 || len(ids) == 0:
					id := fmt.Sprint("s", op)
					tokens := 1 + r.IntN(300)
					full := (tokens - 1) / 16
					hs := chain(r.IntN(3), full)
					if r.IntN(3) == 0 && full > 0 {
						hs[r.IntN(full)] += 1 << 20 // diverge somewhere
					}
					hit, idle := k.match(hs, tokens)
					avail := k.AvailablePages()
					shared, err := k.allocate(id, tokens, hs)
					if errors.Is(err, ErrOutOfPages) {
						if k.AvailablePages() != avail || k.Holds(id) {
							t.Fatalf("op %d: refused allocate changed the cache", op)
						}
						if k.PagesFor(tokens)-hit+idle <= avail {
							t.Fatalf("op %d: refused %d pages (%d shared, %d cached) with %d available", op, k.PagesFor(tokens), hit, idle, avail)
						}
						break
					}
					if err != nil || shared != hit {
						t.Fatalf("op %d: allocate = %d, %v; match said %d", op, shared, err, hit)
					}
					if got, want := avail-k.AvailablePages(), k.PagesFor(tokens)-hit+idle; got != want {
						t.Fatalf("op %d: allocate took %d available pages; want %d", op, got, want)
					}
					if r.IntN(4) != 0 {
						k.MarkComputed(id, tokens)
					}
					ids = append(ids, id)
				case c < 7:
					id := ids[r.IntN(len(ids))]
					_ = k.Grow(id, 1+r.IntN(40))
				default:
					i := r.IntN(len(ids))
					held := k.exclusivePages(ids[i])
					avail := k.AvailablePages()
					if n := k.Free(ids[i]); n != held || k.AvailablePages()-avail != held {
						t.Fatalf("op %d: Free returned %d, available grew %d; it held %d alone", op, n, k.AvailablePages()-avail, held)
					}
					ids = append(ids[:i], ids[i+1:]...)
				}
				if err := k.Check(); err != nil {
					t.Fatalf("op %d: %v", op, err)
				}
			}
			for _, id := range ids {
				k.Free(id)
			}
			if k.UsedPages() != 0 || k.FreePages()+k.CachedPages() != k.Total() {
				t.Errorf("after all left: used %d, free %d + cached %d != %d", k.UsedPages(), k.FreePages(), k.CachedPages(), k.Total())
			}
		})
	}
}

// TestSchedulerPrefixCaching drives random workloads whose prompts share
// heads (PageHashes) through a caching scheduler and checks after every
// step: the cache's invariants, no Grow failure, no growth preemption
// under "final" (cached pages count as available, so eviction comes
// first), every request finished; at the end no page held, the rest free
// or cached. The same workload without caching prefills more.
func TestSchedulerPrefixCaching(t *testing.T) {
	t.Parallel()
	for _, reserve := range []profile.Reserve{profile.ReserveFinal, profile.ReserveStep} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%s/seed%d", reserve, seed), func(t *testing.T) {
				t.Parallel()
				p, reqs := randomWorkload(seed, reserve, false)
				r := rand.New(rand.NewPCG(seed, 0x7063))
				for i := range reqs {
					reqs[i].PrefixKey, reqs[i].PrefixTokens = "", 0
					full := (reqs[i].PromptTokens - 1) / p.PageTokens
					reqs[i].PageHashes = chain(r.IntN(4), full)
				}
				cached := runCaching(t, p, reqs, seed, true)
				plain := runCaching(t, p, reqs, seed, false)
				if cached.PrefixHits == 0 || plain.PrefixHits > cached.PrefixHits {
					t.Errorf("prefix hits %d with caching, %d without; want more with", cached.PrefixHits, plain.PrefixHits)
				}
			})
		}
	}
}

func runCaching(t *testing.T, p profile.Profile, reqs []Request, seed uint64, caching bool) Stats {
	t.Helper()
	return runCachingChecked(t, p, reqs, seed, caching, nil)
}

// runCachingChecked is runCaching calling check after every step.
func runCachingChecked(t *testing.T, p profile.Profile, reqs []Request, seed uint64, caching bool, check func(*Scheduler)) Stats {
	t.Helper()
	c := profileConfig(t, p, seed)
	c.PrefixCaching = caching
	s, err := NewScheduler(c)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	var now time.Duration
	i := 0
	for step := 0; ; step++ {
		if step > 1_000_000 {
			t.Fatal("no end in sight")
		}
		for i < len(reqs) && reqs[i].Arrival <= now {
			if err := s.Submit(reqs[i]); err == nil {
				live[reqs[i].ID] = true
			} else if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Submit: %v", err)
			}
			i++
		}
		res := s.Step(now)
		if res.Duration == 0 && len(res.Preempted) == 0 {
			if i == len(reqs) {
				break
			}
			now = reqs[i].Arrival
			continue
		}
		now = res.End()
		if err := s.kv.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if check != nil {
			check(s)
		}
		if s.growFailures != 0 {
			t.Fatalf("step %d: %d Grow failures", step, s.growFailures)
		}
		if p.KVReserve == profile.ReserveFinal && s.growthPreemptions != 0 {
			t.Fatalf("step %d: %d growth preemptions", step, s.growthPreemptions)
		}
		if !caching && s.kv.CachedPages() != 0 {
			t.Fatalf("step %d: %d pages cached without caching", step, s.kv.CachedPages())
		}
		for _, f := range res.Finished {
			delete(live, f.ID)
		}
	}
	if len(live) != 0 {
		t.Fatalf("%d requests never finished", len(live))
	}
	if s.kv.UsedPages() != 0 || s.kv.FreePages()+s.kv.CachedPages() != s.kv.Total() {
		t.Fatalf("after the run: %d held, %d free + %d cached of %d", s.kv.UsedPages(), s.kv.FreePages(), s.kv.CachedPages(), s.kv.Total())
	}
	return s.Stats(now)
}
