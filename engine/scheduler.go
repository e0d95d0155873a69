package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// ErrInvalidConfig is a Config NewScheduler refuses; it is wrapped with the
// field and what it wants.
var ErrInvalidConfig = errors.New("invalid scheduler config")

// Errors of Scheduler.Submit. Each is wrapped with the reason; the text
// names sizes, never prompt content.
var (
	// ErrInvalidRequest is a request with a missing id or a negative or
	// zero size.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrDuplicateID is a request whose id is already waiting or running.
	ErrDuplicateID = errors.New("duplicate request id")
	// ErrTooLarge is a request that could never run: its prompt fills the
	// context window, or it needs more KV pages than the cache or its
	// tenant's share holds.
	ErrTooLarge = errors.New("request too large")
)

// Request is one generation request as the scheduler sees it: sizes and
// times, never text.
type Request struct {
	// ID identifies the request among those waiting or running; it may be
	// reused once the request has finished or been cancelled.
	ID string
	// Tenant is the key of the per-tenant caps (Config.TenantBatchShare,
	// TenantKVShare). Empty is a tenant like any other.
	Tenant string
	// Priority orders the waiting queue, higher first. A request that
	// cannot be admitted preempts running sequences of lower priority, and
	// only those. Default 0.
	Priority int
	// Arrival is when the request arrived, as time since the caller's start,
	// on the same clock as the now given to Step. TTFT is measured from it,
	// and a step does not admit a request that arrives after it starts.
	Arrival time.Duration
	// PromptTokens is the prompt length, at least 1.
	PromptTokens int
	// MaxTokens caps the completion (the OpenAI max_tokens); reaching it
	// ends the completion with FinishLength. 0: no cap but the context
	// window.
	MaxTokens int
	// OutputTokens, when above 0, is how many tokens the model produces
	// before it stops (capped by MaxTokens), unless a real pass stops it
	// first (Output.Stop). When 0 the length is drawn from
	// Config.OutputTokens, or is MaxTokens, or DefaultMaxTokens.
	OutputTokens int
	// PrefixKey names the first PrefixTokens tokens of the prompt: requests
	// with the same key have the same tokens there (a shared system prompt,
	// say its hash). The full KV pages of the prefix are then shared and
	// not prefilled again while some request holding them is running (or,
	// with Config.PrefixCaching, while they stay cached). Empty: no sharing.
	PrefixKey    string
	PrefixTokens int
	// PageHashes, when set, name the prompt's full pages instead of
	// PrefixKey, as a hash chain (see KV): PageHashes[i] names the first
	// (i+1)×PageTokens prompt tokens, so requests whose prompts start with
	// the same tokens name their leading pages alike, whatever their
	// keys. A real engine, which sees the tokens, sets them; the pages
	// they name are shared and cached as PrefixKey's.
	PageHashes []uint64
	// CacheSalt, when set, is part of every page hash of the request
	// (PageHashes' or PrefixKey's), as vLLM's cache_salt: requests share
	// prefix pages only when their salts are equal. A serving engine puts
	// the calling team here, so that one team never reads, or times,
	// another's cached prompt.
	CacheSalt string
}

// TokenEvent is one generated token, to stream to the client.
type TokenEvent struct {
	// ID is the request's; empty with Config.Lean.
	ID string
	// Index is the token's position in the completion, from 0. A request's
	// events come in Index order, each index exactly once, preemptions or
	// not.
	Index int
	// Token is a pseudo token id in [0, 32000), drawn from a generator
	// seeded by the scheduler seed and the request id: reproducible, and
	// meaningless.
	Token int
	// Time is when the token exists: the end of the step that made it.
	Time time.Duration
	// Tokens is the sequence's length with this token: its prompt and its
	// completion so far, the positions its KV pages hold.
	Tokens int
	// Last marks the completion's final token. By the time Step returns it
	// the request has left the batch and its pages are free.
	Last bool
}

// FinishReason says why a completion ended.
type FinishReason string

// The finish reasons, named as in the OpenAI API.
const (
	// FinishStop: the model stopped on its own.
	FinishStop FinishReason = "stop"
	// FinishLength: the completion reached max_tokens or the context window.
	FinishLength FinishReason = "length"
	// FinishCancelled: the caller cancelled it (Scheduler.Cancel).
	FinishCancelled FinishReason = "cancelled"
)

// Finished is a request that left the scheduler, with its usage and timing
// in model time.
type Finished struct {
	ID       string
	Tenant   string
	Priority int
	Reason   FinishReason
	// PromptTokens and CompletionTokens are the usage block's counts;
	// CompletionTokens equals the number of TokenEvents of the request.
	PromptTokens     int
	CompletionTokens int
	// CachedTokens are prompt tokens found in shared prefix pages at the
	// first admission, which cost no prefill.
	CachedTokens int
	// PrefillTokens are the tokens prefilled, re-prefills after
	// preemptions included: the GPU work the prompt cost.
	PrefillTokens int
	// Preemptions counts the times the request was evicted and re-queued.
	Preemptions int
	// Arrival is Request.Arrival; Done is when it finished or was cancelled.
	Arrival time.Duration
	Done    time.Duration
	// FirstToken and LastToken are when the first and the last completion
	// tokens were generated; 0 without tokens.
	FirstToken time.Duration
	LastToken  time.Duration
	// TokenTimes holds when each completion token was generated; nil with
	// Config.Lean.
	TokenTimes []time.Duration
}

// TTFT is the time from arrival to the first token; 0 when there was none.
func (f Finished) TTFT() time.Duration {
	if f.CompletionTokens == 0 {
		return 0
	}
	return f.FirstToken - f.Arrival
}

