package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"modelplane/sim/profile"
)

func newScheduler(t testing.TB, p profile.Profile, seed uint64) *Scheduler {
	t.Helper()
	s, err := NewScheduler(profileConfig(t, p, seed))
	if err != nil {
		t.Fatalf("NewScheduler: %v", err)
	}
	return s
}

// seedProfile is the demo's v42 (app/demo.go): the seed documents' GPU
// memory figures and step times.
func seedProfile() profile.Profile {
	p, err := profile.Parse([]byte(`{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`))
	if err != nil {
		panic(err)
	}
	return p
}

// smallProfile is the seed profile's costs over a cache of pages pages.
func smallProfile(pages int) profile.Profile {
	p := seedProfile()
	p.UsableGB = float64(pages) * 0.0128
	return p
}

func ms(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Millisecond))) }

// stepAll steps s until it is idle, from time 0, and returns every result.
func stepAll(t *testing.T, s *Scheduler) []StepResult {
	t.Helper()
	var out []StepResult
	var now time.Duration
	for range 1_000_000 {
		res := s.Step(now)
		if res.Duration == 0 && len(res.Preempted) == 0 {
			return out
		}
		out = append(out, res)
		now = res.End()
	}
	t.Fatal("scheduler never went idle")
	return nil
}

func TestStepTimeModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		profile   func(p *profile.Profile)
		reqs      []Request
		wantSteps []time.Duration
		wantTTFT  map[string]time.Duration
	}{
		{
			name:      "prefill then decode",
			reqs:      []Request{{ID: "a", PromptTokens: 100, OutputTokens: 3}},
			wantSteps: []time.Duration{ms(12 + 0.05*100), ms(12 + 0.35), ms(12 + 0.35)},
			wantTTFT:  map[string]time.Duration{"a": ms(17)},
		},
		{
			name: "decode cost grows with the batch",
			reqs: []Request{{ID: "a", PromptTokens: 10, OutputTokens: 3}, {ID: "b", PromptTokens: 20, OutputTokens: 3}},
			// One fused prefill of 30 tokens, then two decoding sequences.
			wantSteps: []time.Duration{ms(12 + 0.05*30), ms(12 + 0.35*2), ms(12 + 0.35*2)},
			wantTTFT:  map[string]time.Duration{"a": ms(13.5), "b": ms(13.5)},
		},
		{
			name:      "a late arrival prefills beside a decoding sequence",
			reqs:      []Request{{ID: "a", PromptTokens: 10, OutputTokens: 3}, {ID: "b", Arrival: ms(1), PromptTokens: 40, OutputTokens: 1}},
			wantSteps: []time.Duration{ms(12 + 0.05*10), ms(12 + 0.35 + 0.05*40), ms(12 + 0.35)},
			// b arrived 1 ms in and waited for the first step to end.
			wantTTFT: map[string]time.Duration{"a": ms(12.5), "b": ms(12.5 + 14.35 - 1)},
		},
		{
			name:      "chunked prefill",
			profile:   func(p *profile.Profile) { p.MaxPrefillTokens = 128 },
			reqs:      []Request{{ID: "a", PromptTokens: 300, OutputTokens: 2}},
			wantSteps: []time.Duration{ms(12 + 0.05*128), ms(12 + 0.05*128), ms(12 + 0.05*44), ms(12 + 0.35)},
			wantTTFT:  map[string]time.Duration{"a": ms(18.4 + 18.4 + 14.2)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := seedProfile()
			if tt.profile != nil {
				tt.profile(&p)
			}
			s := newScheduler(t, p, 1)
			for _, r := range tt.reqs {
				if err := s.Submit(r); err != nil {
					t.Fatal(err)
				}
			}
			var got []time.Duration
			ttft := map[string]time.Duration{}
			for _, res := range stepAll(t, s) {
				got = append(got, res.Duration)
				for _, f := range res.Finished {
					ttft[f.ID] = f.TTFT()
				}
			}
			if !slices.Equal(got, tt.wantSteps) {
				t.Errorf("step durations = %v; want %v", got, tt.wantSteps)
			}
			for id, want := range tt.wantTTFT {
				if ttft[id] != want {
					t.Errorf("TTFT(%s) = %v; want %v (the sum of the steps up to its first token)", id, ttft[id], want)
				}
			}
		})
	}
}

