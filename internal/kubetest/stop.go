package kubetest

import (
	"fmt"
	"os"
)

// StopShared stops the shared cluster as Main does, for a package whose
// TestMain must also stop another harness (pgtest's server): call it
// after m.Run with the run's exit code.
func StopShared(code int) {
	if shared.c != nil {
		shared.c.Stop()
	}
	if shared.dir != "" {
		if code == 0 {
			os.RemoveAll(shared.dir)
		} else {
			fmt.Fprintf(os.Stderr, "kubetest: the cluster's files and logs are kept in %s\n", shared.dir)
		}
	}
}
