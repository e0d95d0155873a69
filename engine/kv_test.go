package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKVProperties runs random operation sequences against the cache and a
// model of it, checking the invariants after every operation: no page owned
// twice except shared prefix pages (counted by their owners), free + owned
// distinct = total, a freed sequence owns nothing, owner counts consistent,
// every sequence holding ceil(tokens/pageTokens) pages, and a refused
// operation changing nothing.
func TestKVProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 0x6b76))
			pageTokens := []int{1, 4, 16, 16, 16, 32}[r.IntN(6)]
			k := NewKV(8+r.IntN(120), pageTokens)
			prefixLen := map[string]int{"": 0, "sys-a": 64, "sys-b": 40, "sys-c": 3 * pageTokens}
			keys := []string{"", "", "sys-a", "sys-b", "sys-c"}
			live := map[string]int{} // id -> tokens
			var ids []string
			freed := map[string]bool{}
			next := 0
			for op := range 400 {
				before := k.FreePages()
				switch c := r.IntN(10); {
				case c < 4 || len(ids) == 0:
					id := fmt.Sprint("s", next)
					next++
					tokens := 1 + r.IntN(200)
					key := keys[r.IntN(len(keys))]
					plen := prefixLen[key]
					if r.IntN(5) == 0 {
						plen = r.IntN(100) // a request that disagrees on the length
					}
					wantShared := k.SharedPages(key, plen, tokens)
					shared, err := k.Allocate(id, tokens, key, plen)
					if errors.Is(err, ErrOutOfPages) {
						if k.FreePages() != before || k.Holds(id) {
							t.Fatalf("op %d: refused Allocate changed the cache", op)
						}
						if need := k.PagesFor(tokens) - wantShared; need <= before {
							t.Fatalf("op %d: Allocate of %d pages refused with %d free", op, need, before)
						}
						break
					}
					if err != nil {
						t.Fatalf("op %d: Allocate: %v", op, err)
					}
					if shared != wantShared {
						t.Fatalf("op %d: Allocate shared %d pages; SharedPages said %d", op, shared, wantShared)
					}
					if got, want := before-k.FreePages(), k.PagesFor(tokens)-shared; got != want {
						t.Fatalf("op %d: Allocate took %d free pages; want %d", op, got, want)
					}
					live[id] = tokens
					ids = append(ids, id)
					if r.IntN(2) == 0 {
						k.MarkComputed(id, tokens)
					}
				case c < 7:
					id := ids[r.IntN(len(ids))]
					n := 1 + r.IntN(40)
					err := k.Grow(id, n)
					if errors.Is(err, ErrOutOfPages) {
						if k.FreePages() != before || k.Tokens(id) != live[id] {
							t.Fatalf("op %d: refused Grow changed the cache", op)
						}
						break
					}
					if err != nil {
						t.Fatalf("op %d: Grow: %v", op, err)
					}
					live[id] += n
				default:
					i := r.IntN(len(ids))
					id := ids[i]
					ids = append(ids[:i], ids[i+1:]...)
					held := k.exclusivePages(id)
					var got int
					if c < 9 {
						got = k.Free(id)
					} else {
						if tokens := k.Preempt(id); tokens != live[id] {
							t.Fatalf("op %d: Preempt returned %d tokens; want %d", op, tokens, live[id])
						}
						got = k.FreePages() - before
					}
					if got != held || k.FreePages()-before != held {
						t.Fatalf("op %d: freeing returned %d pages, free grew by %d; the sequence held %d alone", op, got, k.FreePages()-before, held)
					}
					delete(live, id)
					freed[id] = true
				}
				if err := k.Check(); err != nil {
					t.Fatalf("op %d: %v", op, err)
				}
				owned := map[int32]bool{}
				for id, tokens := range live {
					if got, want := k.Pages(id), k.PagesFor(tokens); got != want {
						t.Fatalf("op %d: %s holds %d pages for %d tokens; want %d", op, id, got, tokens, want)
					}
					for _, pg := range k.seqs[id].pages {
						owned[pg] = true
					}
				}
				for id := range freed {
					if k.Holds(id) || k.Pages(id) != 0 {
						t.Fatalf("op %d: freed %s still holds pages", op, id)
					}
				}
				if k.FreePages()+len(owned) != k.Total() {
					t.Fatalf("op %d: free %d + owned %d != total %d", op, k.FreePages(), len(owned), k.Total())
				}
			}
		})
	}
}

