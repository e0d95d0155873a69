package main

import (
	"context"
	"testing"
)

// TestHelpExitsZero asks every subcommand for its help, as a new user
// does first: the usage is printed as asked, which is no error.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{
		{"--help"}, {"dev", "--help"}, {"server", "-h"}, {"gateway", "--help"}, {"agent", "--help"},
		{"runtime", "--help"}, {"runtime", "validate", "--help"}, {"migrate", "--help"}, {"nats", "--help"},
		{"sim", "--help"}, {"bench", "--help"}, {"models", "--help"}, {"versions", "push", "--help"},
	} {
		if code := run(context.Background(), argv); code != 0 {
			t.Errorf("modelplane %v exits %d; want 0", argv, code)
		}
	}
	if code := run(context.Background(), []string{"runtime", "--no-such-flag"}); code != 2 {
		t.Errorf("a bad flag exits %d; want 2", code)
	}
}