// TestEveryTokenStreamed checks the boundary cases by hand: the first
// token, tokens landing on a page boundary and the last all come out once.
func TestEveryTokenStreamed(t *testing.T) {
	t.Parallel()
	reqs := []Request{
		{ID: "one", PromptTokens: 1, OutputTokens: 1},
		{ID: "page", PromptTokens: 16, OutputTokens: 16},
		{ID: "cross", PromptTokens: 15, OutputTokens: 34},
		{ID: "boundary-prompt", PromptTokens: 32, OutputTokens: 33},
		{ID: "long", PromptTokens: 100, OutputTokens: 200},
	}
	for _, reserve := range []profile.Reserve{profile.ReserveFinal, profile.ReserveMaxTokens, profile.ReserveStep} {
		t.Run(string(reserve), func(t *testing.T) {
			t.Parallel()
			p := smallProfile(30)
			p.KVReserve = reserve
			s := newScheduler(t, p, 1)
			for _, r := range reqs {
				if err := s.Submit(r); err != nil {
					t.Fatal(err)
				}
			}
			next := map[string]int{}
			finished := map[string]Finished{}
			for _, res := range stepAll(t, s) {
				for _, ev := range res.Events {
					if ev.Index != next[ev.ID] {
						t.Fatalf("%s: token index %d; want %d", ev.ID, ev.Index, next[ev.ID])
					}
					next[ev.ID]++
					if _, done := finished[ev.ID]; done {
						t.Fatalf("%s: token after the last", ev.ID)
					}
					if ev.Last {
						finished[ev.ID] = Finished{}
					}
				}
				for _, f := range res.Finished {
					finished[f.ID] = f
				}
			}
			for _, r := range reqs {
				f := finished[r.ID]
				if next[r.ID] != r.OutputTokens || f.CompletionTokens != next[r.ID] || len(f.TokenTimes) != next[r.ID] {
					t.Errorf("%s: streamed %d, usage %d, times %d; want %d each", r.ID, next[r.ID], f.CompletionTokens, len(f.TokenTimes), r.OutputTokens)
				}
			}
			if s.kv.FreePages() != s.kv.Total() {
				t.Errorf("free pages = %d after all finished; want %d", s.kv.FreePages(), s.kv.Total())
			}
		})
	}
}

// randomWorkload draws a small cache and a burst of mixed requests that
// overloads it now and then: tenants, priorities (when asked), shared
// prefixes, max_tokens caps and chunked prefill.
func randomWorkload(seed uint64, reserve profile.Reserve, priorities bool) (profile.Profile, []Request) {
	r := rand.New(rand.NewPCG(seed, 0x5c4ed))
	p := smallProfile(40 + r.IntN(260))
	p.KVReserve = reserve
	p.PageTokens = []int{16, 16, 8}[r.IntN(3)]
	p.MaxBatch = 2 + r.IntN(31)
	p.MaxPrefillTokens = []int{0, 32, 200}[r.IntN(3)]
	share := []float64{1, 0.5, 0.3}[r.IntN(3)]
	p.TenantBatchShare, p.TenantKVShare = share, share
	if r.IntN(3) == 0 {
		p.OutputTokens = &profile.LengthDist{Mean: 80, SD: 60, Max: 300}
	}
	var reqs []Request
	var at time.Duration
	rate := 5 + r.Float64()*40
	for i := range 150 {
		at += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		q := Request{
			ID:           fmt.Sprint("r", i),
			Tenant:       []string{"a", "b", "c"}[r.IntN(3)],
			Arrival:      at,
			PromptTokens: 1 + r.IntN(400),
		}
		switch r.IntN(3) {
		case 0:
			q.OutputTokens = 1 + r.IntN(300)
		case 1:
			q.MaxTokens = 1 + r.IntN(300)
		default:
			q.OutputTokens, q.MaxTokens = 1+r.IntN(300), 1+r.IntN(300)
		}
		if r.IntN(3) == 0 {
			q.PrefixKey, q.PrefixTokens = "sys", 48
		}
		if priorities {
			q.Priority = r.IntN(3)
		}
		reqs = append(reqs, q)
	}
	return p, reqs
}

