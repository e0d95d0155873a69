package replica

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// testEngine is a small deterministic continuous-batching engine, the test
// double of engine.Scheduler: 16-token pages, admission only when the prompt's
// pages are free after one growth page per running sequence, a batch cap,
// prefill and decode costs like a sim profile's. It is safe for the tests to
// inspect while the replica's loop drives it.
type testEngine struct {
	mu sync.Mutex

	totalPages      int
	maxBatch        int
	prefillPerToken time.Duration
	decodeBase      time.Duration
	decodePerSeq    time.Duration

	waiting   []*testSeq
	running   []*testSeq
	used      int
	submitted []string
	tenants   []string // each submitted sequence's tenant
	cancelled []string
	steps     int
	// pause, when set, is received from before every Step after the
	// first that ran a sequence: a test holds the engine mid-generation
	// until it closes pause.
	pause chan struct{}
}

type testSeq struct {
	seq       Sequence
	generated int
	pages     int
}

const testPageTokens = 16

func newTestEngine() *testEngine {
	return &testEngine{
		totalPages:      256,
		maxBatch:        16,
		prefillPerToken: 10 * time.Microsecond,
		decodeBase:      time.Millisecond,
		decodePerSeq:    50 * time.Microsecond,
	}
}

func pagesFor(tokens int) int { return (tokens + testPageTokens - 1) / testPageTokens }

func (e *testEngine) Submit(seq Sequence) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if need := pagesFor(seq.PromptTokens + 1); need > e.totalPages {
		return fmt.Errorf("prompt of %d tokens needs %d pages, the cache has %d", seq.PromptTokens, need, e.totalPages)
	}
	e.submitted = append(e.submitted, seq.ID)
	e.tenants = append(e.tenants, seq.Tenant)
	e.waiting = append(e.waiting, &testSeq{seq: seq})
	return nil
}

func (e *testEngine) Step() StepResult {
	e.mu.Lock()
	if e.pause != nil && e.steps > 0 {
		e.mu.Unlock()
		<-e.pause
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	var res StepResult
	// Admit while the prompt's pages fit after reserving one growth page
	// per running sequence.
	for len(e.waiting) > 0 && len(e.running) < e.maxBatch {
		s := e.waiting[0]
		ctxTokens := s.seq.PromptTokens + s.generated
		need := pagesFor(ctxTokens)
		if e.totalPages-e.used-len(e.running) < need {
			break
		}
		e.waiting = e.waiting[1:]
		s.pages = need
		e.used += need
		e.running = append(e.running, s)
		res.Admitted = append(res.Admitted, s.seq.ID)
		res.Duration += time.Duration(ctxTokens) * e.prefillPerToken
	}
	if len(e.running) == 0 {
		return res
	}
	e.steps++
	res.Duration += e.decodeBase + time.Duration(len(e.running))*e.decodePerSeq
	kept := e.running[:0]
	for _, s := range e.running {
		s.generated++
		last := s.generated == s.seq.OutputTokens
		res.Tokens = append(res.Tokens, Token{ID: s.seq.ID, Last: last})
		if last {
			e.used -= s.pages
			s.pages = 0
			continue
		}
		if need := pagesFor(s.seq.PromptTokens + s.generated + 1); need > s.pages {
			s.pages++
			e.used++
		}
		kept = append(kept, s)
	}
	e.running = kept
	return res
}

func (e *testEngine) Cancel(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelled = append(e.cancelled, id)
	drop := func(list []*testSeq) []*testSeq {
		return slices.DeleteFunc(list, func(s *testSeq) bool {
			if s.seq.ID != id {
				return false
			}
			e.used -= s.pages
			s.pages = 0
			return true
		})
	}
	e.waiting = drop(e.waiting)
	e.running = drop(e.running)
}

func (e *testEngine) Stats() EngineStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return EngineStats{Waiting: len(e.waiting), Running: len(e.running), KVPagesUsed: e.used, KVPagesTotal: e.totalPages}
}

// sawCancel reports whether Cancel was called for id, and the pages in use.
func (e *testEngine) sawCancel(id string) (bool, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.cancelled, id), e.used
}

func (e *testEngine) submittedIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.submitted)
}
