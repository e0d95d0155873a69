package llmserve

import (
	"modelplane/llm"
)

// llmModel adapts package llm's model, with the KV store of the engine's
// pages, to Model.
type llmModel struct {
	m     *llm.Model
	kv    *llm.KV
	eos   []int
	pages int
}

func (a *llmModel) Forward(batch []Step) [][]float32 {
	seqs := make([]llm.Seq, len(batch))
	for i, s := range batch {
		seqs[i] = llm.Seq{Tokens: s.Tokens, Pos: s.Pos, Pages: s.Pages}
	}
	return a.m.Forward(a.kv, seqs)
}

func (a *llmModel) Vocab() int   { return a.m.Config().Vocab }
func (a *llmModel) Context() int { return a.m.Config().Context }
func (a *llmModel) EOS() []int   { return a.eos }
func (a *llmModel) Pages() int   { return a.pages }

// DefaultPages is the KV cache of a model with a context window of
// context tokens when none is given: sixteen full windows, between 64 and
// 4,096 pages.
func DefaultPages(context int) int { return min(4096, max(64, 16*context/PageTokens)) }

// llmTokenizer adapts the model's tokenizer and chat template.
type llmTokenizer struct{ m *llm.Model }

func (t llmTokenizer) Encode(text string) []int   { return t.m.Tokenizer().Encode(text, false) }
func (t llmTokenizer) Decode(tokens []int) string { return t.m.Tokenizer().Decode(tokens) }

func (t llmTokenizer) Chat(msgs []Message) ([]int, []string) {
	lm := make([]llm.Message, len(msgs))
	for i, m := range msgs {
		lm[i] = llm.Message{Role: m.Role, Content: m.Content}
	}
	text, stops := t.m.Chat(lm)
	return t.m.Tokenizer().Encode(text, true), stops
}

// LoadModel reads a GGUF file and gives it a KV store of pages pages
// (DefaultPages when 0).
func LoadModel(path string, pages int) (Model, Tokenizer, error) {
	m, err := llm.Load(path)
	if err != nil {
		return nil, nil, err
	}
	if pages <= 0 {
		pages = DefaultPages(m.Config().Context)
	}
	a := &llmModel{pages: pages, m: m, kv: llm.NewKV(m.Config(), pages, PageTokens)}
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
