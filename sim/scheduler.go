package sim

import (
	"fmt"

	"modelplane/engine"
	"modelplane/sim/profile"
)

// Config configures a simulated GPU's scheduler.
type Config struct {
	// Profile is the version's sim profile; it must describe an LLM.
	// Defaults are filled in as by profile.Parse.
	Profile profile.Profile
	// Seed makes completion lengths and token ids reproducible.
	Seed uint64
	// Pages, when above 0, is the KV cache's size in pages instead of the
	// profile's Pages().
	Pages int
	// PrefixCaching keeps the computed prefix pages of finished requests
	// cached for later ones (engine.Config.PrefixCaching).
	PrefixCaching bool
	// Lean drops what a virtual-time fleet does not read: ids, every
	// token's time, fresh result slices each step (engine.Config.Lean).
	Lean bool
	// Events, with Lean, is an events buffer schedulers share
	// (engine.Config.Events).
	Events *[]engine.TokenEvent
}

// NewScheduler returns the engine's scheduler for a simulated GPU running
// cfg.Profile: its KV cache of cfg.Profile.Pages() pages, its batch and
// tenant caps, its completion lengths, and the profile's step-time model
// (profile.Profile.StepTime) as the cost of Step. It fails, wrapping
// profile.ErrInvalid, on a profile that is not a valid LLM profile.
func NewScheduler(cfg Config) (*engine.Scheduler, error) {
	ec, err := EngineConfig(cfg.Profile)
	if err != nil {
		return nil, err
	}
	ec.Seed, ec.PrefixCaching, ec.Lean, ec.Events = cfg.Seed, cfg.PrefixCaching, cfg.Lean, cfg.Events
	if cfg.Pages > 0 {
		ec.Pages = cfg.Pages
	}
	return engine.NewScheduler(ec)
}

// EngineConfig is the scheduler configuration a sim profile describes, the
// profile being its step-time model. It fails, wrapping profile.ErrInvalid,
// on a profile that is not a valid LLM profile.
func EngineConfig(p profile.Profile) (engine.Config, error) {
	p = p.WithDefaults()
	if !p.IsLLM() {
		return engine.Config{}, fmt.Errorf("%w: not an LLM profile (no decode_base_ms, kv_mb_per_token or usable_gb)", profile.ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return engine.Config{}, err
	}
	c := engine.Config{
		Pages:            p.Pages(),
		PageTokens:       p.PageTokens,
		Reserve:          engine.Reserve(p.KVReserve),
		MaxBatch:         p.MaxBatch,
		MaxPrefillTokens: p.MaxPrefillTokens,
		MaxModelLen:      p.MaxModelLen,
		TenantBatchShare: p.TenantBatchShare,
		TenantKVShare:    p.TenantKVShare,
		StepTime:         p,
	}
	if p.OutputTokens != nil {
		c.OutputTokens = p.OutputTokens // not a typed nil in the interface
	}
	return c, nil
}