// TPOT is the mean time per output token after the first:
// (last - first) / (tokens - 1); 0 with fewer than two tokens.
func (f Finished) TPOT() time.Duration {
	n := f.CompletionTokens
	if n < 2 {
		return 0
	}
	return (f.LastToken - f.FirstToken) / time.Duration(n-1)
}

// StepResult is what one scheduler step did.
type StepResult struct {
	// Start is when the step began: the now given to Step, or the end of
	// the previous step when that is later (the GPU was busy), or, when
	// nothing was running, the first waiting request's arrival when that is
	// later still (the GPU was idle until then).
	Start time.Duration
	// Duration is the modelled GPU time of the step; 0 when it ran no
	// forward pass because nothing could run. A real-time caller sleeps it
	// before handing out Events; a virtual-time caller advances its clock.
	Duration time.Duration
	// Admitted counts the sequences admitted this step. Prefilled counts
	// those that computed prompt tokens, PrefillTokens the tokens computed,
	// and Decoded those that decoded a token.
	Admitted      int
	Prefilled     int
	PrefillTokens int
	Decoded       int
	// Batch is the number of sequences in the step, Waiting the queue left
	// behind it and KVPagesUsed the pages held after it.
	Batch       int
	Waiting     int
	KVPagesUsed int
	// Events are the tokens generated in the step, in batch order: the
	// first token of every sequence whose prefill completed and the next
	// token of every decoding sequence, page-boundary tokens included.
	Events []TokenEvent
	// Finished are the requests that produced their last token; their pages
	// are already free.
	Finished []Finished
	// Preempted are the ids evicted back to the waiting queue; they re-
	// prefill their prompt and output so far when readmitted.
	Preempted []string
	// FirstAdmitted are the ids admitted for the first time in this step
	// (a re-admission after a preemption is not); nil with Config.Lean.
	FirstAdmitted []string
}

// End is Start + Duration: when the step's tokens exist.
func (r StepResult) End() time.Duration { return r.Start + r.Duration }

// Reserve says how far ahead admission reserves KV pages for the growth of
// running sequences. Every policy admits a waiting sequence only while the
// pages its prompt needs are free after the reservation, so a running
// sequence can always take the page it needs in the current step; they
// differ in the steps after.
type Reserve string

// The reservation policies; the simulator's profile names them alike
// (kv_reserve).
const (
	// ReserveFinal reserves, for every running sequence, the pages up to its
	// final length: its prompt plus the completion the model will produce
	// (Request.OutputTokens or a drawn length). Growth never fails and
	// nothing is preempted for memory. Only a simulation knows each
	// completion's length in advance. The default.
	ReserveFinal Reserve = "final"
	// ReserveMaxTokens reserves up to the prompt plus the request's
	// max_tokens (or the context window, or the final length when neither
	// is set): what a real engine must do to never preempt.
	ReserveMaxTokens Reserve = "max_tokens"
	// ReserveStep reserves only the pages running sequences take in the
	// current step. It admits the most, but when the pool is full a later
	// step cannot give every growing sequence its page, and the scheduler
	// then preempts the lowest-priority, most recently admitted sequence
	// (it re-prefills later), counted apart from priority preemptions. The
	// tenant page cap applies to pages held, so growth may take a tenant
	// past it until its sequences finish.
	ReserveStep Reserve = "step"
)

// Defaults of Config's zero fields.
const (
	DefaultPageTokens = 16
	DefaultMaxBatch   = 256
	// DefaultMaxTokens is the completion length when neither the request,
	// the context window nor Config.OutputTokens gives one.
	DefaultMaxTokens = 256
)

// StepTimer is the cost model Step runs on: how long one fused forward
// pass lasts. The simulator's is the version's sim profile
// (profile.Profile.StepTime); a real engine times its own pass and calls
// Plan and Commit instead.
type StepTimer interface {
	StepTime(decoding, prefillTokens int) time.Duration
}

// Lengths draws how many tokens a completion produces when the request
// does not say (Request.OutputTokens).
type Lengths interface {
	Draw(r *rand.Rand) int
}

// Config configures a Scheduler. Zero fields take the defaults named on
// them.
type Config struct {
	// Pages is the KV cache's size in pages, at least 1.
	Pages int
	// PageTokens is the number of tokens one page holds. Default
	// DefaultPageTokens.
	PageTokens int
	// Reserve is the growth reservation policy. Default ReserveFinal.
	Reserve Reserve
	// MaxBatch caps the sequences in one step. Default DefaultMaxBatch.
	MaxBatch int
	// MaxPrefillTokens caps the prompt tokens one step computes (chunked
	// prefill); 0: no cap.
	MaxPrefillTokens int
	// MaxModelLen is the context window: prompt plus completion. 0: none.
	MaxModelLen int
	// TenantBatchShare and TenantKVShare cap the share of the batch slots
	// and of the pages one tenant's running sequences hold, in (0, 1]. 0
	// or 1: no cap.
	TenantBatchShare float64
	TenantKVShare    float64
	// OutputTokens, when set, draws a completion's length for requests
	// without Request.OutputTokens.
	OutputTokens Lengths
	// StepTime is the cost model of Step; nil for a caller that runs its
	// own pass with Plan and Commit.
	StepTime StepTimer
	// Seed makes completion lengths and token ids reproducible.
	Seed uint64
	// PrefixCaching keeps the computed prefix pages of finished requests
	// cached for later ones, evicted least recently released first when
	// pages are needed (KV.CachePrefixes). Off, prefix pages are shared
	// only while some request holds them.
	PrefixCaching bool
	// Lean is for a caller that reads each step's result before the next
	// step and needs neither ids nor every token's time, as a virtual-time
	// fleet: events carry no ID and Token 0, Finished.TokenTimes is nil
	// (FirstToken and LastToken are set), the Events and Finished of a
	// StepResult are overwritten by the next Step or Commit, and Stats
	// keeps no recent samples (TokensPerSecond, TTFT and TPOT stay 0).
	// Admission, steps, times and counts are exactly those of a scheduler
	// without it.
	Lean bool
	// Events, with Lean, is the buffer each step's Events are written to
	// instead of the scheduler's own. Schedulers whose caller reads each
	// step's events before any of them steps again may share one: a fleet
	// of a hundred schedulers found each one's own buffer out of the CPU's
	// cache at every step, and a shared one is in it.
	Events *[]TokenEvent
}

