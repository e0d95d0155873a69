package llmserve

import (
	"cmp"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/coder/quartz"

	"modelplane/engine"
)

// PageTokens is the size of a KV page in tokens.
const PageTokens = 16

// Model is what the engine runs: one forward pass over a batch of
// sequences whose K/V live in the engine's pages. Package llm's model,
// with its KV store, is adapted to it (see Load).
type Model interface {
	// Forward computes each Step's tokens at their positions into the
	// pages of its block table and returns the logits of its last token.
	Forward(batch []Step) [][]float32
	// Vocab is the logits' width; Context the context window in tokens;
	// EOS the end-of-sequence token ids.
	Vocab() int
	Context() int
	EOS() []int
	// Pages is the size of the KV store in pages.
	Pages() int
}

// Step is one sequence's share of a forward pass.
type Step struct {
	Tokens []int
	Pos    int
	Pages  []int32
}

// Sampling are a request's sampling settings.
type Sampling struct {
	// Temperature 0 is greedy decoding; Seed, when set, makes a sampled
	// completion reproducible.
	Temperature float64
	TopP        float64
	Seed        *int64
}

// Request is one generation request.
type Request struct {
	// Tenant is the fairness key and the prefix cache's salt: the calling
	// team. Requests share cached prompt pages only within a tenant.
	Tenant    string
	Prompt    []int
	MaxTokens int
	Sampling  Sampling
	// IgnoreEOS generates past the model's end of sequence, to MaxTokens
	// or a stop (as vLLM's ignore_eos; benchmarks use it).
	IgnoreEOS bool
	// Stop decides, given the completion's tokens so far, whether the
	// last one ends it (a stop string); nil: only EOS and MaxTokens stop.
	Stop func(completion []int) bool
}

// Event is one token of a generation, or its end.
type Event struct {
	Token int
	// Done marks the last event; Reason is then "stop", "length" or
	// "cancelled", and Err is set when the engine refused or dropped it.
	Done   bool
	Reason string
	Err    error
	// At is when the token existed (the end of the step that made it),
	// on the engine's clock (Engine.Wall turns it into a time); 0 on the
	// last event. The first token also says when the engine took the
	// request in (Arrival) and first scheduled it (Admitted): a trace's
	// queue wait and prefill.
	At, Arrival, Admitted time.Duration
}

// Errors of Submit.
var (
	ErrTooLong = errors.New("prompt too long")
	ErrStopped = errors.New("engine is stopped")
	// ErrQueueFull refuses a request while Config.MaxWaiting requests
	// wait for a batch slot; the server answers it with 429.
	ErrQueueFull = errors.New("waiting queue is full")
)

// Config sizes an engine.
type Config struct {
	// Pages is the KV cache size (0: all the model's KV store); MaxBatch
	// the sequences in one step (default 16).
	Pages    int
	MaxBatch int
	// MaxWaiting bounds the waiting queue (admitted requests not yet in
	// the batch, preempted ones included): Submit refuses a request with
	// ErrQueueFull while that many wait. 0: no bound.
	MaxWaiting int
	// NoPrefixCaching turns automatic prefix caching off. On (the
	// default), every prompt's full pages are named by a hash chain of
	// their tokens and, once computed, kept after their request ends,
	// cached for any later prompt that starts with the same tokens until
	// pages are needed (least recently released evicted first, before
	// anything is preempted).
	NoPrefixCaching bool
	// TenantBatchShare and TenantKVShare are the per-tenant caps, as in
	// profile.Profile (0: no cap).
	TenantBatchShare float64
	TenantKVShare    float64
	// MaxPrefillTokens caps the prompt tokens computed in one step.
	MaxPrefillTokens int
	// Clock is the engine's clock; quartz.NewReal() when nil.
	Clock quartz.Clock
	// OnStep, when set, is told each forward pass's batch before it runs,
	// from the loop goroutine (for tests and tracing).
	OnStep func(work []engine.Work)
}

