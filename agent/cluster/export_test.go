package cluster

// PolicyName is versionName for the tests: the name of a pool's
// NetworkPolicy of a version.
func PolicyName(pool, endpoint, version string) string { return versionName(pool, endpoint, version) }
