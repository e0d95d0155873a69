package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Profile is a model version's "sim" profile: the JSON object stored with the
// version in the registry (registry.VersionSpec.Sim). One type serves every
// task. An LLM profile sets the step-time and KV-cache keys and drives an
// engine.Scheduler in the simulator; a classifier or regressor profile sets the prediction keys,
// which the replica's /predict draws from. A profile may not mix the two
// groups; error_rate belongs to both.
//
// An LLM profile, with the seed documents' figures:
//
//	{"prefill_ms_per_token":0.05, "decode_base_ms":12, "decode_ms_per_seq":0.35,
//	 "kv_mb_per_token":0.8, "usable_gb":13}
//
// A classifier profile:
//
//	{"latency_ms":{"p50":8,"p99":21}, "error_rate":0.001,
//	 "score":{"mean":0.12,"sd":0.18}, "class_balance":{"legit":0.97,"fraud":0.03}}
//
// Megabytes and gigabytes are decimal (10^6 and 10^9 bytes), as GPU memory
// is quoted. Parse fills the defaults documented on each field, so a
// parsed profile reads as what the engine will do.
type Profile struct {
	// PrefillMsPerToken is the GPU time, in milliseconds, to prefill one
	// prompt token. Only computed tokens cost: prompt tokens found in shared
	// or cached prefix pages are free (see engine.Request.PrefixKey and
	// PageHashes), re-prefill after a
	// preemption is not.
	PrefillMsPerToken float64 `json:"prefill_ms_per_token,omitempty"`
	// DecodeBaseMs is the fixed cost, in milliseconds, of one forward pass
	// (one scheduler step), whatever it holds. Required for an LLM.
	DecodeBaseMs float64 `json:"decode_base_ms,omitempty"`
	// DecodeMsPerSeq is the added cost, in milliseconds, of each sequence
	// that decodes a token in the step. A step lasts
	//	decode_base_ms + decode_ms_per_seq × decoding sequences
	//	  + prefill_ms_per_token × prompt tokens computed,
	// so a sequence's time per output token grows with the batch.
	DecodeMsPerSeq float64 `json:"decode_ms_per_seq,omitempty"`
	// KVMBPerToken is the KV-cache memory one token of one sequence holds,
	// in megabytes (10^6 bytes). Required for an LLM.
	KVMBPerToken float64 `json:"kv_mb_per_token,omitempty"`
	// UsableGB is the GPU memory left for the KV cache after weights and
	// activations, in gigabytes (10^9 bytes). Required for an LLM. The page
	// count is floor(usable bytes / (KV bytes per token × page_tokens)); see
	// Pages.
	UsableGB float64 `json:"usable_gb,omitempty"`
	// PageTokens is the number of tokens one KV page holds. Default 16.
	PageTokens int `json:"page_tokens,omitempty"`
	// KVReserve says how far ahead admission reserves pages for the growth of
	// running sequences. Default "final"; see Reserve.
	KVReserve Reserve `json:"kv_reserve,omitempty"`
	// MaxBatch caps the sequences in one step, prefilling and decoding
	// together. Default 256.
	MaxBatch int `json:"max_batch,omitempty"`
	// MaxPrefillTokens caps the prompt tokens computed in one step (chunked
	// prefill): a longer prompt is prefilled over several steps and gets its
	// first token in the last, and admission stops once a step's budget is
	// spent. It bounds how much one arrival can slow everyone's next token.
	// Default 0: no cap, each admitted prompt is prefilled whole in its first
	// step.
	MaxPrefillTokens int `json:"max_prefill_tokens,omitempty"`
	// MaxModelLen is the context window: prompt plus completion tokens. A
	// longer prompt is refused and a completion stops (finish reason
	// "length") at the window. Default 0: only the KV cache limits it.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// TenantBatchShare caps each tenant's running sequences at
	// max(1, floor(share × max_batch)). A tenant at its cap waits: its next
	// request rotates to the back of the queue, nobody is evicted for it.
	// Between 0 and 1; default 1 (no cap).
	TenantBatchShare float64 `json:"tenant_batch_share,omitempty"`
	// TenantKVShare caps the pages each tenant's running sequences may
	// reserve at floor(share × pages), enforced like TenantBatchShare. A
	// request that alone needs more is refused at Submit. Between 0 and 1;
	// default 1 (no cap).
	TenantKVShare float64 `json:"tenant_kv_share,omitempty"`
	// OutputTokens is the completion length distribution of requests that do
	// not fix their own (engine.Request.OutputTokens): the model "stops" after a
	// drawn number of tokens, capped by the request's max_tokens. Absent, a
	// completion runs to its max_tokens (or DefaultMaxTokens).
	OutputTokens *LengthDist `json:"output_tokens,omitempty"`

	// LatencyMs is a classifier's or regressor's request latency, in
	// milliseconds, by two percentiles; the replica draws from the
	// log-normal through them. 0 <= p50 <= p99.
	LatencyMs *Latency `json:"latency_ms,omitempty"`
	// Score is a classifier's score distribution on (0, 1), by mean and
	// standard deviation; the replica draws from the Beta with those moments.
	Score *Moments `json:"score,omitempty"`
	// Value is a regressor's output distribution, normal by mean and standard
	// deviation; without it a regressor uses Score.
	Value *Moments `json:"value,omitempty"`
	// ClassBalance is each class label's share of a classifier's predictions,
	// in the order listed; the last class listed gets the highest scores.
	// Shares are normalised by their sum.
	ClassBalance ClassBalance `json:"class_balance,omitempty"`

	// ErrorRate is the fraction of requests the replica fails on purpose
	// (HTTP 500), for any task. Between 0 and 1; default 0.
	ErrorRate float64 `json:"error_rate,omitempty"`
}

