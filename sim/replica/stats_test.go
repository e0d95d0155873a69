package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
)

// newClock is a replica clock moved by hand, at start.
func newClock(t *testing.T, start time.Time) *quartz.Mock {
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	clk.Set(start)
	return clk
}

// timerSet waits until the replica has set a timer on clk.
func timerSet(t *testing.T, clk *quartz.Mock) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := clk.Peek(); return ok }, "the replica set no timer")
}

// autoAdvance moves clk to the next deadline each time the replica sets a
// timer, until the test's cleanups have run (call it before starting the
// replica, whose Stop may wait on the clock): time passes only when the
// replica waits for it, so model-time measurements come out exact.
func autoAdvance(t *testing.T, clk *quartz.Mock) {
	trap := clk.Trap().NewTimer("replica")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			call, err := trap.Wait(ctx)
			if err != nil {
				return
			}
			// Released, the call returns at once, its timer set. (Not
			// bounded by ctx: a release cut short would count as never
			// made when the trap closes.)
			if call.Release(context.Background()) != nil {
				return
			}
			if _, ok := clk.Peek(); ok {
				_, w := clk.AdvanceNext()
				if w.Wait(ctx) != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; trap.Close() })
}

func TestRecorderWindow(t *testing.T) {
	t.Parallel()
	clock := newClock(t, time.Unix(1_000_000, 0))
	r := newRecorder(clock, 10*time.Second)
	r.start()

	// Old samples: slow.
	for range 50 {
		r.ttftSample(100 * time.Millisecond)
		r.tpotSample(40 * time.Millisecond)
	}
	r.tokens(clock.Now(), 1000)
	clock.Advance(11 * time.Second)
	// Recent samples: 1..100 ms.
	for i := 1; i <= 100; i++ {
		r.ttftSample(time.Duration(i) * time.Millisecond)
		r.tpotSample(20 * time.Millisecond)
	}
	for range 5 {
		r.tokens(clock.Now(), 100)
		clock.Advance(time.Second)
	}
	r.request(200)
	r.request(500)
	r.request(400)
	r.cancelled()
	r.engine(EngineStats{Waiting: 3, Running: 7, KVPagesUsed: 255, KVPagesTotal: 1020})

	r.prompt(700)
	got := r.snapshot()
	if got.Tokens == nil || *got.Tokens != 1500 || got.PromptTokens == nil || *got.PromptTokens != 700 {
		t.Errorf("counters: tokens %v, prompt tokens %v; want 1500 and 700 since start", got.Tokens, got.PromptTokens)
	}
	got.Tokens, got.PromptTokens = nil, nil
	want := Stats{
		QueueDepth: 3, BatchSize: 7, KVPagesUsed: 255, KVPagesTotal: 1020, KVUtilization: 0.25,
		TokensPerSecond: 50, // 500 tokens in the last 10 s; the 1000 before it dropped out
		TTFTP50Ms:       50, TTFTP99Ms: 99, TPOTP50Ms: 20, TPOTP99Ms: 20,
		Requests: 3, Errors: 1, Cancelled: 1, WindowSeconds: 10,
	}
	if got != want {
		t.Errorf("snapshot =\n%+v; want\n%+v", got, want)
	}

	clock.Advance(time.Minute)
	if got := r.snapshot(); got.TTFTP99Ms != 0 || got.TokensPerSecond != 0 {
		t.Errorf("after a quiet minute: ttft p99 %v, tokens/s %v; want 0 and 0", got.TTFTP99Ms, got.TokensPerSecond)
	}
}

func TestRecorderEarlyRate(t *testing.T) {
	t.Parallel()
	clock := newClock(t, time.Unix(2_000_000, 0))
	r := newRecorder(clock, time.Minute)
	r.start()
	r.tokens(clock.Now(), 30)
	clock.Advance(2 * time.Second)
	r.tokens(clock.Now(), 30)
	// Two seconds in, the rate is over those two seconds, not the minute.
	if got := r.snapshot().TokensPerSecond; got != 30 {
		t.Errorf("tokens/s two seconds after start = %v; want 30", got)
	}
}

