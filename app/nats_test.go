package app

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/bus"
)

// withCreds points MP_NATS_CREDS at a creds file of a fresh authority.
func withCreds(t *testing.T) string {
	t.Helper()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Gateway("test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "test.creds")
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MP_NATS_CREDS", path)
	return path
}

// TestNATSSettingsNameWhatToConfigure: gateways and agents refuse to start
// without a credential, or with one in the URL, and say which setting to
// change.
func TestNATSSettingsNameWhatToConfigure(t *testing.T) {
	t.Setenv("MP_NATS_CREDS", "")
	for _, tc := range []struct {
		name, url, want string
	}{
		{"no credential", "nats://127.0.0.1:4222", "MP_NATS_CREDS (--nats-creds) is required"},
		{"password in the URL", "nats://agent:hunter2@127.0.0.1:4222", "MP_NATS_URL must not carry a user or password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MP_NATS_URL", tc.url)
			var g GatewayConfig
			g.Flags(flag.NewFlagSet("gateway", flag.ContinueOnError))
			if err := g.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("gateway Validate() = %v; want it to say %q", err, tc.want)
			}
			var a AgentConfig
			a.Flags(flag.NewFlagSet("agent", flag.ContinueOnError))
			if _, err := a.agentConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("agent config = %v; want it to say %q", err, tc.want)
			}
			if strings.Contains(tc.url, "hunter2") {
				if err := g.Validate(); err != nil && strings.Contains(err.Error(), "hunter2") {
					t.Errorf("Validate() prints the password: %v", err)
				}
			}
		})
	}
}

// TestCredsFileIsPrivate: a creds file is written readable by its owner
// only.
func TestCredsFileIsPrivate(t *testing.T) {
	path := withCreds(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("creds file mode %v, want 0600", fi.Mode().Perm())
	}
}