// Reserve says how far ahead admission reserves KV pages for the growth of
// running sequences. Every policy admits a waiting sequence only while the
// pages its prompt needs are free after the reservation, so a running
// sequence can always take the page it needs in the current step; they
// differ in the steps after.
type Reserve string

const (
	// ReserveFinal reserves, for every running sequence, the pages up to its
	// final length: its prompt plus the completion the simulated model will
	// produce. Growth never fails and nothing is ever preempted for memory;
	// the pool packs as tightly as it can without preemption. The simulator
	// knows each completion's length in advance, which a real engine does
	// not: this is the behaviour of a real engine whose rare memory
	// preemptions are ignored.
	ReserveFinal Reserve = "final"
	// ReserveMaxTokens reserves up to the prompt plus the request's
	// max_tokens (or the context window, or the final length when neither
	// is set): what a real engine must do to never preempt. It holds fewer
	// sequences when completions stop early.
	ReserveMaxTokens Reserve = "max_tokens"
	// ReserveStep reserves only the pages running sequences take in the
	// current step: the seed design's rule. It admits the most, but when the
	// pool is full a later step cannot give every growing sequence its page,
	// and the scheduler then preempts the lowest-priority, most recently
	// admitted sequence (it re-prefills later). Such preemptions are counted
	// apart from priority preemptions. The tenant page cap applies to pages
	// held, so growth may take a tenant past it until its sequences finish.
	ReserveStep Reserve = "step"
)

// Latency is a latency distribution given by two percentiles, in
// milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Moments is a distribution given by its mean and standard deviation.
type Moments struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
}

// ClassShare is one class label and its share of predictions.
type ClassShare struct {
	Label string
	Share float64
}

// ClassBalance lists class shares in the order the JSON object gives them;
// the order matters (see Profile.ClassBalance), which a Go map would lose.
type ClassBalance []ClassShare

// LengthDist is a distribution of token counts: log-normal with the given
// mean and standard deviation (sd 0 gives the mean every time), rounded,
// at least 1 and at most max when max is set.
type LengthDist struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd,omitempty"`
	Max  int     `json:"max,omitempty"`
}

