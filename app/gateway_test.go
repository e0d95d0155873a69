package app

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/bus"
)

func TestGatewayConfigValidateNamesBadSettings(t *testing.T) {
	c := GatewayConfig{Addr: "", NATS: bus.ClientConfig{URL: "http://x"}, StateDir: "", MaxBodyBytes: 0, Timeout: -1, StallTimeout: 0, ReadTimeout: -1, LogLevel: "loud"}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a bad configuration; want an error")
	}
	for _, want := range []string{"MP_GATEWAY_ADDR", "MP_NATS_URL", "MP_GATEWAY_STATE_DIR", "MP_GATEWAY_MAX_BODY_BYTES", "MP_GATEWAY_TIMEOUT", "MP_GATEWAY_STALL_TIMEOUT", "MP_GATEWAY_READ_TIMEOUT", "MP_LOG_LEVEL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q; want it to name %s", err, want)
		}
	}
}

func TestGatewayConfigDefaults(t *testing.T) {
	t.Setenv("MP_GATEWAY_ADDR", "")
	withCreds(t)
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
	if c.ReadTimeout != 30*time.Second {
		t.Errorf("read timeout = %v, want the 30 s default", c.ReadTimeout)
	}
}

// TestGatewayReadTimeoutSetting: MP_GATEWAY_READ_TIMEOUT reaches the
// gateway's configuration.
func TestGatewayReadTimeoutSetting(t *testing.T) {
	withCreds(t)
	t.Setenv("MP_GATEWAY_READ_TIMEOUT", "7s")
	var c GatewayConfig
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--addr", ":8081"}); err != nil {
		t.Fatal(err)
	}
	gc, err := c.gatewayConfig()
	if err != nil || gc.ReadTimeout != 7*time.Second {
		t.Fatalf("gateway read timeout = %v (%v), want 7s", gc.ReadTimeout, err)
	}
}

func TestGatewayLimitSettings(t *testing.T) {
	withCreds(t)
	t.Setenv("MP_GATEWAY_KEY_RPS", "fast")
	t.Setenv("MP_GATEWAY_ENDPOINT_BURST", "-3")
	var c GatewayConfig
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--endpoint-rps", "-1", "--max-outstanding-per-replica", "-2"}); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for bad limits; want an error")
	}
	for _, want := range []string{"MP_GATEWAY_KEY_RPS", "MP_GATEWAY_ENDPOINT_RPS", "MP_GATEWAY_ENDPOINT_BURST", "MP_GATEWAY_MAX_OUTSTANDING_PER_REPLICA"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q; want it to name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "MP_GATEWAY_KEY_BURST") {
		t.Errorf("Validate() = %q names the good key burst", err)
	}

	t.Setenv("MP_GATEWAY_KEY_RPS", "2.5")
	t.Setenv("MP_GATEWAY_ENDPOINT_BURST", "10")
	c = GatewayConfig{}
	fs = flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.gatewayConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KeyRPS != 2.5 || cfg.EndpointBurst != 10 || cfg.EndpointRPS != 0 || cfg.MaxOutstandingPerReplica != 64 {
		t.Errorf("config = key rps %v, endpoint burst %d, endpoint rps %v, max outstanding %d; want 2.5, 10, 0 (unlimited), 64",
			cfg.KeyRPS, cfg.EndpointBurst, cfg.EndpointRPS, cfg.MaxOutstandingPerReplica)
	}
}

func TestGatewayShadowAndEjectionSettings(t *testing.T) {
	withCreds(t)
	t.Setenv("MP_GATEWAY_SHADOW_WORKERS", "0")
	t.Setenv("MP_GATEWAY_EJECT_COOLDOWN", "-1s")
	t.Setenv("MP_GATEWAY_HOLD_QUEUE", "-1")
	var c GatewayConfig
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	for _, want := range []string{"MP_GATEWAY_SHADOW_WORKERS", "MP_GATEWAY_EJECT_COOLDOWN", "MP_GATEWAY_HOLD_QUEUE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %s", err, want)
		}
	}

	t.Setenv("MP_GATEWAY_SHADOW_WORKERS", "8")
	t.Setenv("MP_GATEWAY_EJECT_COOLDOWN", "30s")
	t.Setenv("MP_GATEWAY_EJECT_FAILURES", "0")
	t.Setenv("MP_GATEWAY_HOLD_QUEUE", "0")
	c = GatewayConfig{}
	fs = flag.NewFlagSet("gateway", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.gatewayConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ShadowWorkers != 8 || cfg.EjectCooldown != 30*time.Second || cfg.EjectFailures >= 0 || cfg.HoldQueue >= 0 {
		t.Errorf("config = shadow workers %d, eject cooldown %v, eject failures %d, hold queue %d; want 8, 30s, negative (off), negative (none held)",
			cfg.ShadowWorkers, cfg.EjectCooldown, cfg.EjectFailures, cfg.HoldQueue)
	}
}

// TestGatewayQuotaGatewaysSetting: MP_GATEWAY_QUOTA_GATEWAYS, the gateways
// sharing grants' daily quotas, reaches the gateway's configuration, and
// a value below one is named.
func TestGatewayQuotaGatewaysSetting(t *testing.T) {
	withCreds(t)
	parse := func() GatewayConfig {
		var c GatewayConfig
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		c.Flags(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Setenv("MP_GATEWAY_QUOTA_GATEWAYS", "0")
	bad := parse()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MP_GATEWAY_QUOTA_GATEWAYS") {
		t.Errorf("Validate() = %v; want it to name MP_GATEWAY_QUOTA_GATEWAYS", err)
	}
	t.Setenv("MP_GATEWAY_QUOTA_GATEWAYS", "3")
	c := parse()
	cfg, err := c.gatewayConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QuotaGateways != 3 {
		t.Errorf("quota gateways = %d, want 3", cfg.QuotaGateways)
	}
}

// serveGateway serves a gateway's public routes h with the server
// RunGateway runs until the test ends, and returns their URL.
func serveGateway(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := GatewayServer(h, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
