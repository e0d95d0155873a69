package rollout_test

import (
	"strings"
	"testing"
)

// TestStartingCandidateGetsNoWeight: a candidate whose replicas are placed
// but whose files are still downloading (starting), or failed their digest,
// gets no traffic and no mirrored copy; the rollout says what it waits for.
// With the agent's guarantee that a replica is ready only once every file
// of its version is fetched and verified (agent's
// TestReplicaIsNotReadyBeforeItsFilesAreVerified), weight never moves
// before the candidate's files are cached and verified on its nodes.
func TestStartingCandidateGetsNoWeight(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.canary(t)
	f.pass(t)
	set := func(state, reason string) {
		t.Helper()
		_, err := f.pool.Exec(t.Context(), `INSERT INTO nodes (name, lease_seconds, last_heartbeat) VALUES ('n1', 15, now()) ON CONFLICT DO NOTHING`)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.pool.Exec(t.Context(), `INSERT INTO replicas (name, team_id, endpoint_id, version_id, node_id, gpu_type, profile, state, reason)
			SELECT 'cand-1', e.team_id, e.id, v.id, (SELECT id FROM nodes WHERE name = 'n1'), 'H100-80GB', 'full', $1, $2
			FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id WHERE e.name = 'fraud-scoring' AND v.name = 'v2'
			ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, reason = EXCLUDED.reason`, state, reason)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ state, reason string }{
		{"starting", "preparing model files"},
		{"failed", "prepare model files: fetch model.onnx: sha256 mismatch"},
		{"placed", ""},
	} {
		set(c.state, c.reason)
		f.pass(t)
		if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 100, "v2": 0}) {
			t.Fatalf("candidate %s: weights %v, want v2 at 0", c.state, w)
		}
		if got := f.get(t, r.ID); !strings.Contains(got.Reason, "waiting for 1 ready replicas of v2 (0 ready, 1 placed)") {
			t.Errorf("candidate %s: rollout reason %q, want it to say it waits for a ready replica", c.state, got.Reason)
		}
	}
	set("ready", "")
	f.pass(t)
	if w := f.weights(t, "fraud-scoring"); !equal(w, map[string]float64{"v1": 90, "v2": 10}) {
		t.Fatalf("candidate ready: weights %v, want the first step's 90/10", w)
	}
}
