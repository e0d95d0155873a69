package app

import (
	"flag"
	"strings"
	"testing"
)

func TestGatewayConfigValidateNamesBadSettings(t *testing.T) {
	c := GatewayConfig{Addr: "", NATSURL: "http://x", StateDir: "", MaxBodyBytes: 0, Timeout: -1, StallTimeout: 0, LogLevel: "loud"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a bad configuration; want an error")
	}
	for _, want := range []string{"MP_GATEWAY_ADDR", "MP_NATS_URL", "MP_GATEWAY_STATE_DIR", "MP_GATEWAY_MAX_BODY_BYTES", "MP_GATEWAY_TIMEOUT", "MP_GATEWAY_STALL_TIMEOUT", "MP_LOG_LEVEL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q; want it to name %s", err, want)
		}
	}
}

func TestGatewayConfigDefaults(t *testing.T) {
	t.Setenv("MP_GATEWAY_ADDR", "")
	var c GatewayConfig
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--addr", ":8081"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults: Validate() = %v, want nil", err)
	}
	if c.StateDir != ".modelplane/gateway" {
		t.Errorf("state dir = %q, want .modelplane/gateway", c.StateDir)
	}
}