// TestAdmissionNeverStarvesGrowth drives random workloads step by step and
// checks after every step: the cache's invariants hold; no Grow failed;
// under the "final" and "max_tokens" policies the free pages cover every
// running sequence's reserved growth and nothing was preempted for memory;
// a preemption happened only in a step that admitted a request of higher
// priority than the victim (never without priorities); batch and tenant
// caps held; and every token was streamed once, in order.
func TestAdmissionNeverStarvesGrowth(t *testing.T) {
	t.Parallel()
	for _, reserve := range []profile.Reserve{profile.ReserveFinal, profile.ReserveMaxTokens, profile.ReserveStep} {
		for _, priorities := range []bool{false, true} {
			for seed := range uint64(20) {
				name := fmt.Sprintf("%s/priorities=%v/seed%d", reserve, priorities, seed)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					p, reqs := randomWorkload(seed, reserve, priorities)
					checkRun(t, p, reqs, seed)
				})
			}
		}
	}
}

func checkRun(t *testing.T, p profile.Profile, reqs []Request, seed uint64) {
	t.Helper()
	s := newScheduler(t, p, seed)
	next := map[string]int{}
	first, last := map[string]time.Duration{}, map[string]time.Duration{}
	submitted := map[string]bool{}
	var now time.Duration
	i := 0
	// Made once and cleared each step: clear keeps a map's tables, so the
	// per-step bookkeeping does not allocate and rehash them again.
	waitingPrio := map[string]int{}
	finishedNow := map[string]bool{}
	for step := 0; ; step++ {
		if step > 1_000_000 {
			t.Fatal("no end in sight")
		}
		for i < len(reqs) && reqs[i].Arrival <= now {
			if err := s.Submit(reqs[i]); err == nil {
				submitted[reqs[i].ID] = true
			} else if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Submit(%+v): %v", reqs[i], err)
			}
			i++
		}
		clear(waitingPrio)
		for _, q := range s.waiting {
			waitingPrio[q.req.ID] = q.req.Priority
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
		if s.growFailures != 0 {
			t.Fatalf("step %d: %d Grow failures", step, s.growFailures)
		}
		if p.KVReserve != profile.ReserveStep {
			if free, reserved := s.kv.FreePages(), s.reserved(); free < reserved {
				t.Fatalf("step %d: %d free pages do not cover %d reserved for growth", step, free, reserved)
			}
			if s.growthPreemptions != 0 {
				t.Fatalf("step %d: %d growth preemptions under %q", step, s.growthPreemptions, p.KVReserve)
			}
		}
		// Who was admitted this step: waiting before, running or done now.
		admittedPrio := -1
		clear(finishedNow)
		for _, f := range res.Finished {
			finishedNow[f.ID] = true
		}
		for id, prio := range waitingPrio {
			if q := s.live[id]; (q != nil && q.running) || finishedNow[id] {
				admittedPrio = max(admittedPrio, prio)
			}
		}
		growth := p.KVReserve == profile.ReserveStep
		for _, id := range res.Preempted {
			q := s.live[id]
			if !growth && q.req.Priority >= admittedPrio {
				t.Fatalf("step %d: %s (priority %d) preempted; highest admitted priority %d", step, id, q.req.Priority, admittedPrio)
			}
		}
		if res.Batch > p.MaxBatch {
			t.Fatalf("step %d: batch %d over max_batch %d", step, res.Batch, p.MaxBatch)
		}
		for name, use := range s.tenants {
			if use.running > s.tenantSlots {
				t.Fatalf("step %d: tenant %q runs %d; cap %d", step, name, use.running, s.tenantSlots)
			}
			if !growth && use.pages > s.tenantPages {
				t.Fatalf("step %d: tenant %q holds %d pages; cap %d", step, name, use.pages, s.tenantPages)
			}
		}
		reserve := 0
		byPriority := map[int]int{}
		for _, c := range s.priorities {
			byPriority[c.priority] = c.running
		}
		for _, q := range s.running {
			byPriority[q.req.Priority]--
			if s.kv.Pages(q.req.ID) != len(q.kv.pages) || s.kv.Tokens(q.req.ID) != q.kv.tokens {
				t.Fatalf("step %d: %s holds %d pages, %d tokens; the cache says %d, %d",
					step, q.req.ID, len(q.kv.pages), q.kv.tokens, s.kv.Pages(q.req.ID), s.kv.Tokens(q.req.ID))
			}
			reserve += q.commit - len(q.kv.pages)
		}
		if s.reserve != reserve {
			t.Fatalf("step %d: %d pages reserved as kept; %d counted", step, s.reserve, reserve)
		}
		for prio, n := range byPriority {
			if n != 0 {
				t.Fatalf("step %d: running sequences of priority %d counted %+d off (%+v)", step, prio, n, s.priorities)
			}
		}
		for _, ev := range res.Events {
			if ev.Index != next[ev.ID] {
				t.Fatalf("step %d: %s token %d; want %d", step, ev.ID, ev.Index, next[ev.ID])
			}
			next[ev.ID]++
			if ev.Index == 0 {
				first[ev.ID] = ev.Time
			}
			last[ev.ID] = ev.Time
		}
		for _, f := range res.Finished {
			if f.CompletionTokens != next[f.ID] {
				t.Fatalf("%s: usage says %d completion tokens; %d streamed", f.ID, f.CompletionTokens, next[f.ID])
			}
			if f.FirstToken != first[f.ID] || f.LastToken != last[f.ID] {
				t.Fatalf("%s: first and last token at %v, %v; streamed at %v, %v", f.ID, f.FirstToken, f.LastToken, first[f.ID], last[f.ID])
			}
			delete(submitted, f.ID)
		}
	}
	if len(submitted) != 0 {
		t.Fatalf("%d requests never finished", len(submitted))
	}
	if !slices.ContainsFunc(reqs, func(r Request) bool { return r.Priority > 0 }) {
		if st := s.Stats(now); st.PriorityPreemptions != 0 {
			t.Fatalf("%d preemptions without priorities", st.PriorityPreemptions)
		}
	}
	if s.kv.FreePages() != s.kv.Total() || len(s.tenants) != 0 {
		t.Fatalf("after the run: %d of %d pages free, %d tenants charged", s.kv.FreePages(), s.kv.Total(), len(s.tenants))
	}
}

