package replica_test

import (
	"slices"
	"testing"

	"modelplane/sim"
	"modelplane/sim/profile"
	"modelplane/sim/replica"
	"modelplane/sim/replica/enginetest"
)

// The adapter over the real scheduler keeps the engine contract.
func TestSchedulerEngineKeepsContract(t *testing.T) {
	t.Parallel()
	enginetest.Check(t, func() replica.Engine { return schedulerEngine(t) })
}

func schedulerEngine(t *testing.T) replica.Engine {
	t.Helper()
	p, err := profile.Parse([]byte(`{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":1,"max_batch":4}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return replica.NewSchedulerEngine(s)
}

// The adapter passes the scheduler's first admissions on (the contract
// lets an engine leave them out, so it alone would not notice their
// loss): a trace's queue wait ends there.
func TestSchedulerEngineReportsAdmissions(t *testing.T) {
	t.Parallel()
	e := schedulerEngine(t)
	for _, id := range []string{"a", "b"} {
		if err := e.Submit(replica.Sequence{ID: id, PromptTokens: 10, OutputTokens: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.Step().Admitted; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("first step admitted %v; want a and b", got)
	}
	if got := e.Step().Admitted; len(got) != 0 {
		t.Errorf("second step admitted %v; want none again", got)
	}
}
