package app

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevDropsTheSharedAgentToken is issue 25 finding 12 for `make run`:
// a shared MP_AGENT_TOKEN left in the environment of whoever runs dev
// reached dev and every child it starts. dev's nodes enroll and fetch with
// their own tokens and dev's control plane accepts no shared one, so dev
// warns and removes it: a child process started afterwards does not
// inherit it. (The Makefile's run target also starts dev without it.)
func TestDevDropsTheSharedAgentToken(t *testing.T) {
	const token = "shared-agent-token-0123456789"
	t.Setenv(sharedAgentTokenEnv, token)
	var buf bytes.Buffer
	dropSharedAgentToken(slog.New(slog.NewTextHandler(&buf, nil)))
	if v, ok := os.LookupEnv(sharedAgentTokenEnv); ok {
		t.Errorf("%s still set after dev started: %q", sharedAgentTokenEnv, v)
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), sharedAgentTokenEnv) || strings.Contains(string(out), token) {
		t.Errorf("a child of dev inherits %s", sharedAgentTokenEnv)
	}
	logged := buf.String()
	if !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, sharedAgentTokenEnv) {
		t.Errorf("log = %q, want a warning naming %s", logged, sharedAgentTokenEnv)
	}
	if strings.Contains(logged, token) {
		t.Errorf("the warning prints the token: %q", logged)
	}
}

// TestSharedAgentTokenWarning: a server or agent started with the shared
// token says so at start, with what it allows and how to be rid of it.
func TestSharedAgentTokenWarning(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"server", "agent"} {
		var buf bytes.Buffer
		warnSharedAgentToken(slog.New(slog.NewTextHandler(&buf, nil)), role)
		got := buf.String()
		for _, want := range []string{"level=WARN", sharedAgentTokenEnv, "every team's artifacts", "--join", "unset it", "role=" + role} {
			if !strings.Contains(got, want) {
				t.Errorf("%s warning = %q, want it to say %q", role, got, want)
			}
		}
	}
}