// withDefaults fills cfg's zero fields and checks it.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.PageTokens == 0 {
		cfg.PageTokens = DefaultPageTokens
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Reserve == "" {
		cfg.Reserve = ReserveFinal
	}
	if cfg.TenantBatchShare == 0 {
		cfg.TenantBatchShare = 1
	}
	if cfg.TenantKVShare == 0 {
		cfg.TenantKVShare = 1
	}
	bad := func(field, want string) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, want)
	}
	switch {
	case cfg.Pages < 1:
		return cfg, bad("pages", "want at least 1")
	case cfg.PageTokens < 1:
		return cfg, bad("page tokens", "want at least 1")
	case cfg.Reserve != ReserveFinal && cfg.Reserve != ReserveMaxTokens && cfg.Reserve != ReserveStep:
		return cfg, bad("reserve", `want "final", "max_tokens" or "step"`)
	case cfg.MaxBatch < 1:
		return cfg, bad("max batch", "want at least 1")
	case cfg.MaxPrefillTokens < 0 || cfg.MaxModelLen < 0:
		return cfg, bad("max prefill tokens, max model len", "want 0 or more")
	case !(cfg.TenantBatchShare > 0 && cfg.TenantBatchShare <= 1) || !(cfg.TenantKVShare > 0 && cfg.TenantKVShare <= 1):
		return cfg, bad("tenant shares", "want more than 0 and at most 1")
	}
	return cfg, nil
}

// Scheduler is a continuous-batching scheduler over a paged KV cache for one
// accelerator. Each Step admits waiting requests, runs one fused forward
// pass (prefill for the newly admitted, one decode token for every other
// running sequence) and returns the pass's modelled duration and tokens;
// Plan and Commit split a step around a pass the caller runs itself.
//
// The scheduler never reads a clock: the caller passes the time to Step
// and each request's arrival to Submit, and decides what a step's duration
// means: a real-time replica sleeps it, a simulation advances a virtual
// clock (sim.RunVirtual), a real engine measures its pass.
//
// Admission, per step, in queue order (priority, then arrival):
//   - a request that arrives after the step starts waits;
//   - a request of a tenant at its batch-slot or page cap rotates to the
//     back of its priority class, and nobody is evicted for it;
//   - a request is admitted while the batch has a slot, the step's prefill
//     budget is not spent and the pages it needs (less the shared prefix
//     pages) are free after the growth reservation of the running
//     sequences (see Reserve), so a running sequence never fails to grow;
//   - otherwise, when running sequences of lower priority would free enough,
//     the lowest-priority, most recently admitted of them are preempted
//     back to the queue; else admission stops for this step, so a large
//     request is not overtaken forever by small ones.
//
// A Scheduler is safe for concurrent use: a replica's HTTP handlers may
// Submit and Cancel while its loop calls Step.
type Scheduler struct {
	mu sync.Mutex

	p             Config // defaults filled in
	seed          uint64
	kv            *KV
	caching       bool
	tenantSlots   int
	tenantPages   int
	prefillBudget int // math.MaxInt when uncapped

	clock   time.Duration // end of the last step
	planned bool          // a Plan awaits its Commit
	waiting []*seq        // by priority (high first), then order
	running []*seq        // in admission order
	live    map[string]*seq
	tenants map[string]*tenantUse

	nextOrder int64
	nextAdmit int64
	// priorities counts the running sequences of each priority, so that
	// victims knows without reading every running sequence (a cache line
	// a step does not otherwise touch) when none is below a priority: a
	// queue whose head does not fit asks at every step.
	priorities []priorityCount
	// reserve is the pages reserved for the running sequences' growth
	// under ReserveFinal and ReserveMaxTokens: the sum of their commit
	// less the pages they hold, kept as they change.
	reserve int

	// With Config.Lean, the buffers every step's Events and Finished reuse,
	// and the finished sequences Submit reuses (see newSeq).
	events []TokenEvent
	done   []Finished
	spare  []*seq

	rec                 recorder
	submitted           int64
	completed           int64
	cancelled           int64
	priorityPreemptions int64
	growthPreemptions   int64
	growFailures        int64
	prefixQueries       int64
	prefixHits          int64
}

type priorityCount struct{ priority, running int }

type tenantUse struct {
	running int
	pages   int
}

// seq is one request inside the scheduler. What a step reads and writes
// for every running sequence is on its first cache line (prefill to
// kv.tokens), and with Config.Lean nothing else is, once it decodes: a
// fleet of schedulers finds each sequence out of the CPU's cache at every
// step, so each line a step touches costs it a miss.
type seq struct {
	prefill   int // prompt tokens still to prefill; 0 when decoding
	plan      int // prompt tokens to prefill in the current step
	generated int
	target    int    // completion tokens the model produces
	kv        kvSeq  // its pages and tokens while running (KV.allocateSeq); none after
	id        string // req.ID
	running   bool
	reason    FinishReason
	firstAt   time.Duration // the first token's time
	// lastAt is the last token's time, kept when the sequence stops
	// decoding: while it runs with its prefill done, it made a token in
	// every step, the last one ending at the scheduler's clock (lastToken).
	lastAt time.Duration

	req    Request
	order  int64      // queue position: lower goes first within a priority
	commit int        // pages reserved to the final length (ReserveFinal, ReserveMaxTokens)
	rng    *rand.Rand // made at first use (see random)
	hashes []uint64   // the prompt's page hash chain (Request.PageHashes or PrefixKey's)

	admitted int64 // admission serial: higher is more recent
	charged  int   // pages charged to the tenant while running

	first       bool // admitted at least once
	cached      int
	prefilled   int
	preemptions int
	times       []time.Duration // every token's; none with Config.Lean
}