// Engine runs requests on a Model. Submit and Cancel may be called from
// any goroutine; one loop goroutine owns the scheduler's steps.
type Engine struct {
	m          Model
	sched      *engine.Scheduler
	clock      quartz.Clock
	t0         time.Time
	onStep     func(work []engine.Work)
	maxWaiting int
	caching    bool
	salt       [8]byte // seeds the page hash chains, so nobody outside can aim at a hash

	mu      sync.Mutex
	ops     []op
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	stopped bool
	nextID  uint64

	// Owned by the loop.
	live map[string]*gen

	stats counters
}

type op struct {
	submit *gen
	cancel string
}

// gen is one request inside the engine.
type gen struct {
	id     string
	req    Request
	tokens []int // prompt, then completion
	rng    *rand.Rand
	events chan Event
	// arrival is when the scheduler took it, on its clock; admitted when
	// a step first ran it (scheduled says it has).
	arrival, admitted time.Duration
	scheduled         bool
}

// counters are the engine's totals, read by metrics.
type counters struct {
	mu               sync.Mutex
	promptTokens     int64 // prompt tokens of admitted requests
	computedPrompt   int64 // prompt (and re-prefill) tokens computed
	cachedTokens     int64 // prompt tokens found in shared pages
	generationTokens int64
	steps            int64
	ttft             []float64 // seconds, drained by metrics
	queued           []float64 // seconds from arrival to a first step, drained by metrics
	finished         map[string]int64
	preemptions      int64
	wasteSlots       int64 // page slots held but empty, summed over steps
	heldSlots        int64
}

// New starts an engine on m.
func New(m Model, cfg Config) (*Engine, error) {
	if cfg.Pages == 0 {
		cfg.Pages = m.Pages()
	}
	if cfg.Pages < 1 || cfg.Pages > m.Pages() {
		return nil, fmt.Errorf("pages: want 1 to the model's %d, got %d", m.Pages(), cfg.Pages)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 16
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.MaxWaiting < 0 {
		return nil, fmt.Errorf("max waiting: want 0 (no bound) or more, got %d", cfg.MaxWaiting)
	}
	// No step-time model: steps take what the model takes (Plan, Commit).
	s, err := engine.NewScheduler(engine.Config{
		Pages: cfg.Pages, PageTokens: PageTokens, Reserve: engine.ReserveStep,
		MaxBatch: cfg.MaxBatch, MaxPrefillTokens: cfg.MaxPrefillTokens, MaxModelLen: m.Context(),
		TenantBatchShare: cfg.TenantBatchShare, TenantKVShare: cfg.TenantKVShare,
		PrefixCaching: !cfg.NoPrefixCaching,
	})
	if err != nil {
		return nil, err
	}
	e := &Engine{m: m, sched: s, clock: cfg.Clock, t0: cfg.Clock.Now(), onStep: cfg.OnStep, maxWaiting: cfg.MaxWaiting,
		caching: !cfg.NoPrefixCaching, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{}), live: map[string]*gen{}}
	_, _ = crand.Read(e.salt[:])
	e.stats.finished = map[string]int64{}
	go e.loop()
	return e, nil
}

