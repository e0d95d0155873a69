package engine

import (
	"testing"

	"modelplane/sim/profile"
)

// profileConfig is the scheduler configuration the simulator builds from a
// sim profile (sim.NewScheduler), so the moved scheduler tests keep their
// figures: the seed documents' step times and GPU memory. It cannot call
// sim, which imports this package.
func profileConfig(t testing.TB, p profile.Profile, seed uint64) Config {
	t.Helper()
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("profile: %v", err)
	}
	c := Config{
		Pages: p.Pages(), PageTokens: p.PageTokens, Reserve: Reserve(p.KVReserve), MaxBatch: p.MaxBatch,
		MaxPrefillTokens: p.MaxPrefillTokens, MaxModelLen: p.MaxModelLen,
		TenantBatchShare: p.TenantBatchShare, TenantKVShare: p.TenantKVShare,
		StepTime: p, Seed: seed,
	}
	if p.OutputTokens != nil {
		c.OutputTokens = p.OutputTokens
	}
	return c
}