// newSeq returns a sequence for r: with Config.Lean a finished one reused,
// its block table's memory kept (nothing it handed out refers to it: its
// Finished has no TokenTimes), else a new one.
func (s *Scheduler) newSeq(r Request) *seq {
	n := len(s.spare)
	if n == 0 {
		return &seq{req: r, id: r.ID}
	}
	q := s.spare[n-1]
	s.spare[n-1] = nil
	s.spare = s.spare[:n-1]
	*q = seq{req: r, id: r.ID, kv: kvSeq{pages: q.kv.pages[:0], hashes: q.kv.hashes[:0]}}
	return q
}

// random is the sequence's generator: seeded by the scheduler seed and the
// request id, so its draws do not depend on when it is first needed.
func (q *seq) random(seed uint64) *rand.Rand {
	if q.rng == nil {
		q.rng = rand.New(rand.NewPCG(seed, hashID(seed, q.req.ID)))
	}
	return q.rng
}

const vocabSize = 32000

// NewScheduler returns a scheduler with an empty queue and a free KV cache
// of cfg.Pages pages. It fails with ErrInvalidConfig.
func NewScheduler(cfg Config) (*Scheduler, error) {
	p, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pages := p.Pages
	s := &Scheduler{
		p:             p,
		seed:          p.Seed,
		kv:            NewKV(pages, p.PageTokens),
		caching:       p.PrefixCaching,
		tenantSlots:   max(1, int(math.Floor(p.TenantBatchShare*float64(p.MaxBatch)))),
		tenantPages:   max(1, int(math.Floor(p.TenantKVShare*float64(pages)))),
		prefillBudget: math.MaxInt,
		live:          map[string]*seq{},
		tenants:       map[string]*tenantUse{},
	}
	if p.MaxPrefillTokens > 0 {
		s.prefillBudget = p.MaxPrefillTokens
	}
	s.kv.CachePrefixes(p.PrefixCaching)
	// A share of 1 is no cap, not a cap at the whole GPU: a tenant alone on
	// a full cache must still be able to preempt its own lower priorities.
	if p.TenantBatchShare >= 1 {
		s.tenantSlots = math.MaxInt
	}
	if p.TenantKVShare >= 1 {
		s.tenantPages = math.MaxInt
	}
	return s, nil
}

// Waiting is the number of requests in the waiting queue, preempted ones
// included.
func (s *Scheduler) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// PageTokens is the number of tokens one KV page holds.
func (s *Scheduler) PageTokens() int { return s.p.PageTokens }

// KVPages is the size of the KV cache in pages.
func (s *Scheduler) KVPages() int { return s.kv.Total() }

// Submit queues a request for admission by a later Step. It fails, queuing
// nothing, with ErrInvalidRequest, ErrDuplicateID or ErrTooLarge.
func (s *Scheduler) Submit(r Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: id is required", ErrInvalidRequest)
	case r.PromptTokens < 1:
		return fmt.Errorf("%w: prompt of %d tokens; want at least 1", ErrInvalidRequest, r.PromptTokens)
	case r.MaxTokens < 0 || r.OutputTokens < 0 || r.PrefixTokens < 0 || r.Arrival < 0:
		return fmt.Errorf("%w: negative max tokens, output tokens, prefix tokens or arrival", ErrInvalidRequest)
	case s.live[r.ID] != nil:
		return fmt.Errorf("%w: %q is already queued or running", ErrDuplicateID, r.ID)
	case s.p.MaxModelLen > 0 && r.PromptTokens >= s.p.MaxModelLen:
		return fmt.Errorf("%w: prompt of %d tokens leaves no room in the context window of %d", ErrTooLarge, r.PromptTokens, s.p.MaxModelLen)
	}
	r.PrefixTokens = min(r.PrefixTokens, r.PromptTokens)
	q := s.newSeq(r)
	q.hashes = r.PageHashes
	if len(q.hashes) == 0 {
		q.hashes = s.kv.keyHashes(r.PrefixKey, r.PrefixTokens, r.PromptTokens)
	}
	if r.CacheSalt != "" {
		q.hashes = saltHashes(r.CacheSalt, q.hashes)
	}
	limit := r.MaxTokens
	if w := s.p.MaxModelLen - r.PromptTokens; s.p.MaxModelLen > 0 && (limit == 0 || w < limit) {
		limit = w
	}
	switch {
	case r.OutputTokens > 0:
		q.target = r.OutputTokens
	case s.p.OutputTokens != nil:
		q.target = s.p.OutputTokens.Draw(q.random(s.seed))
	case limit > 0:
		q.target = limit
	default:
		q.target, limit = DefaultMaxTokens, DefaultMaxTokens
	}
	q.reason = FinishStop
	if limit > 0 && q.target >= limit {
		q.target, q.reason = limit, FinishLength
	}
	final := s.kv.PagesFor(r.PromptTokens + q.target)
	q.commit = final
	if s.p.Reserve == ReserveMaxTokens && limit > 0 {
		q.commit = s.kv.PagesFor(r.PromptTokens + limit)
	}
	tenantNeed := q.commit
	if s.p.Reserve == ReserveStep {
		tenantNeed = s.kv.PagesFor(r.PromptTokens + 1)
	}
	if need := max(final, q.commit); need > s.kv.Total() {
		return fmt.Errorf("%w: %d prompt and %d completion tokens need %d KV pages; the cache has %d",
			ErrTooLarge, r.PromptTokens, q.target, need, s.kv.Total())
	}
	if tenantNeed > s.tenantPages {
		return fmt.Errorf("%w: %d prompt and %d completion tokens need %d KV pages; a tenant may hold %d",
			ErrTooLarge, r.PromptTokens, q.target, tenantNeed, s.tenantPages)
	}
	q.order = s.nextOrder
	s.nextOrder++
	s.live[r.ID] = q
	s.insertWaiting(q)
	s.submitted++
	return nil
}

