package cluster

import (
	"context"

	"modelplane/agent"
)

// PolicyName is versionName for the tests: the name of a pool's
// NetworkPolicy of a version.
func PolicyName(pool, endpoint, version string) string { return versionName(pool, endpoint, version) }

// Resync writes r's objects as the resync loop does, for a test that
// plays a loop whose list of replicas was taken before r stopped.
func Resync(ctx context.Context, d *Driver, r agent.Replica) error {
	return d.syncReplica(ctx, r.(*replica), false)
}
