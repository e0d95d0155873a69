package app

import (
	"flag"
	"strings"
	"testing"
)

func TestServerConfigValidateNamesBadSettings(t *testing.T) {
	t.Setenv("MP_OIDC_ISSUER", "")
	t.Setenv("MP_DATABASE_URL", "")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for an empty configuration; want an error")
	}
	for _, want := range []string{"MP_OIDC_ISSUER", "MP_DATABASE_URL", "MP_CLICKHOUSE_URL", "MP_NATS_URL", "MP_OIDC_CLIENT_ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q; want it to name %s", err, want)
		}
	}
}

func TestServerRefusesToStartWithoutIssuer(t *testing.T) {
	t.Setenv("MP_DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	t.Setenv("MP_CLICKHOUSE_URL", "clickhouse://x@127.0.0.1:1/x")
	t.Setenv("MP_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("MP_OIDC_CLIENT_ID", "modelplane")
	t.Setenv("MP_OIDC_ISSUER", "")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	err := RunServer(t.Context(), c)
	if err == nil || !strings.Contains(err.Error(), "MP_OIDC_ISSUER") {
		t.Fatalf("RunServer without issuer = %v; want a refusal naming MP_OIDC_ISSUER", err)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	c := ServerConfig{DatabaseURL: "postgres://u:hunter2@db/x", OIDCSecret: "s3cret"}
	for _, s := range []string{c.DatabaseURL.String(), c.OIDCSecret.String()} {
		if s != "<secret>" {
			t.Errorf("secret printed as %q; want <secret>", s)
		}
	}
}

func TestServerConfigValidateNamesBadDriftInterval(t *testing.T) {
	t.Setenv("MP_DRIFT_INTERVAL", "0s")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MP_DRIFT_INTERVAL") {
		t.Fatalf("Validate() = %v; want it to name MP_DRIFT_INTERVAL", err)
	}
}

// TestServerConfigRefusesAValidationLimitTheChildCannotStartIn: below
// validation.MinMemoryMB the Go child dies at start, which would make
// every version invalid; the limit is refused instead.
func TestServerConfigRefusesAValidationLimitTheChildCannotStartIn(t *testing.T) {
	t.Setenv("MP_VALIDATION_MEMORY_MB", "1024")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MP_VALIDATION_MEMORY_MB (--validation-memory-mb) must be at least 2048") {
		t.Fatalf("Validate() = %v; want it to refuse MP_VALIDATION_MEMORY_MB 1024", err)
	}
}

func TestServerConfigValidateNamesShortWakeGrace(t *testing.T) {
	t.Setenv("MP_WAKE_GRACE", "20s")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MP_WAKE_GRACE") {
		t.Fatalf("Validate() = %v; want it to name MP_WAKE_GRACE", err)
	}
}

// TestConfigValidateNamesBadAdminAddr: each command's admin listener
// (/metrics) is checked, and the error names its setting.
func TestConfigValidateNamesBadAdminAddr(t *testing.T) {
	for _, addr := range []string{"localhost", "127.0.0.1:http", "127.0.0.1:70000", ""} {
		t.Run(addr, func(t *testing.T) {
			t.Setenv("MP_ADMIN_ADDR", addr)
			t.Setenv("MP_GATEWAY_ADMIN_ADDR", addr)
			var s ServerConfig
			s.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "MP_ADMIN_ADDR (--admin-addr)") {
				t.Errorf("server Validate() = %v; want it to name MP_ADMIN_ADDR", err)
			}
			var g GatewayConfig
			g.Flags(flag.NewFlagSet("gateway", flag.ContinueOnError))
			if err := g.Validate(); err == nil || !strings.Contains(err.Error(), "MP_GATEWAY_ADMIN_ADDR (--admin-addr)") {
				t.Errorf("gateway Validate() = %v; want it to name MP_GATEWAY_ADMIN_ADDR", err)
			}
		})
	}
	withCreds(t)
	var g GatewayConfig
	g.Flags(flag.NewFlagSet("gateway", flag.ContinueOnError))
	if g.AdminAddr != DefaultGatewayAdminAddr || g.Validate() != nil {
		t.Errorf("gateway default admin address %q (Validate %v); want %s, valid", g.AdminAddr, g.Validate(), DefaultGatewayAdminAddr)
	}
}

// TestServerConfigDefaultQuotaAndAttestation: operators choose the quota
// of teams without one and whether unattested nodes are refused; a bad
// quota is named.
func TestServerConfigDefaultQuotaAndAttestation(t *testing.T) {
	t.Setenv("MP_DEFAULT_QUOTA", "H100-80GB=8, cpu=64,memory=65536")
	t.Setenv("MP_REQUIRE_ATTESTATION", "true")
	var c ServerConfig
	c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
	want := map[string]float64{"H100-80GB": 8, "cpu": 64, "memory": 65536}
	if len(c.DefaultQuota) != len(want) || !c.RequireAttestation {
		t.Fatalf("default quota %v, require attestation %v; want %v and true", c.DefaultQuota, c.RequireAttestation, want)
	}
	for k, v := range want {
		if c.DefaultQuota[k] != v {
			t.Errorf("default quota of %s = %v, want %v", k, c.DefaultQuota[k], v)
		}
	}
	for _, bad := range []string{"H100-80GB", "H100-80GB=eight", "cpu=-1", "a b=1"} {
		t.Setenv("MP_DEFAULT_QUOTA", bad)
		var c ServerConfig
		c.Flags(flag.NewFlagSet("server", flag.ContinueOnError))
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MP_DEFAULT_QUOTA") {
			t.Errorf("MP_DEFAULT_QUOTA=%q: Validate() = %v; want it named", bad, err)
		}
	}
}