// hashID mixes the seed and a request id into a generator stream, so a
// request's draws do not depend on what else the scheduler runs.
func hashID(seed uint64, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// Cancel removes a waiting or running request and frees its pages before it
// returns; no later step reports a token for it. It returns the request's
// usage so far, and false when the id is not waiting or running.
func (s *Scheduler) Cancel(id string) (Finished, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.live[id]
	if q == nil {
		return Finished{}, false
	}
	if q.running {
		s.release(q)
		s.running = slices.DeleteFunc(s.running, func(x *seq) bool { return x == q })
	} else {
		s.waiting = slices.DeleteFunc(s.waiting, func(x *seq) bool { return x == q })
	}
	delete(s.live, id)
	s.cancelled++
	return s.finished(q, FinishCancelled, s.clock), true
}

// Step runs one scheduler step: admission, then one forward pass. now is
// the caller's current time on the clock of Request.Arrival; the step
// starts then, or later if the previous step has not ended or nothing has
// arrived yet (see StepResult.Start). A caller without a clock may pass 0
// and get steps back to back. See Scheduler for the admission rules and
// Config.StepTime for the step's duration.
//
// Step is Plan and Commit with Config.StepTime's modelled duration and drawn
// token ids; a caller that runs a real model calls those two itself.
func (s *Scheduler) Step(now time.Duration) StepResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.plan(now)
	if !p.runs() {
		return s.commit(p, 0, nil)
	}
	if s.p.StepTime == nil {
		panic("engine.Scheduler.Step: no Config.StepTime; a caller that runs its own pass calls Plan and Commit")
	}
	// At least a nanosecond: a step that ran must move time, or a caller
	// would take it for an idle one.
	return s.commit(p, max(1, s.p.StepTime.StepTime(p.res.Decoded, p.res.PrefillTokens)), nil)
}

// Work is one sequence's part of a planned forward pass: compute the K/V of
// its positions [Pos, Pos+Tokens) (positions count its prompt, then its
// completion so far) into the pages of its block table.
type Work struct {
	ID     string
	Tenant string
	Pos    int
	Tokens int
	// Pages is the sequence's block table: Pages[i] holds positions
	// [i×PageTokens, (i+1)×PageTokens). It covers at least Pos+Tokens
	// positions; its leading pages may be shared prefix pages, which hold
	// computed K/V the pass reads and never writes.
	Pages []int32
	// Emits is true when the pass yields the sequence's next token, the
	// completion's token Index: its prefill completes in this pass, or it
	// decodes.
	Emits bool
	Index int
}

// Plan is a step's admission and the forward pass it asks for, between
// Scheduler.Plan and Scheduler.Commit.
type Plan struct {
	// Start is when the step begins, as StepResult.Start.
	Start time.Duration
	// Work is the batch of the pass, in batch order; empty when nothing
	// can run (then Commit only reports the queue).
	Work []Work
	res  StepResult
}

func (p Plan) runs() bool { return p.res.Decoded > 0 || p.res.PrefillTokens > 0 }

// Output is what a real forward pass produced for one sequence whose Work
// emits.
type Output struct {
	ID string
	// Token is the sampled token id, reported in its TokenEvent.
	Token int
	// Stop ends the completion with this token, with FinishStop: the model
	// produced its end of sequence or a stop string completed.
	Stop bool
}

// Plan runs the admission part of a step at now (as Step) and returns the
// forward pass to execute. The caller executes it, then calls Commit with
// its duration and outputs before the next Plan; a Cancel in between drops
// the sequence, whose output Commit then ignores. Pages of the planned
// sequences are held until Commit, except a cancelled one's, which are
// free at once.
func (s *Scheduler) Plan(now time.Duration) Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planned {
		panic("engine.Scheduler.Plan: the previous plan was not committed")
	}
	p := s.plan(now)
	if !p.runs() {
		return p
	}
	s.planned = true
	pt := s.kv.PageTokens()
	p.Work = make([]Work, 0, len(s.running))
	for _, q := range s.running {
		w := Work{ID: q.req.ID, Tenant: q.req.Tenant, Index: q.generated}
		switch {
		case q.prefill == 0:
			w.Pos, w.Tokens, w.Emits = q.kv.tokens-1, 1, true
		case q.plan > 0:
			w.Pos, w.Tokens, w.Emits = q.kv.tokens-q.prefill, q.plan, q.plan == q.prefill
		default:
			continue
		}
		w.Pages = s.kv.PageIDs(q.req.ID)
		if len(w.Pages)*pt < w.Pos+w.Tokens {
			panic(fmt.Sprintf("engine.Scheduler.Plan: %q computes %d positions in %d pages", w.ID, w.Pos+w.Tokens, len(w.Pages)))
		}
		p.Work = append(p.Work, w)
	}
	return p
}

// Commit ends the step p planned: d is how long its pass took (at least a
// nanosecond when it ran), and out holds, for each Work that emits, the
// token the model sampled. A sequence missing from out gets a drawn token
// id, as in Step. It returns the step's result as Step does.
func (s *Scheduler) Commit(p Plan, d time.Duration, out []Output) StepResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.runs() {
		if !s.planned {
			panic("engine.Scheduler.Commit: no plan in progress")
		}
		d = max(d, 1)
	}
	s.planned = false
	var byID map[string]Output
	if len(out) > 0 {
		byID = make(map[string]Output, len(out))
		for _, o := range out {
			byID[o.ID] = o
		}
	}
	return s.commit(p, d, byID)
}