// Submit queues a request; its events arrive on the returned channel,
// which is closed after the Done event. The channel holds every event the
// request can produce, so the loop never waits on a slow reader.
func (e *Engine) Submit(r Request) (id string, events <-chan Event, err error) {
	if len(r.Prompt) == 0 {
		return "", nil, errors.New("prompt: want at least one token")
	}
	if len(r.Prompt) >= e.m.Context() {
		return "", nil, fmt.Errorf("%w: %d prompt tokens; the context window is %d", ErrTooLong, len(r.Prompt), e.m.Context())
	}
	if r.MaxTokens <= 0 || len(r.Prompt)+r.MaxTokens > e.m.Context() {
		r.MaxTokens = e.m.Context() - len(r.Prompt)
	}
	for _, t := range r.Prompt {
		if t < 0 || t >= e.m.Vocab() {
			return "", nil, fmt.Errorf("prompt: token %d outside the vocabulary of %d", t, e.m.Vocab())
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return "", nil, ErrStopped
	}
	if e.maxWaiting > 0 {
		// apply hands submits to the scheduler under e.mu, so a request is
		// counted once: pending here, or waiting there.
		waiting := e.sched.Waiting()
		for _, o := range e.ops {
			if o.submit != nil {
				waiting++
			}
		}
		if waiting >= e.maxWaiting {
			return "", nil, fmt.Errorf("%w: %d requests wait for a batch slot", ErrQueueFull, waiting)
		}
	}
	e.nextID++
	g := &gen{id: fmt.Sprintf("gen-%d", e.nextID), req: r, tokens: append(make([]int, 0, len(r.Prompt)+r.MaxTokens), r.Prompt...),
		events: make(chan Event, r.MaxTokens+1)}
	seed := uint64(e.nextID) * 0x9e3779b97f4a7c15
	if r.Sampling.Seed != nil {
		seed = uint64(*r.Sampling.Seed)
	}
	g.rng = rand.New(rand.NewPCG(seed, 0x6c6c6d))
	e.ops = append(e.ops, op{submit: g})
	e.signal()
	return g.id, g.events, nil
}

// Cancel drops a request; the loop frees its pages before its next step.
func (e *Engine) Cancel(id string) {
	e.mu.Lock()
	e.ops = append(e.ops, op{cancel: id})
	e.mu.Unlock()
	e.signal()
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stop ends the loop; open requests end with ErrStopped.
func (e *Engine) Stop() {
	e.mu.Lock()
	if !e.stopped {
		e.stopped = true
		close(e.quit)
	}
	e.mu.Unlock()
	<-e.done
}

// Counts are an engine's totals since it started.
type Counts struct {
	// PromptTokens are the prompt tokens of admitted requests;
	// PrefillComputed the prompt tokens the model computed (re-prefills
	// included, shared prefix pages not); CachedTokens those found in
	// shared or cached pages at each request's first admission.
	PromptTokens, PrefillComputed, CachedTokens int64
	GenerationTokens, Steps, Preemptions        int64
	// PrefixQueries and PrefixHits are vLLM's prefix cache counters:
	// tokens looked up at each admission, and those found computed.
	PrefixQueries, PrefixHits int64
	// KVWaste is the share of page slots the running sequences held that
	// held no token, over all steps.
	KVWaste float64
	// Pages is the KV cache's size; HeldPages the pages requests hold,
	// CachedPages the computed prefix pages nobody holds (evictable) and
	// FreePages the rest: FreePages + CachedPages + HeldPages = Pages.
	FreePages, CachedPages, HeldPages, Pages int
}

// Counts returns the engine's totals.
func (e *Engine) Counts() Counts {
	st := e.SchedulerStats()
	c := &e.stats
	c.mu.Lock()
	defer c.mu.Unlock()
	n := Counts{PromptTokens: c.promptTokens, PrefillComputed: c.computedPrompt, CachedTokens: c.cachedTokens,
		GenerationTokens: c.generationTokens, Steps: c.steps, Preemptions: c.preemptions,
		PrefixQueries: st.PrefixQueries, PrefixHits: st.PrefixHits,
		FreePages: st.KVPagesTotal - st.KVPagesUsed - st.KVPagesCached, CachedPages: st.KVPagesCached,
		HeldPages: st.KVPagesUsed, Pages: st.KVPagesTotal}
	if c.heldSlots > 0 {
		n.KVWaste = float64(c.wasteSlots) / float64(c.heldSlots)
	}
	return n
}

// SchedulerStats is the scheduler's snapshot.
func (e *Engine) SchedulerStats() engine.Stats { return e.sched.Stats(e.since()) }

func (e *Engine) since() time.Duration { return e.clock.Now().Sub(e.t0) }

// Wall is the time of d on the engine's clock (Event.At).
func (e *Engine) Wall(d time.Duration) time.Time { return e.t0.Add(d) }

func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.apply()
		if len(e.live) == 0 {
			select {
			case <-e.wake:
				continue
			case <-e.quit:
				e.abort()
				return
			}
		}
		select {
		case <-e.quit:
			e.abort()
			return
		default:
		}
		if !e.step() {
			select {
			case <-e.wake:
			case <-e.quit:
				e.abort()
				return
			}
		}
	}
}

