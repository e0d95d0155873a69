package engine

import "testing"

// A caller that executes steps itself gets each sequence's positions and
// block table, and its tokens and stops are what the scheduler reports.
func TestPlanCommitRunsTheCallersPass(t *testing.T) {
	t.Parallel()
	s, err := NewScheduler(Config{Pages: 8, Reserve: ReserveStep})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.KVPages(); got != 8 {
		t.Fatalf("KVPages = %d; want 8", got)
	}
	if err := s.Submit(Request{ID: "a", PromptTokens: 20, MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	pl := s.Plan(0)
	if len(pl.Work) != 1 {
		t.Fatalf("work = %+v; want one prefill", pl.Work)
	}
	w := pl.Work[0]
	if w.Pos != 0 || w.Tokens != 20 || !w.Emits || w.Index != 0 || len(w.Pages) != 2 {
		t.Fatalf("prefill work = %+v; want positions 0..20 in 2 pages, emitting token 0", w)
	}
	res := s.Commit(pl, 5, []Output{{ID: "a", Token: 7}})
	if len(res.Events) != 1 || res.Events[0].Token != 7 || res.Events[0].Last {
		t.Fatalf("events = %+v; want token 7, not last", res.Events)
	}
	pl = s.Plan(res.End())
	if w := pl.Work[0]; w.Pos != 20 || w.Tokens != 1 || w.Index != 1 {
		t.Fatalf("decode work = %+v; want position 20, token 1", w)
	}
	res = s.Commit(pl, 5, []Output{{ID: "a", Token: 2, Stop: true}})
	if len(res.Finished) != 1 || res.Finished[0].Reason != FinishStop || res.Finished[0].CompletionTokens != 2 {
		t.Fatalf("finished = %+v; want stopped after 2 tokens", res.Finished)
	}
	if s.kv.UsedPages() != 0 {
		t.Fatalf("used pages = %d after the stop; want 0", s.kv.UsedPages())
	}
	if err := s.kv.Check(); err != nil {
		t.Fatal(err)
	}
}

// A sequence cancelled between Plan and Commit frees its pages at once and
// reports no token.
func TestCancelBetweenPlanAndCommit(t *testing.T) {
	t.Parallel()
	s, err := NewScheduler(Config{Pages: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(Request{ID: "a", PromptTokens: 20, MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	pl := s.Plan(0)
	if _, ok := s.Cancel("a"); !ok {
		t.Fatal("cancel found nothing")
	}
	if s.kv.UsedPages() != 0 {
		t.Fatalf("used pages = %d after cancel; want 0", s.kv.UsedPages())
	}
	res := s.Commit(pl, 5, []Output{{ID: "a", Token: 1}})
	if len(res.Events) != 0 {
		t.Fatalf("events = %+v; want none", res.Events)
	}
}