// plan is the admission part of a step; it sets the plan's per-sequence
// q.plan and the counts of its result.
func (s *Scheduler) plan(now time.Duration) Plan {
	start := max(now, s.clock)
	if len(s.running) == 0 && len(s.waiting) > 0 {
		// An idle GPU starts when the first request arrives, so a caller
		// that does not track time (now 0) still gets a sound schedule.
		first := s.waiting[0].req.Arrival
		for _, q := range s.waiting {
			first = min(first, q.req.Arrival)
		}
		start = max(start, first)
	}
	res := StepResult{Start: start}

	// The prefill budget goes first to sequences admitted in earlier steps
	// that are still prefilling, then to the newly admitted.
	budget := s.prefillBudget
	for _, q := range s.running {
		q.plan = 0
		if q.prefill > 0 {
			q.plan = min(q.prefill, budget)
			budget -= q.plan
		}
	}
	s.admit(start, budget, &res)

	pt := s.kv.PageTokens()
	emits := func(q *seq) bool { return q.prefill == 0 || q.plan == q.prefill }
	if s.p.Reserve == ReserveStep {
		// Make room for every page this step's tokens need, evicting the
		// lowest-priority, most recently admitted sequences.
		need := 0
		for _, q := range s.running {
			if emits(q) && q.full(pt) {
				need++
			}
		}
		for need > s.kv.AvailablePages() && len(s.running) > 0 {
			v := s.victims(math.MaxInt)[0]
			if emits(v) && v.full(pt) {
				need--
			}
			s.preempt(v, &res)
			s.insertWaiting(v)
			s.growthPreemptions++
		}
	}

	for _, q := range s.running {
		switch {
		case q.prefill == 0:
			res.Decoded++
		case q.plan > 0:
			res.Prefilled++
			res.PrefillTokens += q.plan
		}
	}
	res.Batch = len(s.running)
	return Plan{Start: start, res: res}
}

// commit ends a planned step of duration d (0 when it ran nothing). The
// token of an emitting sequence is out's, or drawn from its generator
// when out has none for it.
func (s *Scheduler) commit(p Plan, d time.Duration, out map[string]Output) StepResult {
	res := p.res
	if !p.runs() {
		res.Waiting, res.KVPagesUsed = len(s.waiting), s.kv.UsedPages()
		return res
	}
	res.Duration = d
	end := res.End()
	pt := s.kv.PageTokens()

	var failed []*seq
	done := false
	lean := s.p.Lean
	events := &s.events
	if s.p.Events != nil {
		events = s.p.Events
	}
	if lean {
		res.Events, res.Finished = (*events)[:0], s.done[:0]
	} else {
		res.Events = make([]TokenEvent, 0, len(s.running))
	}
	for _, q := range s.running {
		if q.prefill > 0 {
			if q.plan == 0 {
				continue
			}
			q.prefill -= q.plan
			q.prefilled += q.plan
			q.plan = 0
			if len(q.hashes) > 0 {
				s.kv.MarkComputed(q.req.ID, q.kv.tokens-q.prefill)
			}
			if q.prefill > 0 {
				continue
			}
		}
		takes := q.full(pt)
		if !s.kv.grow(&q.kv, 1) {
			// Admission reserves against this; reaching it is a bug, made
			// visible in Stats and survived by preempting the sequence.
			s.growFailures++
			failed = append(failed, q)
			continue
		}
		if takes {
			s.reserve-- // a page reserved for it is now its own
			if s.p.Reserve == ReserveStep {
				s.charge(q, 1)
			}
		}
		if !lean {
			q.times = append(q.times, end)
		}
		if q.generated == 0 {
			q.firstAt = end
		}
		// Written in place: an event made on the stack and appended was
		// copied in wider moves than it was written with, which the CPU
		// could not forward from its stores (a tenth of a fleet's run).
		res.Events = append(res.Events, TokenEvent{})
		ev := &res.Events[len(res.Events)-1]
		ev.Index, ev.Time, ev.Tokens = q.generated, end, q.kv.tokens
		if !lean {
			ev.ID = q.id
		}
		var reason FinishReason
		stop := false
		o, ok := Output{}, false
		if out != nil { // q.id is on a line a lean step does not read
			o, ok = out[q.id]
		}
		if ok {
			ev.Token = o.Token
			if o.Stop {
				reason, stop = FinishStop, true
			}
		} else if !lean {
			ev.Token = q.random(s.seed).IntN(vocabSize)
		}
		q.generated++
		if q.generated >= q.target || stop {
			if !stop {
				reason = q.reason
			}
			ev.Last = true
			s.release(q)
			q.lastAt = end
			delete(s.live, q.req.ID)
			s.completed++
			f := s.finished(q, reason, end)
			if !lean {
				s.rec.ttft.add(f.TTFT())
				if f.CompletionTokens > 1 {
					s.rec.tpot.add(f.TPOT())
				}
			}
			res.Finished = append(res.Finished, f)
			done = true
			if lean {
				s.spare = append(s.spare, q)
			}
		}
	}
	if done {
		s.running = slices.DeleteFunc(s.running, func(q *seq) bool { return !q.running })
	}
	for _, q := range failed {
		s.preempt(q, &res)
		s.insertWaiting(q)
	}
	s.clock = end
	if lean {
		*events, s.done = res.Events, res.Finished
	} else {
		s.rec.step(p.Start, end, len(res.Events))
	}
	res.Waiting, res.KVPagesUsed = len(s.waiting), s.kv.UsedPages()
	return res
}