// Defaults of an LLM profile's optional keys, and of a request's completion
// length when nothing else gives one.
const (
	DefaultPageTokens = 16
	DefaultMaxBatch   = 256
	DefaultMaxTokens  = 256
)

// Limits keep a profile's numbers within what one simulated GPU can hold, so
// a bad profile is refused instead of exhausting the host's memory.
const (
	maxPages      = 1 << 22
	maxPageTokens = 4096
	maxCount      = 1 << 24 // max_batch, token counts and lengths
	maxMagnitude  = 1e9     // any millisecond, megabyte or gigabyte figure
)

// ErrInvalid is wrapped by every error of Parse and
// Profile.Validate.
var ErrInvalid = errors.New("invalid sim profile")

// Parse reads a profile from JSON, fills the defaults and validates
// it. Unknown keys are refused, so a misspelt key fails loudly instead of
// silently taking a default. Empty input or null is the empty profile.
func Parse(data []byte) (Profile, error) {
	var p Profile
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Profile{}, fmt.Errorf("%w: data after the profile object", ErrInvalid)
	}
	// encoding/json matches field names ignoring case, so a misspelt
	// "Decode_Base_MS" would pass DisallowUnknownFields: check exact names.
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := exactKeys("", raw, reflect.TypeFor[Profile]()); err != nil {
		return Profile{}, err
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// IsLLM reports whether the profile describes an LLM: it sets any of the
// step-time or KV-cache keys.
func (p Profile) IsLLM() bool {
	return p.PrefillMsPerToken != 0 || p.DecodeBaseMs != 0 || p.DecodeMsPerSeq != 0 ||
		p.KVMBPerToken != 0 || p.UsableGB != 0 || p.PageTokens != 0 || p.KVReserve != "" ||
		p.MaxBatch != 0 || p.MaxPrefillTokens != 0 || p.MaxModelLen != 0 ||
		p.TenantBatchShare != 0 || p.TenantKVShare != 0 || p.OutputTokens != nil
}

// isPredictor reports whether the profile sets any classifier or regressor
// key.
func (p Profile) isPredictor() bool {
	return p.LatencyMs != nil || p.Score != nil || p.Value != nil || p.ClassBalance != nil
}

// WithDefaults returns the profile with the documented defaults filled in
// for an LLM profile. Other profiles are returned unchanged.
func (p Profile) WithDefaults() Profile {
	if !p.IsLLM() {
		return p
	}
	if p.PageTokens == 0 {
		p.PageTokens = DefaultPageTokens
	}
	if p.KVReserve == "" {
		p.KVReserve = ReserveFinal
	}
	if p.MaxBatch == 0 {
		p.MaxBatch = DefaultMaxBatch
	}
	if p.TenantBatchShare == 0 {
		p.TenantBatchShare = 1
	}
	if p.TenantKVShare == 0 {
		p.TenantKVShare = 1
	}
	return p
}

// Validate checks a profile whose defaults are filled (see WithDefaults) and
// names the first bad key.
func (p Profile) Validate() error {
	bad := func(key, want string) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, key, want)
	}
	if !finite(p.ErrorRate) || p.ErrorRate < 0 || p.ErrorRate > 1 {
		return bad("error_rate", "want a share between 0 and 1")
	}
	if p.IsLLM() && p.isPredictor() {
		return fmt.Errorf("%w: mixes LLM keys with latency_ms, score, value or class_balance", ErrInvalid)
	}
	if p.isPredictor() {
		return p.validatePredictor(bad)
	}
	if !p.IsLLM() {
		return nil
	}
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"prefill_ms_per_token", p.PrefillMsPerToken},
		{"decode_base_ms", p.DecodeBaseMs},
		{"decode_ms_per_seq", p.DecodeMsPerSeq},
		{"kv_mb_per_token", p.KVMBPerToken},
		{"usable_gb", p.UsableGB},
	} {
		if !finite(f.v) || f.v < 0 || f.v > maxMagnitude {
			return bad(f.key, "want a number between 0 and 1e9")
		}
	}
	switch {
	case p.DecodeBaseMs <= 0:
		return bad("decode_base_ms", "want more than 0: every step takes time")
	case p.KVMBPerToken*1e6 < 1:
		return bad("kv_mb_per_token", "want at least 0.000001 (one byte)")
	case p.UsableGB <= 0:
		return bad("usable_gb", "want more than 0")
	case p.PageTokens < 1 || p.PageTokens > maxPageTokens:
		return bad("page_tokens", fmt.Sprintf("want 1 to %d", maxPageTokens))
	case p.KVReserve != ReserveFinal && p.KVReserve != ReserveMaxTokens && p.KVReserve != ReserveStep:
		return bad("kv_reserve", `want "final", "max_tokens" or "step"`)
	case p.MaxBatch < 1 || p.MaxBatch > maxCount:
		return bad("max_batch", fmt.Sprintf("want 1 to %d", maxCount))
	case p.MaxPrefillTokens < 0 || p.MaxPrefillTokens > maxCount:
		return bad("max_prefill_tokens", fmt.Sprintf("want 0 (no cap) to %d", maxCount))
	case p.MaxModelLen < 0 || p.MaxModelLen > maxCount:
		return bad("max_model_len", fmt.Sprintf("want 0 (no limit) to %d", maxCount))
	case !finite(p.TenantBatchShare) || p.TenantBatchShare <= 0 || p.TenantBatchShare > 1:
		return bad("tenant_batch_share", "want a share above 0, at most 1")
	case !finite(p.TenantKVShare) || p.TenantKVShare <= 0 || p.TenantKVShare > 1:
		return bad("tenant_kv_share", "want a share above 0, at most 1")
	}
	if o := p.OutputTokens; o != nil {
		if !finite(o.Mean, o.SD) || o.Mean < 1 || o.Mean > maxCount || o.SD < 0 || o.SD > maxCount {
			return bad("output_tokens", fmt.Sprintf("want 1 <= mean <= %d and 0 <= sd <= %[1]d", maxCount))
		}
		if o.Max < 0 || o.Max > maxCount {
			return bad("output_tokens.max", fmt.Sprintf("want 0 (no cap) to %d", maxCount))
		}
	}
	pages := p.Pages()
	if pages < 1 {
		return bad("usable_gb", fmt.Sprintf("holds no page of %d tokens at %g MB per token", p.PageTokens, p.KVMBPerToken))
	}
	if pages > maxPages {
		return bad("usable_gb", fmt.Sprintf("gives %d pages, more than the limit of %d", pages, maxPages))
	}
	return nil
}

