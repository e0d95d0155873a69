package fleet_test

import (
	"os"
	"testing"

	"modelplane/internal/kubetest"
	"modelplane/internal/pgtest"
)

// TestMain stops the shared PostgreSQL server and, when the driver
// conformance suite started one, the shared Kubernetes control plane.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	kubetest.StopShared(code)
	os.Exit(code)
}
