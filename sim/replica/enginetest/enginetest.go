// Package enginetest checks that an Engine keeps the contract the replica's
// step loop relies on (see replica.Engine), so the adapter of engine.Scheduler
// can prove itself in its own tests:
//
//	func TestSchedulerIsAReplicaEngine(t *testing.T) {
//		enginetest.Check(t, func() replica.Engine { return newAdapter(profile) })
//	}
//
// It drives the engine by hand, without time or HTTP, and imports nothing
// but the standard library and package replica.
package enginetest

import (
	"fmt"
	"testing"

	"modelplane/sim/replica"
)

// maxSteps bounds every run, so an engine that never finishes fails instead
// of hanging the test.
const maxSteps = 100_000

// Check runs the contract's cases, each on a fresh engine from newEngine. The
// engine must hold at least 64 KV pages and admit at least one sequence.
func Check(t *testing.T, newEngine func() replica.Engine) {
	t.Helper()
	t.Run("idle step is empty", func(t *testing.T) {
		e := newEngine()
		res := e.Step()
		if res.Duration != 0 || len(res.Tokens) != 0 {
			t.Errorf("Step() on an empty engine = %v, %d tokens; want 0, 0", res.Duration, len(res.Tokens))
		}
	})
	t.Run("submit only queues", func(t *testing.T) {
		e := newEngine()
		if err := e.Submit(replica.Sequence{ID: "a", PromptTokens: 10, OutputTokens: 3}); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		st := e.Stats()
		if st.Waiting != 1 || st.Running != 0 || st.KVPagesUsed != 0 {
			t.Errorf("Stats() after Submit = %+v; want 1 waiting, 0 running, 0 pages used", st)
		}
		if st.KVPagesTotal < 64 {
			t.Errorf("KVPagesTotal = %d; want at least 64 for these checks", st.KVPagesTotal)
		}
	})
	t.Run("every token once and the last marked", func(t *testing.T) {
		e := newEngine()
		seqs := []replica.Sequence{
			{ID: "one", PromptTokens: 1, OutputTokens: 1},
			{ID: "page", PromptTokens: 16, OutputTokens: 16},
			{ID: "cross", PromptTokens: 15, OutputTokens: 34},
			{ID: "long", PromptTokens: 100, OutputTokens: 200},
			{ID: "tenant-b", Tenant: "b", PromptTokens: 33, OutputTokens: 48},
		}
		for _, s := range seqs {
			if err := e.Submit(s); err != nil {
				t.Fatalf("Submit(%s): %v", s.ID, err)
			}
		}
		got := run(t, e, nil)
		for _, s := range seqs {
			if got.count[s.ID] != s.OutputTokens {
				t.Errorf("%s: %d tokens; want %d", s.ID, got.count[s.ID], s.OutputTokens)
			}
			if !got.last[s.ID] {
				t.Errorf("%s: no token marked Last", s.ID)
			}
			// Admissions are optional; an engine that reports them reports
			// each sequence once, no later than its first token's step.
			if len(got.admitted) > 0 && (got.admitted[s.ID] != 1 || got.admittedAt[s.ID] > got.firstAt[s.ID]) {
				t.Errorf("%s: admitted %d times, at step %d, first token at step %d; want once, no later",
					s.ID, got.admitted[s.ID], got.admittedAt[s.ID], got.firstAt[s.ID])
			}
		}
		if st := e.Stats(); st.Waiting != 0 || st.Running != 0 || st.KVPagesUsed != 0 {
			t.Errorf("Stats() after every sequence finished = %+v; want nothing waiting, running or held", st)
		}
	})
	t.Run("cancel frees pages at once", func(t *testing.T) {
		e := newEngine()
		for i := range 3 {
			if err := e.Submit(replica.Sequence{ID: fmt.Sprint("s", i), PromptTokens: 40, OutputTokens: 1000}); err != nil {
				t.Fatalf("Submit: %v", err)
			}
		}
		for range 5 {
			e.Step()
		}
		if st := e.Stats(); st.KVPagesUsed == 0 {
			t.Fatalf("no pages used after 5 steps: %+v", st)
		}
		for i := range 3 {
			e.Cancel(fmt.Sprint("s", i))
		}
		if st := e.Stats(); st.KVPagesUsed != 0 || st.Running != 0 || st.Waiting != 0 {
			t.Errorf("Stats() after cancelling all = %+v; want nothing held", st)
		}
		if res := e.Step(); len(res.Tokens) != 0 {
			t.Errorf("Step() after cancelling all reported %d tokens; want 0", len(res.Tokens))
		}
	})
	t.Run("no token after cancel", func(t *testing.T) {
		e := newEngine()
		for _, s := range []replica.Sequence{
			{ID: "keep", PromptTokens: 20, OutputTokens: 30},
			{ID: "early", PromptTokens: 20, OutputTokens: 30},
			{ID: "late", PromptTokens: 20, OutputTokens: 30},
		} {
			if err := e.Submit(s); err != nil {
				t.Fatalf("Submit: %v", err)
			}
		}
		e.Cancel("early") // before any step: it was waiting
		steps := 0
		got := run(t, e, func() {
			if steps++; steps == 3 {
				e.Cancel("late") // while running
			}
		})
		if got.count["early"] != 0 {
			t.Errorf("early: %d tokens after a cancel before any step; want 0", got.count["early"])
		}
		if got.count["late"] > 3 || got.last["late"] {
			t.Errorf("late: %d tokens (last %v) with a cancel after step 3; want at most 3, none last", got.count["late"], got.last["late"])
		}
		if got.count["keep"] != 30 {
			t.Errorf("keep: %d tokens; want 30", got.count["keep"])
		}
		e.Cancel("never-submitted")
		e.Cancel("keep") // finished: ignored
		if st := e.Stats(); st.KVPagesUsed != 0 {
			t.Errorf("KVPagesUsed = %d after all ended; want 0", st.KVPagesUsed)
		}
	})
}

