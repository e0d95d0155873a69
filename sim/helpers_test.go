package sim

import (
	"testing"
	"time"

	"modelplane/engine"
	"modelplane/sim/profile"
)

func newScheduler(t testing.TB, p profile.Profile, seed uint64) *engine.Scheduler {
	t.Helper()
	s, err := NewScheduler(Config{Profile: p, Seed: seed})
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

// stepAll steps s until it is idle, from time 0, and returns every result.
func stepAll(t *testing.T, s *engine.Scheduler) []engine.StepResult {
	t.Helper()
	var out []engine.StepResult
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