// admit runs the admission pass of a step; budget is the prefill budget
// left to new sequences.
func (s *Scheduler) admit(start time.Duration, budget int, res *StepResult) {
	if len(s.waiting) == 0 {
		return
	}
	avail := s.available()
	// Compact s.waiting in place: n counts the kept, and n <= i always.
	w := s.waiting
	var rotated, evicted []*seq
	n, i := 0, 0
	for ; i < len(w); i++ {
		q := w[i]
		if q.req.Arrival > start {
			w[n] = q
			n++
			continue
		}
		if budget == 0 {
			break
		}
		if s.overQuota(q) {
			rotated = append(rotated, q)
			continue
		}
		need := s.need(q)
		if len(s.running) >= s.p.MaxBatch || need > avail {
			victims := s.preemptFor(q, need, avail)
			if victims == nil {
				break
			}
			for _, v := range victims {
				budget += v.plan
				s.preempt(v, res)
				s.priorityPreemptions++
				evicted = append(evicted, v)
			}
			avail, need = s.available(), s.need(q)
			if len(s.running) >= s.p.MaxBatch || need > avail {
				break
			}
		}
		first := !q.first
		if !s.start(q) {
			break
		}
		if first && !s.p.Lean {
			res.FirstAdmitted = append(res.FirstAdmitted, q.req.ID)
		}
		q.plan = min(q.prefill, budget)
		budget -= q.plan
		avail -= need
		res.Admitted++
	}
	if n != i {
		n += copy(w[n:], w[i:])
	} else {
		n = len(w)
	}
	clear(w[n:]) // drop the admitted from the backing array
	s.waiting = w[:n]
	for _, q := range rotated {
		q.order = s.nextOrder
		s.nextOrder++
	}
	s.waiting = append(append(s.waiting, rotated...), evicted...)
	if (len(rotated) > 0 || len(evicted) > 0) && !slices.IsSortedFunc(s.waiting, queueOrder) {
		slices.SortStableFunc(s.waiting, queueOrder)
	}
}

// queueOrder is the waiting queue's order: higher priority first, then
// lower order (earlier submission, or earlier rotation).
func queueOrder(a, b *seq) int {
	if a.req.Priority != b.req.Priority {
		return b.req.Priority - a.req.Priority
	}
	switch {
	case a.order < b.order:
		return -1
	case a.order > b.order:
		return 1
	}
	return 0
}

func (s *Scheduler) insertWaiting(q *seq) {
	if n := len(s.waiting); n == 0 || queueOrder(s.waiting[n-1], q) <= 0 {
		s.waiting = append(s.waiting, q) // a new request of the lowest priority queued
		return
	}
	i, _ := slices.BinarySearchFunc(s.waiting, q, queueOrder)
	s.waiting = slices.Insert(s.waiting, i, q)
}

// available is the number of pages admission may hand out: the free and
// cached pages less those reserved for the running sequences' growth.
func (s *Scheduler) available() int {
	return s.kv.AvailablePages() - s.reserved()
}

func (s *Scheduler) reserved() int {
	n := 0
	if s.p.Reserve == ReserveStep {
		pt := s.kv.PageTokens()
		for _, q := range s.running {
			if q.full(pt) {
				n++
			}
		}
		return n
	}
	return s.reserve
}

// lastToken is when q made its last token so far: the end of the last
// step while it runs with its prefill done (it made one in every step
// since), else when it stopped decoding (release keeps it).
func (s *Scheduler) lastToken(q *seq) time.Duration {
	if q.running && q.prefill == 0 && q.generated > 0 {
		return s.clock
	}
	return q.lastAt
}

// full reports whether q's last page is full, so that its next token takes
// a page (pt tokens a page).
func (q *seq) full(pt int) bool { return q.kv.tokens == len(q.kv.pages)*pt }

// need is the number of available pages admitting q takes, counting its
// reservation: its pages less those it shares, plus the cached ones among
// those, which sharing takes out of the cache.
func (s *Scheduler) need(q *seq) int {
	tokens := q.req.PromptTokens + q.generated
	shared, idle := s.kv.match(q.hashes, tokens)
	if s.p.Reserve == ReserveStep {
		return s.kv.PagesFor(tokens+1) - shared + idle
	}
	return q.commit - shared + idle
}

// tenantNeed is what admitting q charges to its tenant's page cap.
func (s *Scheduler) tenantNeed(q *seq) int {
	if s.p.Reserve == ReserveStep {
		return s.kv.PagesFor(q.req.PromptTokens + q.generated + 1)
	}
	return q.commit
}

func (s *Scheduler) overQuota(q *seq) bool {
	if s.tenantSlots == math.MaxInt && s.tenantPages == math.MaxInt {
		return false // no caps: no tenant to look up at every admission
	}
	t := s.tenants[q.req.Tenant]
	if t == nil {
		return false
	}
	return t.running >= s.tenantSlots || t.pages > s.tenantPages-s.tenantNeed(q)
}

// preemptFor returns the running sequences to evict so that q fits: the
// fewest of lower priority than q, lowest priority and most recently
// admitted first. It returns nil when even all of them would not make
// room, so nothing is evicted in vain.
func (s *Scheduler) preemptFor(q *seq, need, avail int) []*seq {
	cands := s.victims(q.req.Priority)
	slots := len(s.running) + 1 - s.p.MaxBatch
	pt := s.kv.PageTokens()
	for i, v := range cands {
		slots--
		freed := s.kv.exclusivePages(v.req.ID)
		if s.p.Reserve == ReserveStep {
			if v.full(pt) {
				freed++
			}
		} else {
			freed += v.commit - len(v.kv.pages)
		}
		avail += freed
		if slots <= 0 && need <= avail {
			return cands[:i+1]
		}
	}
	return nil
}

