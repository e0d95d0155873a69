package replica_test

import (
	"testing"

	"modelplane/sim"
	"modelplane/sim/profile"
	"modelplane/sim/replica"
	"modelplane/sim/replica/enginetest"
)

// The adapter over the real scheduler keeps the engine contract.
func TestSchedulerEngineKeepsContract(t *testing.T) {
	t.Parallel()
	enginetest.Check(t, func() replica.Engine {
		p, err := profile.Parse([]byte(`{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":1,"max_batch":4}`))
		if err != nil {
			t.Fatal(err)
		}
		s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return replica.NewSchedulerEngine(s)
	})
}