func TestRingKeepsLatest(t *testing.T) {
	t.Parallel()
	var g ring
	at := time.Unix(0, 0)
	for i := range samplesKept + 100 {
		g.add(at.Add(time.Duration(i)*time.Millisecond), float64(i))
	}
	p50, p99 := g.percentiles(at.Add(-time.Hour))
	if len(g.v) != samplesKept {
		t.Errorf("kept %d samples; want %d", len(g.v), samplesKept)
	}
	if lo := float64(100); p50 < lo+float64(samplesKept)/2-2 || p99 < lo+float64(samplesKept)*0.99-2 {
		t.Errorf("p50 %v p99 %v; want the percentiles of the latest %d samples", p50, p99, samplesKept)
	}
}

// A client that stops reading fills its token buffer; the loop cuts the
// generation and frees its pages instead of waiting for it.
func TestDeliverCutsStalledClient(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	s, err := New(Config{ReplicaID: "r1", Version: "v42", Task: TaskLLM, Engine: eng, Profile: json.RawMessage(llmProfile), StreamBuffer: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{seq: Sequence{ID: "slow", PromptTokens: 10, OutputTokens: 100}, arrived: time.Now(), tokens: make(chan struct{}, 2)}
	active := map[string]*generation{}
	s.apply(active, []op{{submit: g}})
	var delivered int
	for range 3 {
		res := eng.Step()
		s.deliver(active, res.Tokens)
	}
	for range g.tokens {
		delivered++
	}
	if g.err != errStalled || delivered != 2 {
		t.Errorf("err %v after %d buffered tokens; want errStalled after 2", g.err, delivered)
	}
	if ok, used := eng.sawCancel("slow"); !ok || used != 0 {
		t.Errorf("engine cancel seen %v, pages used %d; want true and 0", ok, used)
	}
	if len(active) != 0 {
		t.Errorf("%d generations still active; want 0", len(active))
	}
	if got := s.Stats().Cancelled; got != 1 {
		t.Errorf("cancelled = %d; want 1", got)
	}
}

// With a clock that moves only by the modelled step durations, TTFT, TPOT
// and the token rate come out exactly as the engine's step times say.
func TestChatTimingInModelTime(t *testing.T) {
	t.Parallel()
	clock := newClock(t, time.Unix(3_000_000, 0))
	eng := newTestEngine() // prefill 10µs a token, decode 1ms + 50µs a sequence
	autoAdvance(t, clock)  // first, so that it still runs while the replica stops
	s, base := startLLM(t, eng, func(c *Config) { c.Clock = clock })
	c := newClient(t)
	const requests, tokens = 4, 21
	for i := range requests { // one at a time: each runs alone in the batch
		code, _, raw := post(t, c, base+"/v1/chat/completions", chatBody(fmt.Sprint("q", i), tokens, false)) // 1 prompt token
		if code != http.StatusOK {
			t.Fatalf("status %d %s", code, raw)
		}
	}
	got := s.Stats()
	const (
		ttft = 1.06 // prefill of 1 token + one decode step of a batch of 1
		tpot = 1.05 // decode step of a batch of 1
	)
	checks := []struct {
		name      string
		got, want float64
	}{
		{"ttft p50", got.TTFTP50Ms, ttft},
		{"ttft p99", got.TTFTP99Ms, ttft},
		{"tpot p50", got.TPOTP50Ms, tpot},
		{"tpot p99", got.TPOTP99Ms, tpot},
		// All of it took under a model-time second, so the rate is over 1s.
		{"tokens/s", got.TokensPerSecond, requests * tokens},
	}
	for _, ch := range checks {
		if math.Abs(ch.got-ch.want) > 1e-9 {
			t.Errorf("%s = %v; want %v", ch.name, ch.got, ch.want)
		}
	}
}
