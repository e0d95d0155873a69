package main

import (
	"context"
	"runtime"
	"testing"
)

// TestHelpExitsZero asks every subcommand for its help, as a new user
// does first: the usage is printed as asked, which is no error.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	argvs := [][]string{{"--help"}, {"models", "--help"}, {"versions", "push", "--help"}}
	if runtime.GOOS == "linux" { // elsewhere the binary has the client commands only
		argvs = append(argvs, [][]string{{"dev", "--help"}, {"server", "-h"}, {"gateway", "--help"}, {"agent", "--help"},
			{"runtime", "--help"}, {"runtime", "validate", "--help"}, {"migrate", "--help"}, {"nats", "--help"},
			{"sim", "--help"}, {"bench", "--help"}}...)
	}
	for _, argv := range argvs {
		if code := run(context.Background(), argv); code != 0 {
			t.Errorf("modelplane %v exits %d; want 0", argv, code)
		}
	}
	if code := run(context.Background(), []string{"runtime", "--no-such-flag"}); code != 2 {
		t.Errorf("a bad flag exits %d; want 2", code)
	}
}
