package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"modelplane/sim/profile"
)

// TestSecurityPrefixCacheSaltedByTeam: two teams sending the same prompts
// never share a KV page. With each request's team as its CacheSalt, a run
// behaves exactly as one where the teams' prompts differ (same prefix
// hits, same everything), no page is ever held by two teams' sequences
// at once, and without the salt the same workload does share.
func TestSecurityPrefixCacheSaltedByTeam(t *testing.T) {
	t.Parallel()
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			p, base := randomWorkload(seed, profile.ReserveStep, false)
			r := rand.New(rand.NewPCG(seed, 0x5a17))
			salted := make([]Request, len(base))
			apart := make([]Request, len(base))
			shared := make([]Request, len(base))
			team := map[string]string{}
			for i, q := range base {
				q.PrefixKey, q.PrefixTokens = "", 0
				full := (q.PromptTokens - 1) / p.PageTokens
				c, tm := r.IntN(3), i%2
				team[q.ID] = fmt.Sprintf("team-%d", tm)
				q.PageHashes = chain(c, full)
				shared[i] = q
				q.CacheSalt = team[q.ID]
				salted[i] = q
				q.CacheSalt, q.PageHashes = "", chain(100*tm+c, full)
				apart[i] = q
			}
			holders := func(s *Scheduler) {
				by := map[int32]string{}
				for id, sq := range s.kv.seqs {
					for _, pg := range sq.pages {
						if other, ok := by[pg]; ok && other != team[id] {
							t.Fatalf("page %d held by %s and %s", pg, other, team[id])
						}
						by[pg] = team[id]
					}
				}
			}
			got := runCachingChecked(t, p, salted, seed, true, holders)
			want := runCaching(t, p, apart, seed, true)
			if got.PrefixHits != want.PrefixHits || got.PrefixQueries != want.PrefixQueries {
				t.Errorf("salted by team: %d hits of %d; teams with different prompts: %d of %d; want the same",
					got.PrefixHits, got.PrefixQueries, want.PrefixHits, want.PrefixQueries)
			}
			if open := runCaching(t, p, shared, seed, true); open.PrefixHits <= got.PrefixHits {
				t.Errorf("without a salt %d hits, with %d; want more without (the teams' prompts are the same)", open.PrefixHits, got.PrefixHits)
			}
		})
	}
}