func (e *Engine) apply() {
	e.mu.Lock()
	defer e.mu.Unlock()
	ops := e.ops
	e.ops = nil
	for _, o := range ops {
		if g := o.submit; g != nil {
			r := engine.Request{ID: g.id, Tenant: g.req.Tenant, Arrival: e.since(), PromptTokens: len(g.req.Prompt),
				MaxTokens: g.req.MaxTokens, OutputTokens: g.req.MaxTokens}
			// Only full pages before the last prompt token: that one is
			// always computed, and must not be written into a shared page.
			if e.caching {
				r.PageHashes = pageHashes(e.salt, g.req.Prompt, (len(g.req.Prompt)-1)/PageTokens)
				r.CacheSalt = "tenant:" + g.req.Tenant
			}
			if err := e.sched.Submit(r); err != nil {
				g.events <- Event{Done: true, Reason: "error", Err: err}
				close(g.events)
				continue
			}
			g.arrival = r.Arrival
			e.live[g.id] = g
			e.stats.mu.Lock()
			e.stats.promptTokens += int64(len(g.req.Prompt))
			e.stats.mu.Unlock()
			continue
		}
		if g := e.live[o.cancel]; g != nil {
			e.sched.Cancel(o.cancel)
			e.end(g, Event{Done: true, Reason: "cancelled"})
		}
	}
}

func (e *Engine) end(g *gen, ev Event) {
	delete(e.live, g.id)
	g.events <- ev
	close(g.events)
	e.stats.mu.Lock()
	e.stats.finished[ev.Reason]++
	e.stats.mu.Unlock()
}

func (e *Engine) abort() {
	e.mu.Lock()
	ops := e.ops
	e.ops = nil
	e.mu.Unlock()
	for _, o := range ops {
		if o.submit != nil {
			o.submit.events <- Event{Done: true, Reason: "error", Err: ErrStopped}
			close(o.submit.events)
		}
	}
	for id, g := range e.live {
		e.sched.Cancel(id)
		e.end(g, Event{Done: true, Reason: "error", Err: ErrStopped})
	}
}