func (p Profile) validatePredictor(bad func(key, want string) error) error {
	if l := p.LatencyMs; l != nil {
		if !finite(l.P50, l.P99) || l.P50 < 0 || l.P99 < l.P50 || l.P99 > maxMagnitude {
			return bad("latency_ms", "want 0 <= p50 <= p99 <= 1e9")
		}
	}
	for _, m := range []struct {
		key string
		v   *Moments
	}{{"score", p.Score}, {"value", p.Value}} {
		if m.v != nil && (!finite(m.v.Mean, m.v.SD) || m.v.SD < 0) {
			return bad(m.key, "want a finite mean and sd >= 0")
		}
	}
	if p.ClassBalance != nil {
		var sum float64
		seen := make(map[string]bool, len(p.ClassBalance))
		for _, c := range p.ClassBalance {
			if c.Label == "" {
				// A prediction without a label reads as a regressor's.
				return bad("class_balance", "want non-empty class labels")
			}
			if !finite(c.Share) || c.Share < 0 {
				return bad("class_balance", fmt.Sprintf("class %q: want a share >= 0", c.Label))
			}
			if seen[c.Label] {
				return bad("class_balance", fmt.Sprintf("class %q listed twice", c.Label))
			}
			seen[c.Label] = true
			sum += c.Share
		}
		if sum <= 0 || math.IsInf(sum, 0) {
			return bad("class_balance", "want shares that add up to more than 0")
		}
	}
	return nil
}