func TestKVPrefixSharing(t *testing.T) {
	t.Parallel()
	k := NewKV(100, 16)
	// a: 100 tokens of which the first 70 are the prefix: 4 full pages.
	if shared, err := k.Allocate("a", 100, "sys", 70); err != nil || shared != 0 {
		t.Fatalf("Allocate(a) = %d, %v; want 0 shared (nobody holds the prefix)", shared, err)
	}
	// Not computed yet: b cannot share and takes its own pages.
	if shared, err := k.Allocate("b", 80, "sys", 70); err != nil || shared != 0 {
		t.Fatalf("Allocate(b) before a is computed = %d, %v; want 0 shared", shared, err)
	}
	k.MarkComputed("a", 100)
	used := k.UsedPages()
	shared, err := k.Allocate("c", 90, "sys", 70)
	if err != nil || shared != 4 {
		t.Fatalf("Allocate(c) = %d, %v; want 4 shared pages", shared, err)
	}
	if got, want := k.UsedPages()-used, k.PagesFor(90)-4; got != want {
		t.Errorf("c took %d new pages; want %d", got, want)
	}
	// A shorter prefix shares only its own full pages.
	if shared, _ := k.Allocate("d", 40, "sys", 40); shared != 2 {
		t.Errorf("Allocate(d, prefix 40) shared %d; want 2", shared)
	}
	// Freeing the creator keeps the pages c and d still hold.
	if n := k.Free("a"); n != k.PagesFor(100)-4 {
		t.Errorf("Free(a) returned %d pages; want %d (the 4 prefix pages stay with c)", n, k.PagesFor(100)-4)
	}
	if got := k.SharedPages("sys", 70, 100); got != 4 {
		t.Errorf("SharedPages after a left = %d; want 4", got)
	}
	k.Free("c")
	if got := k.SharedPages("sys", 70, 100); got != 2 {
		t.Errorf("SharedPages after c left = %d; want 2 (d holds two)", got)
	}
	k.Free("d")
	k.Free("b")
	if got := k.SharedPages("sys", 70, 100); got != 0 {
		t.Errorf("SharedPages after all left = %d; want 0", got)
	}
	if k.FreePages() != k.Total() {
		t.Errorf("FreePages = %d after every sequence left; want %d", k.FreePages(), k.Total())
	}
	if err := k.Check(); err != nil {
		t.Error(err)
	}
}

func TestKVGrowAndFree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		tokens     int
		grow       []int
		wantPages  int
		wantFreeOK bool
	}{
		{"exact page", 16, nil, 1, true},
		{"one over", 16, []int{1}, 2, true},
		{"token by token to a boundary", 15, []int{1, 1}, 2, true},
		{"empty", 0, []int{32}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := NewKV(4, 16)
			if _, err := k.Allocate("x", tt.tokens, "", 0); err != nil {
				t.Fatal(err)
			}
			for _, n := range tt.grow {
				if err := k.Grow("x", n); err != nil {
					t.Fatal(err)
				}
			}
			if got := k.Pages("x"); got != tt.wantPages {
				t.Errorf("Pages = %d; want %d", got, tt.wantPages)
			}
			if got := k.Free("x"); got != tt.wantPages {
				t.Errorf("Free returned %d; want %d", got, tt.wantPages)
			}
		})
	}
	k := NewKV(2, 16)
	if _, err := k.Allocate("x", 32, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Grow("x", 1); !errors.Is(err, ErrOutOfPages) {
		t.Errorf("Grow past the cache = %v; want ErrOutOfPages", err)
	}
	if err := k.Grow("nobody", 1); !errors.Is(err, ErrUnknownSequence) {
		t.Errorf("Grow(unknown) = %v; want ErrUnknownSequence", err)
	}
}