func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	p := smallProfile(20) // 20 pages of 16 tokens: 320 tokens
	p.MaxModelLen = 300
	p.TenantKVShare = 0.5
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"no id", Request{PromptTokens: 1}, ErrInvalidRequest},
		{"empty prompt", Request{ID: "x"}, ErrInvalidRequest},
		{"negative max tokens", Request{ID: "x", PromptTokens: 1, MaxTokens: -1}, ErrInvalidRequest},
		{"negative arrival", Request{ID: "x", PromptTokens: 1, Arrival: -1}, ErrInvalidRequest},
		{"duplicate", Request{ID: "dup", PromptTokens: 1}, ErrDuplicateID},
		{"prompt fills the window", Request{ID: "x", PromptTokens: 300}, ErrTooLarge},
		{"over the tenant's pages", Request{ID: "x", PromptTokens: 100, OutputTokens: 100}, ErrTooLarge},
		{"fits", Request{ID: "x", PromptTokens: 100, OutputTokens: 60}, nil},
	}
	s := newScheduler(t, p, 1)
	if err := s.Submit(Request{ID: "dup", PromptTokens: 1, OutputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		err := s.Submit(tt.req)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Submit = %v; want %v", tt.name, err, tt.want)
		}
	}
}

func TestCompletionLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		profile    func(*profile.Profile)
		req        Request
		wantTokens int
		wantReason FinishReason
	}{
		{"model stops first", nil, Request{PromptTokens: 10, OutputTokens: 10, MaxTokens: 20}, 10, FinishStop},
		{"max_tokens cuts", nil, Request{PromptTokens: 10, OutputTokens: 10, MaxTokens: 5}, 5, FinishLength},
		{"max_tokens only", nil, Request{PromptTokens: 10, MaxTokens: 7}, 7, FinishLength},
		{"context window", func(p *profile.Profile) { p.MaxModelLen = 100 }, Request{PromptTokens: 90}, 10, FinishLength},
		{"nothing says", nil, Request{PromptTokens: 10}, DefaultMaxTokens, FinishLength},
		{"profile draws", func(p *profile.Profile) { p.OutputTokens = &profile.LengthDist{Mean: 42} }, Request{PromptTokens: 10, MaxTokens: 100}, 42, FinishStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := seedProfile()
			if tt.profile != nil {
				tt.profile(&p)
			}
			s := newScheduler(t, p, 1)
			tt.req.ID = "x"
			if err := s.Submit(tt.req); err != nil {
				t.Fatal(err)
			}
			var got []Finished
			for _, res := range stepAll(t, s) {
				got = append(got, res.Finished...)
			}
			if len(got) != 1 || got[0].CompletionTokens != tt.wantTokens || got[0].Reason != tt.wantReason {
				t.Fatalf("finished %+v; want %d tokens, reason %q", got, tt.wantTokens, tt.wantReason)
			}
		})
	}
}