// victims returns the running sequences of priority below limit (all of
// them when limit is math.MaxInt) in eviction order: lowest priority first,
// then most recently admitted.
func (s *Scheduler) victims(limit int) []*seq {
	if !slices.ContainsFunc(s.priorities, func(p priorityCount) bool { return p.priority < limit || limit == math.MaxInt }) {
		return nil
	}
	var v []*seq
	for _, q := range s.running {
		if q.req.Priority < limit || limit == math.MaxInt {
			v = append(v, q)
		}
	}
	slices.SortFunc(v, func(a, b *seq) int {
		if a.req.Priority != b.req.Priority {
			return a.req.Priority - b.req.Priority
		}
		return int(b.admitted - a.admitted)
	})
	return v
}

// start admits q: it allocates the pages of its prompt (and, after a
// preemption, of its output so far) and sets what is left to prefill.
func (s *Scheduler) start(q *seq) bool {
	tokens := q.req.PromptTokens + q.generated
	shared, err := s.kv.allocateSeq(q.req.ID, tokens, q.hashes, &q.kv, q.commit)
	if err != nil {
		return false // admission checked the pages; unreachable
	}
	if s.caching || len(q.hashes) > 0 {
		// As vLLM's counters: every admission looks its tokens up, a
		// re-admission after a preemption again.
		s.prefixQueries += int64(tokens)
		s.prefixHits += int64(shared * s.kv.PageTokens())
	}
	// At least the last token is computed: it yields the next token.
	compute := max(1, tokens-shared*s.kv.PageTokens())
	if !q.first {
		q.first, q.cached = true, tokens-compute
	}
	q.running, q.admitted = true, s.nextAdmit
	s.nextAdmit++
	q.prefill = compute
	s.reserve += q.commit - len(q.kv.pages)
	s.running = append(s.running, q)
	t := s.tenants[q.req.Tenant]
	if t == nil {
		t = &tenantUse{}
		s.tenants[q.req.Tenant] = t
	}
	t.running++
	s.countRunning(q.req.Priority, 1)
	if s.p.Reserve == ReserveStep {
		s.charge(q, len(q.kv.pages))
	} else {
		s.charge(q, q.commit)
	}
	return true
}

func (s *Scheduler) charge(q *seq, pages int) {
	q.charged += pages
	s.tenants[q.req.Tenant].pages += pages
}

// release frees a running sequence's pages and tenant charges. The caller
// removes it from s.running.
func (s *Scheduler) release(q *seq) {
	q.lastAt = s.lastToken(q)
	s.kv.freeSeq(q.req.ID, &q.kv)
	t := s.tenants[q.req.Tenant]
	t.running--
	t.pages -= q.charged
	if t.running == 0 {
		delete(s.tenants, q.req.Tenant)
	}
	s.countRunning(q.req.Priority, -1)
	s.reserve -= q.commit - len(q.kv.pages)
	q.running, q.charged, q.prefill, q.plan = false, 0, 0, 0
	q.kv.pages, q.kv.tokens = q.kv.pages[:0], 0
}

// countRunning adds d to the running sequences of priority p.
func (s *Scheduler) countRunning(p, d int) {
	i := slices.IndexFunc(s.priorities, func(c priorityCount) bool { return c.priority == p })
	if i < 0 {
		s.priorities = append(s.priorities, priorityCount{priority: p})
		i = len(s.priorities) - 1
	}
	if s.priorities[i].running += d; s.priorities[i].running == 0 {
		s.priorities = slices.Delete(s.priorities, i, i+1)
	}
}

// preempt evicts a running sequence: it frees its pages and takes it out of
// the batch. It keeps its output so far and re-prefills it with the prompt
// when readmitted; the caller puts it back in the waiting queue.
func (s *Scheduler) preempt(q *seq, res *StepResult) {
	s.release(q)
	s.running = slices.DeleteFunc(s.running, func(x *seq) bool { return x == q })
	q.preemptions++
	res.Preempted = append(res.Preempted, q.req.ID)
}

func (s *Scheduler) finished(q *seq, reason FinishReason, done time.Duration) Finished {
	return Finished{
		ID:               q.req.ID,
		Tenant:           q.req.Tenant,
		Priority:         q.req.Priority,
		Reason:           reason,
		PromptTokens:     q.req.PromptTokens,
		CompletionTokens: q.generated,
		CachedTokens:     q.cached,
		PrefillTokens:    q.prefilled,
		Preemptions:      q.preemptions,
		Arrival:          q.req.Arrival,
		Done:             done,
		FirstToken:       q.firstAt,
		LastToken:        s.lastToken(q),
		TokenTimes:       q.times,
	}
}

// Stats returns a snapshot at now (normally the caller's current time).
func (s *Scheduler) Stats(now time.Duration) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Now:                 now,
		Waiting:             len(s.waiting),
		Running:             len(s.running),
		KVPagesTotal:        s.kv.Total(),
		KVPagesUsed:         s.kv.UsedPages(),
		KVPagesCached:       s.kv.CachedPages(),
		KVPagesReserved:     s.reserved(),
		TokensPerSecond:     s.rec.tokensPerSecond(now),
		TTFT:                PercentilesOf(s.rec.ttft.v),
		TPOT:                PercentilesOf(s.rec.tpot.v),
		Submitted:           s.submitted,
		Completed:           s.completed,
		Cancelled:           s.cancelled,
		PriorityPreemptions: s.priorityPreemptions,
		GrowthPreemptions:   s.growthPreemptions,
		GrowFailures:        s.growFailures,
		PrefixQueries:       s.prefixQueries,
		PrefixHits:          s.prefixHits,
	}
	if st.KVPagesTotal > 0 {
		st.KVUtilization = float64(st.KVPagesUsed) / float64(st.KVPagesTotal)
	}
	return st
}
