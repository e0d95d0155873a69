package replica_test

import (
	"testing"

	"modelplane/sim/replica"
	"modelplane/sim/replica/enginetest"
)

// The test double the replica's tests use keeps the Engine contract, so what
// they prove holds for any engine that passes the same check.
func TestTestEngineKeepsContract(t *testing.T) {
	t.Parallel()
	enginetest.Check(t, replica.NewTestEngine)
}