// TestArrivalTimes: a step does not admit a request before it arrives; an
// idle scheduler starts at the first arrival, so TTFT counts from it.
func TestArrivalTimes(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, seedProfile(), 1)
	for _, r := range []Request{
		{ID: "early", Arrival: time.Second, PromptTokens: 10, OutputTokens: 2},
		{ID: "late", Arrival: time.Second + ms(5), PromptTokens: 10, OutputTokens: 1},
	} {
		if err := s.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	res := s.Step(0)
	if res.Start != time.Second || res.Admitted != 1 || res.Events[0].ID != "early" || res.Events[0].Time != time.Second+res.Duration {
		t.Fatalf("first step = %+v; want only early, from 1s", res)
	}
	res = s.Step(0)
	if res.Start != time.Second+ms(12.5) || len(res.Finished) != 2 {
		t.Fatalf("second step = %+v; want it back to back, finishing both", res)
	}
	for _, f := range res.Finished {
		if f.ID == "late" && f.TTFT() != res.End()-f.Arrival {
			t.Errorf("late TTFT = %v; want %v", f.TTFT(), res.End()-f.Arrival)
		}
	}
}

// TestCancelPreempted cancels a sequence that decoded, was preempted by a
// higher priority and waits: its usage keeps the time of its last token,
// not the time it was cancelled or preempted.
func TestCancelPreempted(t *testing.T) {
	t.Parallel()
	p := smallProfile(20)
	p.MaxBatch = 1
	s := newScheduler(t, p, 1)
	if err := s.Submit(Request{ID: "low", PromptTokens: 40, OutputTokens: 60}); err != nil {
		t.Fatal(err)
	}
	var now, lastLow time.Duration
	for range 3 {
		res := s.Step(now)
		for _, ev := range res.Events {
			lastLow = ev.Time
		}
		now = res.End()
	}
	if err := s.Submit(Request{ID: "high", PromptTokens: 40, OutputTokens: 60, Priority: 1, Arrival: now}); err != nil {
		t.Fatal(err)
	}
	res := s.Step(now)
	if !slices.Contains(res.Preempted, "low") {
		t.Fatalf("step preempted %v; want low", res.Preempted)
	}
	now = res.End()
	f, ok := s.Cancel("low")
	if !ok || f.CompletionTokens != 3 || f.FirstToken == 0 || f.LastToken != lastLow || now == lastLow {
		t.Fatalf("Cancel(low) = %+v, %v; want 3 tokens, the last at %v", f, ok, lastLow)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	p := smallProfile(20)
	p.MaxBatch = 2
	s := newScheduler(t, p, 1)
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Submit(Request{ID: id, PromptTokens: 40, OutputTokens: 60}); err != nil {
			t.Fatal(err)
		}
	}
	var now time.Duration
	for range 3 {
		now = s.Step(now).End()
	}
	if st := s.Stats(now); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("Stats = %+v; want a, b running and c waiting", st)
	}
	before := s.kv.FreePages()
	held := s.kv.Pages("a")
	f, ok := s.Cancel("a")
	if !ok || f.Reason != FinishCancelled || f.CompletionTokens != 3 || f.LastToken != now {
		t.Fatalf("Cancel(a) = %+v, %v; want cancelled after 3 tokens, the last at %v", f, ok, now)
	}
	if got := s.kv.FreePages() - before; got != held {
		t.Errorf("Cancel(a) freed %d pages at once; want %d", got, held)
	}
	if _, ok := s.Cancel("c"); !ok {
		t.Error("Cancel(c) while waiting = false; want true")
	}
	if _, ok := s.Cancel("a"); ok {
		t.Error("Cancel(a) twice = true; want false")
	}
	for _, res := range stepAll(t, s) {
		for _, ev := range res.Events {
			if ev.ID != "b" {
				t.Fatalf("token for %s after it was cancelled", ev.ID)
			}
		}
	}
	if s.kv.FreePages() != s.kv.Total() {
		t.Errorf("free pages = %d at the end; want %d", s.kv.FreePages(), s.kv.Total())
	}
	// The id may be used again once gone.
	if err := s.Submit(Request{ID: "a", PromptTokens: 1, OutputTokens: 1}); err != nil {
		t.Errorf("Submit(a) again: %v", err)
	}
}

