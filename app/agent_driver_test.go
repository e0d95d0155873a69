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

// TestAgentConfigOfAClusterAgent: the kubernetes driver needs no --gpus or
// --cpus (the cluster's nodes are the inventory), and names a bad pool
// kind or runtime image setting, and a server name that is not one or
// comes without the pool's certificate.
func TestAgentConfigOfAClusterAgent(t *testing.T) {
	creds := withCreds(t)
	for _, c := range []struct {
		args []string
		want string // "" for ok
	}{
		{nil, ""},
		{[]string{"--kube-pool", "cpu"}, ""},
		{[]string{"--kube-pool", "tpu"}, "MP_KUBE_POOL"},
		{[]string{"--runtime-images", "vllm"}, "MP_AGENT_RUNTIME_IMAGES"},
		{[]string{"--runtime-images", "nosuch=img:1"}, "MP_AGENT_RUNTIME_IMAGES"},
		{[]string{"--kube-image", ""}, "MP_KUBE_IMAGE"},
		{[]string{"--kube-server-name", "gpu-pool.replicas.modelplane.internal"}, "needs MP_TLS_CERT"},
		{[]string{"--kube-server-name", "not a name"}, "MP_KUBE_SERVER_NAME"},
	} {
		var cfg AgentConfig
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		cfg.Flags(fs)
		args := append([]string{"--driver", "kubernetes", "--node", "gpu-pool", "--nats", "nats://127.0.0.1:4222", "--nats-creds", creds}, c.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		_, err := cfg.agentConfig()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: err = %v, want one naming %s", c.args, err, c.want)
		}
	}
}

// TestFetchConfigNamesEveryBadSetting: the init container's settings.
func TestFetchConfigNamesEveryBadSetting(t *testing.T) {
	err := FetchConfig{ControlPlaneURL: "ftp://x", Manifest: "abc", Settings: "{", LogLevel: "info"}.Validate()
	for _, want := range []string{"MP_CONTROL_PLANE_URL", "MP_AGENT_TOKEN", "--manifest", "--replica", "--dir", "--settings"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one naming %s", err, want)
		}
	}
	ok := FetchConfig{ControlPlaneURL: "http://cp:8080", Token: "t", Manifest: strings.Repeat("ab", 32), Replica: "r1", Dir: "/models", LogLevel: "info"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid settings: %v", err)
	}
}
