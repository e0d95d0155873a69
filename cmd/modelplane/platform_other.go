//go:build !linux

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
)

// platform answers a command that is not the client's. The platform's own
// commands need Linux (cgroups and CPU affinity for replicas, child
// processes that die with their parent), so a build for another system
// has the client commands only: engineers run those from their laptops.
func platform(_ context.Context, cmd string, _ []string) int {
	switch cmd {
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "modelplane %s: not a client command; the platform's commands run on Linux, and this build for %s has the client commands only\n\n%s\n", cmd, runtime.GOOS, usage)
	return 2
}