// TestPriorityPreemption fills the cache with low-priority work, then sends
// a request that does not fit: of higher priority it evicts the most
// recently admitted low-priority sequence, which later re-prefills and
// finishes with every token streamed once; of equal priority it waits.
func TestPriorityPreemption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		priority      int
		wantPreempted []string
	}{
		{"higher priority evicts", 1, []string{"low2"}},
		{"equal priority waits", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newScheduler(t, smallProfile(10), 1)
			// Each needs 4 pages (48 + 16 tokens); 10 pages hold two.
			for _, id := range []string{"low1", "low2"} {
				if err := s.Submit(Request{ID: id, PromptTokens: 48, OutputTokens: 16}); err != nil {
					t.Fatal(err)
				}
			}
			first := s.Step(0)
			if err := s.Submit(Request{ID: "high", Priority: tt.priority, Arrival: first.End(), PromptTokens: 48, OutputTokens: 16}); err != nil {
				t.Fatal(err)
			}
			var preempted, admitted []string
			next := map[string]int{}
			var low2 Finished
			for _, res := range append([]StepResult{first}, stepAll(t, s)...) {
				preempted = append(preempted, res.Preempted...)
				admitted = append(admitted, res.FirstAdmitted...)
				for _, ev := range res.Events {
					if ev.Index != next[ev.ID] {
						t.Fatalf("%s: token %d; want %d", ev.ID, ev.Index, next[ev.ID])
					}
					next[ev.ID]++
				}
				for _, f := range res.Finished {
					if f.ID == "low2" {
						low2 = f
					}
				}
			}
			if !slices.Equal(preempted, tt.wantPreempted) {
				t.Errorf("preempted %v; want %v", preempted, tt.wantPreempted)
			}
			// A re-admission after a preemption is not a first one.
			if !slices.Equal(admitted, []string{"low1", "low2", "high"}) {
				t.Errorf("first admitted %v; want low1, low2, high, once each", admitted)
			}
			if low2.CompletionTokens != 16 || next["low2"] != 16 {
				t.Errorf("low2 finished with %d tokens, %d streamed; want 16", low2.CompletionTokens, next["low2"])
			}
			if tt.wantPreempted != nil && (low2.Preemptions != 1 || low2.PrefillTokens != 48+48+1) {
				t.Errorf("low2: %d preemptions, %d tokens prefilled; want 1 and %d (prompt, then prompt and its first token again)",
					low2.Preemptions, low2.PrefillTokens, 48+48+1)
			}
		})
	}
}

