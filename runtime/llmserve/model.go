package llmserve

import (
	"cmp"
	"context"
	goruntime "runtime"

	"modelplane/llm"
)

// llmModel adapts package llm's model, with the KV store of the engine's
// pages, to Model.
type llmModel struct {
	m       *llm.Model
	kv      *llm.KV
	eos     []int
	pages   int
	context int
}

func (a *llmModel) Forward(batch []Step) [][]float32 {
	seqs := make([]llm.Seq, len(batch))
	for i, s := range batch {
		seqs[i] = llm.Seq{Tokens: s.Tokens, Pos: s.Pos, Pages: s.Pages}
	}
	return a.m.Forward(a.kv, seqs)
}

func (a *llmModel) Vocab() int   { return a.m.Config().Vocab }
func (a *llmModel) Context() int { return a.context }
func (a *llmModel) EOS() []int   { return a.eos }
func (a *llmModel) Pages() int   { return a.pages }

// DefaultMaxNumSeqs is the batch, in sequences, when the settings name
// none; DefaultMaxQueued the waiting queue's bound.
const (
	DefaultMaxNumSeqs = 16
	DefaultMaxQueued  = 256
)

// DefaultPages is the KV cache of a model with a context window of
// context tokens when none is given: KVPages for DefaultMaxNumSeqs
// sequences.
func DefaultPages(context int) int { return KVPages(context, DefaultMaxNumSeqs) }

// KVPages is the KV cache for seqs sequences of a context window of
// context tokens: a full window for each, between 64 and 4,096 pages (at
// most 65,536 tokens of K/V, which bounds a CPU replica's memory).
func KVPages(context, seqs int) int {
	return min(4096, max(64, max(1, seqs)*((context+PageTokens-1)/PageTokens)))
}

// Settings are the engine's sizes from a GGUF version's serving.llm block
// (registry.ServingLLM, the same JSON; other fields are ignored). Zero
// values are the defaults.
type Settings struct {
	// MaxModelLen caps the context window below the model's own.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// MaxNumSeqs is the batch in sequences (DefaultMaxNumSeqs); the KV
	// cache holds a full window for each (KVPages).
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// MaxQueuedRequests bounds the waiting queue (DefaultMaxQueued):
	// beyond it a request is answered 429.
	MaxQueuedRequests int `json:"max_queued_requests,omitempty"`
}

// Context is the context window the engine serves for a model of
// modelContext tokens.
func (s Settings) Context(modelContext int) int {
	if s.MaxModelLen > 0 && s.MaxModelLen < modelContext {
		return s.MaxModelLen
	}
	return modelContext
}

// Pages is the KV cache in pages for a model of modelContext tokens;
// its memory (llm.KVBytes of Pages×PageTokens positions) is what a
// replica needs beside the weights.
func (s Settings) Pages(modelContext int) int {
	return KVPages(s.Context(modelContext), cmp.Or(s.MaxNumSeqs, DefaultMaxNumSeqs))
}

// Config is the engine's configuration for a model of modelContext
// tokens.
func (s Settings) Config(modelContext int) Config {
	return Config{Pages: s.Pages(modelContext), MaxBatch: cmp.Or(s.MaxNumSeqs, DefaultMaxNumSeqs),
		MaxWaiting: cmp.Or(s.MaxQueuedRequests, DefaultMaxQueued)}
}

// llmTokenizer adapts the model's tokenizer and chat template.
type llmTokenizer struct{ m *llm.Model }

func (t llmTokenizer) Encode(text string) []int   { return t.m.Tokenizer().Encode(text, false) }
func (t llmTokenizer) Decode(tokens []int) string { return t.m.Tokenizer().Decode(tokens) }
func (t llmTokenizer) TokenBytes(id int, first bool) []byte {
	return t.m.Tokenizer().TokenBytes(id, first)
}

func (t llmTokenizer) Prompt(ctx context.Context, text string, limit int) ([]int, error) {
	return t.m.Tokenizer().EncodeSegments(ctx, []llm.Segment{{Text: text}}, limit)
}

func (t llmTokenizer) Chat(ctx context.Context, msgs []Message, limit int) ([]int, []string, error) {
	lm := make([]llm.Message, len(msgs))
	for i, m := range msgs {
		lm[i] = llm.Message{Role: m.Role, Content: m.Content}
	}
	segs, stops := t.m.ChatSegments(lm)
	prompt, err := t.m.Tokenizer().EncodeSegments(ctx, segs, limit)
	return prompt, stops, err
}

// LoadModel reads a GGUF file and gives it a KV store of pages pages
// (DefaultPages when 0).
func LoadModel(path string, pages int) (Model, Tokenizer, error) {
	m, err := llm.Load(path)
	if err != nil {
		return nil, nil, err
	}
	return adapt(m, pages, m.Config().Context)
}

// Open starts an engine on a GGUF file sized by s: its context window,
// batch, KV cache and queue bound. Its forward pass splits over the cores
// the process may run on (GOMAXPROCS follows the affinity the agent gives
// the replica: its cpu_cores).
func Open(path string, s Settings) (*Engine, Tokenizer, error) {
	m, err := llm.Load(path)
	if err != nil {
		return nil, nil, err
	}
	m.SetThreads(goruntime.GOMAXPROCS(0))
	ctx := m.Config().Context
	cfg := s.Config(ctx)
	a, tok, err := adapt(m, cfg.Pages, s.Context(ctx))
	if err != nil {
		return nil, nil, err
	}
	e, err := New(a, cfg)
	if err != nil {
		return nil, nil, err
	}
	return e, tok, nil
}

func adapt(m *llm.Model, pages, context int) (Model, Tokenizer, error) {
	if pages <= 0 {
		pages = DefaultPages(context)
	}
	a := &llmModel{pages: pages, context: context, m: m, kv: llm.NewKV(m.Config(), pages, PageTokens)}
	tok := m.Tokenizer()
	if tok.EOS >= 0 {
		a.eos = append(a.eos, tok.EOS)
	}
	// The chat format's end-of-turn markers end a completion too.
	_, stops := m.Chat(nil)
	for _, s := range stops {
		if id, ok := tok.ID(s); ok && id != tok.EOS {
			a.eos = append(a.eos, id)
		}
	}
	return a, llmTokenizer{m}, nil
}

// Load is LoadModel and New: an engine on a GGUF file with cfg.Pages pages
// (DefaultPages when 0).
func Load(path string, cfg Config) (*Engine, Tokenizer, error) {
	m, tok, err := LoadModel(path, cfg.Pages)
	if err != nil {
		return nil, nil, err
	}
	e, err := New(m, cfg)
	if err != nil {
		return nil, nil, err
	}
	return e, tok, nil
}
