package app

import (
	"flag"
	"strings"
	"testing"
)

func TestAgentConfigTakesTheProcessDriver(t *testing.T) {
	creds := withCreds(t)
	for _, c := range []struct {
		driver string
		ok     bool
	}{{"sim", true}, {"process", true}, {"docker", false}} {
		var cfg AgentConfig
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		cfg.Flags(fs)
		if err := fs.Parse([]string{"--driver", c.driver, "--node", "n1", "--gpus", "1xA100-80GB", "--nats", "nats://127.0.0.1:4222", "--nats-creds", creds}); err != nil {
			t.Fatal(err)
		}
		_, err := cfg.agentConfig()
		if c.ok && err != nil {
			t.Errorf("--driver %s: %v", c.driver, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "MP_AGENT_DRIVER")) {
			t.Errorf("--driver %s: err = %v, want one naming MP_AGENT_DRIVER", c.driver, err)
		}
	}
}

// TestAgentLoopbackControlPlaneNeedsTheEgressSetting: artifact downloads
// from a control plane on a loopback address are refused unless
// MP_AGENT_EGRESS_ALLOW_LOOPBACK says so.
func TestAgentLoopbackControlPlaneNeedsTheEgressSetting(t *testing.T) {
	creds := withCreds(t)
	for _, c := range []struct {
		url      string
		loopback bool
		ok       bool
	}{{"http://127.0.0.1:8080", false, false}, {"http://localhost:8080", false, false}, {"http://127.0.0.1:8080", true, true},
		{"https://cp.example.com", false, true}} {
		var cfg AgentConfig
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		cfg.Flags(fs)
		args := []string{"--node", "n1", "--gpus", "1xA100-80GB", "--nats", "nats://127.0.0.1:4222", "--nats-creds", creds,
			"--control-plane", c.url, "--agent-token", "t"}
		if c.loopback {
			args = append(args, "--egress-allow-loopback")
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		_, err := cfg.agentConfig()
		if c.ok && err != nil {
			t.Errorf("%s (loopback %v): %v", c.url, c.loopback, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "MP_AGENT_EGRESS_ALLOW_LOOPBACK")) {
			t.Errorf("%s: err = %v, want one naming MP_AGENT_EGRESS_ALLOW_LOOPBACK", c.url, err)
		}
	}
}