// KVBytesPerToken is kv_mb_per_token in bytes, rounded to the byte.
func (p Profile) KVBytesPerToken() int64 {
	return int64(math.Round(p.KVMBPerToken * 1e6))
}

// PageBytes is the memory of one KV page: KV bytes per token × page_tokens.
// With the seed documents' 0.8 MB per token and 16-token pages it is
// 12,800,000 bytes.
func (p Profile) PageBytes() int64 {
	return p.KVBytesPerToken() * int64(p.pageTokens())
}

// Pages is the number of KV pages in usable_gb:
// floor(usable bytes / page bytes). The arithmetic is done in whole bytes,
// so no floating-point rounding moves a page. With the seed documents'
// figures, 13,000,000,000 / 12,800,000 = 1,015.6, so 1,015 pages; the seed
// documents round this to "~1,020".
func (p Profile) Pages() int {
	pb := p.PageBytes()
	if pb <= 0 {
		return 0
	}
	usable := int64(math.Round(p.UsableGB * 1e9))
	return int(usable / pb)
}

// StepTime is the step-time model: how long one fused forward pass of a
// scheduler step lasts,
//
//	decode_base_ms + decode_ms_per_seq × decoding + prefill_ms_per_token × prefillTokens,
//
// rounded to the nanosecond, so TTFT and TPOT come out of the schedule,
// never out of a random number. The simulator hands the profile to the
// engine's scheduler as its cost model (engine.StepTimer).
func (p Profile) StepTime(decoding, prefillTokens int) time.Duration {
	ms := p.DecodeBaseMs + p.DecodeMsPerSeq*float64(decoding) + p.PrefillMsPerToken*float64(prefillTokens)
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

func (p Profile) pageTokens() int {
	if p.PageTokens == 0 {
		return DefaultPageTokens
	}
	return p.PageTokens
}

// Draw returns one token count. Log-normal: with s² = ln(1 + sd²/mean²),
// ln(X) ~ N(ln(mean) - s²/2, s²), whose mean and sd are the given ones.
func (d LengthDist) Draw(r *rand.Rand) int {
	x := d.Mean
	if d.SD > 0 {
		s2 := math.Log1p(d.SD * d.SD / (d.Mean * d.Mean))
		x = math.Exp(math.Log(d.Mean) - s2/2 + math.Sqrt(s2)*r.NormFloat64())
	}
	n := 1
	if x > 1 {
		n = int(math.Min(math.Round(x), maxCount))
	}
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return n
}

// MarshalJSON writes the classes as one JSON object, in order.
func (c ClassBalance) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, s := range c {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(s.Label)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		if !finite(s.Share) {
			return nil, fmt.Errorf("class %q: share %v is not a JSON number", s.Label, s.Share)
		}
		b.WriteString(strconv.FormatFloat(s.Share, 'g', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a JSON object of label to share, keeping the order.
// A label given twice is an error.
func (c *ClassBalance) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*c = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("class_balance: want an object of class label to share")
	}
	out := ClassBalance{}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("class_balance: %w", err)
		}
		label, _ := t.(string) // object keys are strings
		var share float64
		if err := dec.Decode(&share); err != nil {
			return fmt.Errorf("class_balance: class %q: want a number", label)
		}
		if seen[label] {
			return fmt.Errorf("class_balance: class %q listed twice", label)
		}
		seen[label] = true
		out = append(out, ClassShare{Label: label, Share: share})
	}
	*c = out
	return nil
}

func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// exactKeys refuses an object key that is not exactly a JSON field name of
// the struct type t, recursing into struct-typed fields. Types with their
// own key sets (ClassBalance's labels) are not checked here.
func exactKeys(path string, v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	obj, ok := v.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil
	}
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	for k, sub := range obj {
		key := k
		if path != "" {
			key = path + "." + k
		}
		ft, ok := fields[k]
		if !ok {
			return fmt.Errorf("%w: unknown key %q", ErrInvalid, key)
		}
		if err := exactKeys(key, sub, ft); err != nil {
			return err
		}
	}
	return nil
}