type tally struct {
	count map[string]int
	last  map[string]bool
	// admitted counts each sequence's reported admissions; admittedAt and
	// firstAt are the steps (from 1) of its admission and first token.
	admitted            map[string]int
	admittedAt, firstAt map[string]int
}

// run steps until a Step reports nothing, checking each result; after is
// called after every step.
func run(t *testing.T, e replica.Engine, after func()) tally {
	t.Helper()
	got := tally{count: map[string]int{}, last: map[string]bool{}, admitted: map[string]int{},
		admittedAt: map[string]int{}, firstAt: map[string]int{}}
	for step := 1; step <= maxSteps; step++ {
		res := e.Step()
		for _, id := range res.Admitted {
			got.admitted[id]++
			got.admittedAt[id] = step
		}
		if len(res.Tokens) == 0 && res.Duration == 0 {
			return got
		}
		if len(res.Tokens) > 0 && res.Duration <= 0 {
			t.Fatalf("a Step that generated %d tokens took %v; want a positive duration", len(res.Tokens), res.Duration)
		}
		if res.Duration < 0 {
			t.Fatalf("Step duration %v; want >= 0", res.Duration)
		}
		for _, tok := range res.Tokens {
			if got.last[tok.ID] {
				t.Fatalf("%s: a token after its Last one", tok.ID)
			}
			if got.count[tok.ID] == 0 {
				got.firstAt[tok.ID] = step
			}
			got.count[tok.ID]++
			got.last[tok.ID] = tok.Last
		}
		if st := e.Stats(); st.KVPagesUsed > st.KVPagesTotal || st.KVPagesUsed < 0 {
			t.Fatalf("KVPagesUsed = %d of %d", st.KVPagesUsed, st.KVPagesTotal)
		}
		if after != nil {
			after()
		}
	}
	t.Fatalf("not done after %d steps", maxSteps)
	return got
}
