package replica

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"modelplane/tracing"
)

// Why a generation ended without its last token. The loop sets one on the
// generation before it closes the token channel.
var (
	errRejected  = errors.New("rejected by the engine")
	errStalled   = errors.New("client too slow: generation cut")
	errShutdown  = errors.New("replica is shutting down")
	errCancelled = errors.New("cancelled by the client")
)

// generation is one chat request between its handler and the step loop.
type generation struct {
	seq     Sequence
	arrived time.Time
	// tokens gets one value per generated token and is closed when the
	// generation ends; it is bounded by Config.StreamBuffer.
	tokens chan struct{}
	// err is written by the loop before it closes tokens and read by the
	// handler after; nil means every token was delivered.
	err error

	// Owned by the loop goroutine until it closes tokens.
	sent    int
	firstAt time.Time
	// trace, when set, is where the loop records when its tokens came
	// (trace.go).
	trace *tracing.Generation
}

// inbox hands submits and cancels from handlers to the loop without ever
// blocking a handler on a step.
type inbox struct {
	mu      sync.Mutex
	ops     []op
	pending int // submits not yet taken by the loop
	wake    chan struct{}
}

type op struct {
	submit *generation
	cancel string
}

func (b *inbox) push(o op) {
	b.mu.Lock()
	b.ops = append(b.ops, o)
	if o.submit != nil {
		b.pending++
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []op {
	b.mu.Lock()
	defer b.mu.Unlock()
	ops := b.ops
	b.ops = nil
	b.pending = 0
	return ops
}

func (b *inbox) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending
}

// run is the step loop, the only goroutine that calls the Engine. Each turn
// it takes new submits and cancels, runs one Step, sleeps the step's
// modelled duration in wall-clock time (still taking cancels, so a cancelled
// sequence's pages are freed at once), then hands each token to its request.
func (s *Server) run() {
	defer s.wg.Done()
	eng := s.cfg.Engine
	active := map[string]*generation{}
	for {
		s.apply(active, s.inbox.take())
		if len(active) == 0 {
			if !s.idle() {
				s.abort(active)
				return
			}
			continue
		}
		at := s.clock.Now()
		res := eng.Step()
		s.stats.engine(eng.Stats())
		for _, id := range res.Admitted {
			if g := active[id]; g != nil && g.trace != nil { // an engine lists a sequence once (enginetest)
				g.trace.Admitted = at
			}
		}
		if res.Duration == 0 && len(res.Tokens) == 0 {
			if !s.idle() {
				s.abort(active)
				return
			}
			continue
		}
		if res.Duration > 0 {
			done := s.clock.NewTimer(res.Duration, "replica", "step")
		sleep:
			for {
				select {
				case <-done.C:
					break sleep
				case <-s.inbox.wake:
					s.apply(active, s.inbox.take())
				case <-s.quit:
					done.Stop()
					s.abort(active)
					return
				}
			}
		}
		s.deliver(active, res.Tokens)
		s.stats.engine(eng.Stats())
	}
}

// idle waits for work; false means the loop must end.
func (s *Server) idle() bool {
	select {
	case <-s.inbox.wake:
		return true
	case <-s.quit:
		return false
	}
}

// apply submits and cancels in the order handlers sent them.
func (s *Server) apply(active map[string]*generation, ops []op) {
	eng := s.cfg.Engine
	for _, o := range ops {
		if g := o.submit; g != nil {
			if err := eng.Submit(g.seq); err != nil {
				g.err = fmt.Errorf("%w: %w", errRejected, err)
				close(g.tokens)
				continue
			}
			active[g.seq.ID] = g
			s.stats.prompt(g.seq.PromptTokens)
			continue
		}
		if g, ok := active[o.cancel]; ok {
			eng.Cancel(o.cancel)
			delete(active, o.cancel)
			g.err = errCancelled
			close(g.tokens)
			s.stats.cancelled()
		}
	}
	if len(ops) > 0 {
		s.stats.engine(eng.Stats())
	}
}

// deliver hands each token to its request. A request whose buffer is full
// has a client that stopped reading: its generation is cut and cancelled
// rather than let it hold the loop or its pages.
func (s *Server) deliver(active map[string]*generation, tokens []Token) {
	now := s.clock.Now()
	n := 0
	// Finished generations end after their tokens are counted: ending
	// answers the client, who may read the statistics at once.
	var finished []*generation
	for _, t := range tokens {
		g, ok := active[t.ID]
		if !ok {
			continue // cancelled during the step
		}
		select {
		case g.tokens <- struct{}{}:
		default:
			s.cfg.Engine.Cancel(t.ID)
			s.end(active, g, errStalled)
			s.stats.cancelled()
			continue
		}
		n++
		g.sent++
		if g.trace != nil {
			g.trace.Token(now)
		}
		if g.sent == 1 {
			g.firstAt = now
			s.stats.ttftSample(now.Sub(g.arrived))
		}
		if t.Last || g.sent >= g.seq.OutputTokens {
			if !t.Last {
				// An engine that overruns would keep the pages; free them.
				s.cfg.Engine.Cancel(t.ID)
			}
			if g.sent > 1 {
				s.stats.tpotSample(now.Sub(g.firstAt) / time.Duration(g.sent-1))
			}
			finished = append(finished, g)
		}
	}
	s.stats.tokens(now, n)
	for _, g := range finished {
		s.end(active, g, nil)
	}
}

func (s *Server) end(active map[string]*generation, g *generation, err error) {
	delete(active, g.seq.ID)
	g.err = err
	close(g.tokens)
}

// abort ends every open generation when the replica stops.
func (s *Server) abort(active map[string]*generation) {
	for _, o := range s.inbox.take() {
		if o.submit != nil {
			o.submit.err = errShutdown
			close(o.submit.tokens)
		}
	}
	for id, g := range active {
		s.cfg.Engine.Cancel(id)
		s.end(active, g, errShutdown)
	}
	s.stats.engine(s.cfg.Engine.Stats())
}