// A lean scheduler, whose results a caller reads and drops, lists no
// first admissions.
func TestLeanListsNoFirstAdmission(t *testing.T) {
	t.Parallel()
	cfg := profileConfig(t, smallProfile(10), 1)
	cfg.Lean = true
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(Request{ID: "a", PromptTokens: 48, OutputTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if res := s.Step(0); res.Admitted != 1 || res.FirstAdmitted != nil {
		t.Errorf("admitted %d, first admitted %v; want 1 and none listed", res.Admitted, res.FirstAdmitted)
	}
}

// TestTenantCapRotates: a tenant at its batch-slot cap waits at the back
// while another tenant's later request goes ahead, and nobody is evicted.
func TestTenantCapRotates(t *testing.T) {
	t.Parallel()
	p := seedProfile()
	p.MaxBatch, p.TenantBatchShare = 4, 0.5 // two slots a tenant
	s := newScheduler(t, p, 1)
	for _, r := range []Request{
		{ID: "a1", Tenant: "a", PromptTokens: 10, OutputTokens: 50},
		{ID: "a2", Tenant: "a", PromptTokens: 10, OutputTokens: 50},
		{ID: "a3", Tenant: "a", PromptTokens: 10, OutputTokens: 50},
		{ID: "b1", Tenant: "b", PromptTokens: 10, OutputTokens: 50},
	} {
		if err := s.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	res := s.Step(0)
	var running []string
	for _, q := range s.running {
		running = append(running, q.req.ID)
	}
	if want := []string{"a1", "a2", "b1"}; !slices.Equal(running, want) || len(res.Preempted) != 0 {
		t.Errorf("running %v, preempted %v; want %v and none", running, res.Preempted, want)
	}
	if err := s.Submit(Request{ID: "b2", Tenant: "b", Arrival: res.End(), PromptTokens: 10, OutputTokens: 50}); err != nil {
		t.Fatal(err)
	}
	if got := s.waiting[0].req.ID; got != "a3" {
		t.Fatalf("head of queue %s; want a3", got)
	}
	res = s.Step(res.End())
	if res.Admitted != 1 || s.running[len(s.running)-1].req.ID != "b2" || len(res.Preempted) != 0 {
		t.Errorf("second step admitted %d, last running %s, preempted %v; want b2 admitted past a3, nobody evicted",
			res.Admitted, s.running[len(s.running)-1].req.ID, res.Preempted)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	s := newScheduler(t, seedProfile(), 1)
	for i := range 10 {
		if err := s.Submit(Request{ID: fmt.Sprint(i), PromptTokens: 100, OutputTokens: 20}); err != nil {
			t.Fatal(err)
		}
	}
	res := s.Step(0)
	st := s.Stats(res.End())
	if st.Running != 10 || st.Waiting != 0 || st.KVPagesTotal != 1015 || st.KVPagesUsed != 10*7 {
		t.Errorf("Stats after one step = %+v; want 10 running, 70 of 1015 pages", st)
	}
	if want := 10 * 8; st.KVPagesReserved != want-st.KVPagesUsed {
		t.Errorf("KVPagesReserved = %d; want %d (each will hold 8 pages)", st.KVPagesReserved, want-st.KVPagesUsed)
	}
	var now time.Duration
	for _, r := range stepAll(t, s) {
		now = r.End()
	}
	st = s.Stats(now)
	if st.Completed != 10 || st.TTFT.N != 10 || st.TTFT.P50 != res.Duration || st.TPOT.P50 != ms(12+0.35*10) {
		t.Errorf("Stats at the end = %+v; want 10 completed, TTFT %v, TPOT %v", st, res.Duration, ms(15.5))
	}
	if want := 200 / now.Seconds(); st.TokensPerSecond < want*0.999 || st.TokensPerSecond > want*1.001 {
		t.Errorf("TokensPerSecond = %.1f; want %.1f", st.TokensPerSecond, want)
	}
}