// step plans, runs and commits one forward pass; false when nothing could
// run (the loop then waits for a submit or cancel).
func (e *Engine) step() bool {
	plan := e.sched.Plan(e.since())
	if len(plan.Work) == 0 {
		e.sched.Commit(plan, 0, nil)
		return false
	}
	batch := make([]Step, len(plan.Work))
	var held, used int64
	now := e.since()
	for i, w := range plan.Work {
		g := e.live[w.ID]
		if !g.scheduled {
			g.scheduled, g.admitted = true, now
		}
		batch[i] = Step{Tokens: g.tokens[w.Pos : w.Pos+w.Tokens], Pos: w.Pos, Pages: w.Pages}
		held += int64(len(w.Pages) * PageTokens)
		used += int64(w.Pos + w.Tokens)
	}
	if e.onStep != nil {
		e.onStep(plan.Work)
	}
	t := e.clock.Now()
	logits := e.m.Forward(batch)
	d := e.clock.Now().Sub(t)
	out := make([]engine.Output, 0, len(plan.Work))
	for i, w := range plan.Work {
		if !w.Emits {
			continue
		}
		g := e.live[w.ID]
		tok := sample(logits[i], g.req.Sampling, g.rng)
		o := engine.Output{ID: w.ID, Token: tok}
		if !g.req.IgnoreEOS {
			for _, eos := range e.m.EOS() {
				o.Stop = o.Stop || tok == eos
			}
		}
		if !o.Stop && g.req.Stop != nil {
			o.Stop = g.req.Stop(append(slices.Clone(g.tokens[len(g.req.Prompt):]), tok))
		}
		out = append(out, o)
	}
	res := e.sched.Commit(plan, d, out)
	e.stats.mu.Lock()
	e.stats.steps++
	e.stats.computedPrompt += int64(res.PrefillTokens)
	e.stats.generationTokens += int64(len(res.Events))
	e.stats.preemptions += int64(len(res.Preempted))
	e.stats.heldSlots += held
	e.stats.wasteSlots += held - used
	e.stats.mu.Unlock()
	for _, ev := range res.Events {
		g := e.live[ev.ID]
		g.tokens = append(g.tokens, ev.Token)
		if ev.Index == 0 && len(e.stats.ttft) < 1<<16 {
			e.stats.mu.Lock()
			e.stats.ttft = append(e.stats.ttft, (ev.Time - g.arrival).Seconds())
			e.stats.queued = append(e.stats.queued, (g.admitted - g.arrival).Seconds())
			e.stats.mu.Unlock()
		}
		tok := Event{Token: ev.Token, At: ev.Time}
		if ev.Index == 0 {
			tok.Arrival, tok.Admitted = g.arrival, g.admitted
		}
		g.events <- tok
	}
	for _, f := range res.Finished {
		g := e.live[f.ID]
		e.stats.mu.Lock()
		e.stats.cachedTokens += int64(f.CachedTokens)
		e.stats.mu.Unlock()
		e.end(g, Event{Done: true, Reason: string(f.Reason)})
	}
	return true
}

// pageHashes is the hash chain of the first pages full pages of tokens:
// hash i is SHA-256 of the salt, hash i-1 and page i's tokens, cut to 64
// bits, so it names the whole run of tokens up to the end of page i, as
// vLLM's block hashes do. A cryptographic hash with a per-engine salt,
// since a collision would hand one prompt another's K/V.
func pageHashes(salt [8]byte, tokens []int, pages int) []uint64 {
	if pages <= 0 {
		return nil
	}
	hs := make([]uint64, pages)
	buf := make([]byte, 0, 16+4*PageTokens)
	var parent uint64
	for i := range hs {
		buf = append(buf[:0], salt[:]...)
		buf = binary.LittleEndian.AppendUint64(buf, parent)
		for _, t := range tokens[i*PageTokens : (i+1)*PageTokens] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		sum := sha256.Sum256(buf)
		parent = binary.LittleEndian.Uint64(sum[:8])
		hs[i] = parent
	}
	return hs
}

// sample draws the next token from logits: argmax at temperature 0, else
// from softmax(logits / temperature) cut to the top_p nucleus.
func sample(logits []float32, s Sampling, rng *rand.Rand) int {
	if s.Temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	mx := float64(logits[0])
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	type cand struct {
		id int
		p  float64
	}
	cs := make([]cand, len(logits))
	sum := 0.0
	for i, v := range logits {
		p := math.Exp((float64(v) - mx) / s.Temperature)
		cs[i] = cand{i, p}
		sum += p
	}
	if top := s.TopP; top > 0 && top < 1 {
		slices.SortStableFunc(cs, func(a, b cand) int { return cmp.Compare(b.p, a.p) })
		acc, n := 0.0, 0
		for n < len(cs) {
			acc += cs[n].p / sum
			n++
			if acc >= top {
				break
			}
		}
		cs = cs[:n]
		sum = 0
		for _, c := range cs {
			sum += c.p
		}
	}
	r := rng.Float64() * sum
	for _, c := range cs {
		r -= c.p
		if r < 0 {
			return c.id
		}
	}
	return cs[len(cs)-1].id
}
