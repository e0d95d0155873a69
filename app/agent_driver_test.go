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
