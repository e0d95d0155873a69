package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"modelplane/bus"
	"modelplane/notify"
	"modelplane/tlscert"
	"modelplane/versioncheck"
)

// Secret is a setting that never prints.
type Secret string

func (Secret) String() string { return "<secret>" }

// LogValue keeps secrets out of structured logs.
func (Secret) LogValue() slog.Value { return slog.StringValue("<secret>") }

// ServerConfig configures `modelplane server`.
type ServerConfig struct {
	HTTPAddr string
	// AdminAddr serves /metrics, which names every team's routes: keep it
	// on loopback or a network only operators reach.
	AdminAddr     string
	PublicURL     string
	DatabaseURL   Secret
	ClickHouseURL Secret
	NATS          bus.ClientConfig
	OIDCIssuer    string
	OIDCClientID  string
	// OIDCCLIClientID is the public client of `modelplane login` at the
	// same issuer; "" leaves login off.
	OIDCCLIClientID string
	OIDCSecret      Secret
	ArtifactDir     string
	MaxUploadBytes  int64
	// AgentToken is the credential every node agent presents to fetch
	// artifacts until nodes enrol with their own; empty refuses agents.
	AgentToken Secret
	// NATSAuthority is the authority file of `modelplane nats init`
	// (MP_NATS_AUTHORITY): with it the server enrolls nodes, minting their
	// credentials and pushing revocations; without it enrollment is off.
	NATSAuthority string
	// NodeNATSURLs are the NATS URLs enrolled nodes are told to use
	// (MP_NODE_NATS_URLS, comma separated; empty: the agent's --nats).
	NodeNATSURLs []string
	// EgressHosts is the egress allow-list (MP_EGRESS_HOSTS, comma
	// separated): the only hosts https:// artifact URIs may name. The OIDC
	// issuer's host is added to it.
	EgressHosts []string
	SessionIdle time.Duration
	SessionMax  time.Duration
	LogLevel    string
	// DriftInterval is the time between scheduled drift checks;
	// DriftAlertAfter how long a score must stay past its threshold before
	// its alert fires.
	DriftInterval   time.Duration
	DriftAlertAfter time.Duration
	// WakeGrace is how long an endpoint with min_replicas 0 keeps the
	// replica a request woke after the last request (fleet.DefaultWakeGrace).
	WakeGrace time.Duration
	// AutoscaleInterval is how often the leader evaluates every endpoint's
	// replica count (autoscaler.DefaultInterval).
	AutoscaleInterval time.Duration
	// ValidationTimeout and ValidationMemoryMB limit the child process
	// that validates an uploaded version at registration.
	ValidationTimeout  time.Duration
	ValidationMemoryMB int64
	// ValidationUID and ValidationGID are the user the validation child
	// runs as when the control plane runs as root (default nobody).
	ValidationUID, ValidationGID int64
	// SecretKey seals webhook secrets (MP_SECRET_KEY: comma-separated
	// 32-byte base64 keys, the current first; docs/operations.md says how
	// to rotate). AlertmanagerURL receives the control plane's own alerts
	// (MP_ALERTMANAGER_URL; empty: none).
	SecretKey       Secret
	AlertmanagerURL string
	// DefaultQuota caps every team without a quota of its own of a
	// resource (MP_DEFAULT_QUOTA: "A100-80GB=8,cpu=64,memory=65536";
	// empty: such teams are uncapped). RequireAttestation refuses the
	// heartbeats of nodes no platform admin attested
	// (MP_REQUIRE_ATTESTATION).
	DefaultQuota       map[string]float64
	RequireAttestation bool
	// TLS is the certificate and key the portal, API and admin listeners
	// serve (MP_TLS_CERT, MP_TLS_KEY), read again when the files change;
	// empty: plain HTTP.
	TLS      tlscert.Files
	quotaErr error
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int64) int64 {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		return -1 // Validate names it
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		return -1
	}
	return def
}

type secretFlag struct{ s *Secret }

func (f secretFlag) String() string {
	if f.s == nil || *f.s == "" {
		return ""
	}
	return "<secret>"
}
func (f secretFlag) Set(v string) error { *f.s = Secret(v); return nil }

// Flags registers the server settings on fs, with MP_* environment variables
// as defaults.
func (c *ServerConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-addr", env("MP_HTTP_ADDR", ":8080"), "portal and API listen address (MP_HTTP_ADDR)")
	fs.StringVar(&c.AdminAddr, "admin-addr", env("MP_ADMIN_ADDR", DefaultAdminAddr), "admin listen address serving /metrics, /healthz and /readyz; keep it off public networks (MP_ADMIN_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", env("MP_PUBLIC_URL", "http://127.0.0.1:8080"), "URL people use to reach the portal; the OIDC redirect is built from it (MP_PUBLIC_URL)")
	c.DatabaseURL = Secret(env("MP_DATABASE_URL", ""))
	fs.Var(secretFlag{&c.DatabaseURL}, "database-url", "PostgreSQL URL (MP_DATABASE_URL)")
	c.ClickHouseURL = Secret(env("MP_CLICKHOUSE_URL", ""))
	fs.Var(secretFlag{&c.ClickHouseURL}, "clickhouse-url", "ClickHouse URL, clickhouse://user:pass@host:9000/db (MP_CLICKHOUSE_URL)")
	natsFlags(fs, &c.NATS, "nats-url", "")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", env("MP_OIDC_ISSUER", ""), "OIDC issuer URL (MP_OIDC_ISSUER)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", env("MP_OIDC_CLIENT_ID", ""), "OIDC client id (MP_OIDC_CLIENT_ID)")
	fs.StringVar(&c.OIDCCLIClientID, "oidc-cli-client-id", env("MP_OIDC_CLI_CLIENT_ID", ""), "OIDC public client id of `modelplane login` (PKCE, loopback redirects); empty: login off (MP_OIDC_CLI_CLIENT_ID)")
	c.OIDCSecret = Secret(env("MP_OIDC_CLIENT_SECRET", ""))
	fs.Var(secretFlag{&c.OIDCSecret}, "oidc-client-secret", "OIDC client secret (MP_OIDC_CLIENT_SECRET)")
	fs.StringVar(&c.ArtifactDir, "artifact-dir", env("MP_ARTIFACT_DIR", "artifacts"), "content-addressed artifact store directory (MP_ARTIFACT_DIR)")
	c.AgentToken = Secret(env("MP_AGENT_TOKEN", ""))
	fs.Var(secretFlag{&c.AgentToken}, "agent-token", "token node agents present to fetch artifacts; empty refuses them (MP_AGENT_TOKEN)")
	fs.StringVar(&c.NATSAuthority, "nats-authority", env("MP_NATS_AUTHORITY", ""), "authority file of `modelplane nats init`; enables node enrollment (MP_NATS_AUTHORITY)")
	fs.Func("node-nats-urls", "NATS URLs enrolled nodes connect to, comma separated; empty: the agent's own --nats (MP_NODE_NATS_URLS)", func(v string) error {
		c.NodeNATSURLs = splitHosts(v)
		return nil
	})
	c.NodeNATSURLs = splitHosts(env("MP_NODE_NATS_URLS", ""))
	fs.Func("egress-hosts", "hosts outbound calls may reach, comma separated (MP_EGRESS_HOSTS)", func(v string) error {
		c.EgressHosts = splitHosts(v)
		return nil
	})
	c.EgressHosts = splitHosts(env("MP_EGRESS_HOSTS", ""))
	fs.Int64Var(&c.MaxUploadBytes, "max-upload-bytes", envInt("MP_MAX_UPLOAD_BYTES", 10<<30), "largest version upload (MP_MAX_UPLOAD_BYTES)")
	fs.DurationVar(&c.SessionIdle, "session-idle", envDuration("MP_SESSION_IDLE", 8*time.Hour), "portal session idle timeout (MP_SESSION_IDLE)")
	fs.DurationVar(&c.SessionMax, "session-max", envDuration("MP_SESSION_MAX", 24*time.Hour), "portal session absolute timeout (MP_SESSION_MAX)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
	fs.DurationVar(&c.DriftInterval, "drift-interval", envDuration("MP_DRIFT_INTERVAL", 5*time.Minute), "time between scheduled drift checks (MP_DRIFT_INTERVAL)")
	fs.DurationVar(&c.AutoscaleInterval, "autoscale-interval", envDuration("MP_AUTOSCALE_INTERVAL", 2*time.Second), "how often the leader evaluates every endpoint's replica count (MP_AUTOSCALE_INTERVAL)")
	fs.DurationVar(&c.WakeGrace, "wake-grace", envDuration("MP_WAKE_GRACE", 15*time.Minute), "how long an endpoint scaled to zero keeps its replica after the last request (MP_WAKE_GRACE)")
	fs.DurationVar(&c.ValidationTimeout, "validation-timeout", envDuration("MP_VALIDATION_TIMEOUT", versioncheck.DefaultTimeout), "how long validating an uploaded version may take, load and inference (MP_VALIDATION_TIMEOUT)")
	fs.Int64Var(&c.ValidationMemoryMB, "validation-memory-mb", envInt("MP_VALIDATION_MEMORY_MB", versioncheck.DefaultMemoryMB), "address space the validation child process may take, in MiB (MP_VALIDATION_MEMORY_MB)")
	fs.Int64Var(&c.ValidationUID, "validation-uid", envInt("MP_VALIDATION_UID", versioncheck.DefaultSandboxID), "uid the validation child runs as when the control plane runs as root; it should own no file (MP_VALIDATION_UID)")
	fs.Int64Var(&c.ValidationGID, "validation-gid", envInt("MP_VALIDATION_GID", versioncheck.DefaultSandboxID), "gid the validation child runs as when the control plane runs as root (MP_VALIDATION_GID)")
	c.DefaultQuota, c.quotaErr = parseQuotas(env("MP_DEFAULT_QUOTA", ""))
	fs.Func("default-quota", "quota of every team without its own, as RESOURCE=AMOUNT,… (GPU types in GPU equivalents, cpu in cores, memory in MiB); empty: uncapped (MP_DEFAULT_QUOTA)", func(v string) error {
		q, err := parseQuotas(v)
		c.DefaultQuota, c.quotaErr = q, err
		return err
	})
	fs.BoolVar(&c.RequireAttestation, "require-attestation", env("MP_REQUIRE_ATTESTATION", "") == "true", "refuse the heartbeats of nodes no platform admin attested (MP_REQUIRE_ATTESTATION=true)")
	c.SecretKey = Secret(env("MP_SECRET_KEY", ""))
	fs.Var(secretFlag{&c.SecretKey}, "secret-key", "server keys sealing webhook secrets: comma-separated 32-byte base64 keys, the current first (MP_SECRET_KEY)")
	fs.StringVar(&c.AlertmanagerURL, "alertmanager-url", env("MP_ALERTMANAGER_URL", ""), "Alertmanager base URL for the control plane's own alerts; empty sends none (MP_ALERTMANAGER_URL)")
	tlsFlags(fs, &c.TLS, "the portal, API and admin listeners")
	fs.DurationVar(&c.DriftAlertAfter, "drift-alert-after", envDuration("MP_DRIFT_ALERT_AFTER", 15*time.Minute), "how long a drift score stays past its threshold before it alerts (MP_DRIFT_ALERT_AFTER)")
}

// Validate names every bad setting.
func (c *ServerConfig) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.HTTPAddr == "" {
		bad("MP_HTTP_ADDR (--http-addr) is required")
	}
	if err := checkAddr(c.AdminAddr); err != nil {
		bad("MP_ADMIN_ADDR (--admin-addr) %v", err)
	}
	if c.AdminAddr != "" && c.AdminAddr == c.HTTPAddr {
		bad("MP_ADMIN_ADDR (--admin-addr) must differ from MP_HTTP_ADDR (--http-addr): /metrics stays off the public port")
	}
	errs = append(errs, tlsProblems(c.TLS)...)
	if c.quotaErr != nil {
		bad("MP_DEFAULT_QUOTA (--default-quota) %v", c.quotaErr)
	}
	if _, err := notify.ParseKeyring(string(c.SecretKey)); err != nil {
		bad("%v (--secret-key)", err)
	}
	if u, err := url.Parse(c.AlertmanagerURL); c.AlertmanagerURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		bad("MP_ALERTMANAGER_URL (--alertmanager-url) must be an http(s) URL")
	}
	if !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") {
		bad("MP_PUBLIC_URL (--public-url) must be an http(s) URL, got %q", c.PublicURL)
	}
	if !strings.HasPrefix(string(c.DatabaseURL), "postgres://") && !strings.HasPrefix(string(c.DatabaseURL), "postgresql://") {
		bad("MP_DATABASE_URL (--database-url) must be a postgres:// URL")
	}
	if !strings.HasPrefix(string(c.ClickHouseURL), "clickhouse://") {
		bad("MP_CLICKHOUSE_URL (--clickhouse-url) must be a clickhouse:// URL")
	}
	errs = append(errs, c.NATS.Validate()...)
	if c.OIDCIssuer == "" {
		bad("MP_OIDC_ISSUER (--oidc-issuer) is required: modelplane server signs people in with your identity provider")
	}
	if c.OIDCClientID == "" {
		bad("MP_OIDC_CLIENT_ID (--oidc-client-id) is required")
	}
	if c.ArtifactDir == "" {
		bad("MP_ARTIFACT_DIR (--artifact-dir) is required")
	}
	if c.AgentToken != "" && len(c.AgentToken) < 16 {
		bad("MP_AGENT_TOKEN (--agent-token) must be at least 16 characters: it lets a node fetch every team's artifacts")
	}
	if c.NATSAuthority != "" {
		if _, err := os.Stat(c.NATSAuthority); err != nil {
			bad("MP_NATS_AUTHORITY (--nats-authority): %v", err)
		}
	}
	for _, u := range c.NodeNATSURLs {
		if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			bad("MP_NODE_NATS_URLS (--node-nats-urls) must list nats:// or tls:// URLs, got %q", u)
		}
	}
	if c.MaxUploadBytes <= 0 {
		bad("MP_MAX_UPLOAD_BYTES (--max-upload-bytes) must be a positive number of bytes")
	}
	if c.SessionIdle <= 0 || c.SessionMax <= 0 || c.SessionIdle > c.SessionMax {
		bad("MP_SESSION_IDLE and MP_SESSION_MAX must be positive durations with idle <= max")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("MP_LOG_LEVEL (--log-level) %v", err)
	}
	if c.DriftInterval < time.Second || c.DriftAlertAfter < 0 {
		bad("MP_DRIFT_INTERVAL (--drift-interval) must be at least 1s and MP_DRIFT_ALERT_AFTER (--drift-alert-after) not negative")
	}
	if c.ValidationTimeout < time.Second {
		bad("MP_VALIDATION_TIMEOUT (--validation-timeout) must be at least 1s")
	}
	if c.ValidationUID < 1 || c.ValidationUID > math.MaxUint32-1 {
		bad("MP_VALIDATION_UID (--validation-uid) must be a uid other than root's (1 to %d)", uint32(math.MaxUint32-1))
	}
	if c.ValidationGID < 1 || c.ValidationGID > math.MaxUint32-1 {
		bad("MP_VALIDATION_GID (--validation-gid) must be a gid other than root's (1 to %d)", uint32(math.MaxUint32-1))
	}
	if c.ValidationMemoryMB < versioncheck.MinMemoryMB {
		bad("MP_VALIDATION_MEMORY_MB (--validation-memory-mb) must be at least %d: the validation child does not start in less", versioncheck.MinMemoryMB)
	}
	if c.AutoscaleInterval < 500*time.Millisecond || c.AutoscaleInterval > time.Minute {
		bad("MP_AUTOSCALE_INTERVAL (--autoscale-interval) must be between 500ms and 1m")
	}
	if c.WakeGrace < time.Minute {
		bad("MP_WAKE_GRACE (--wake-grace) must be at least 1m: gateways remind the control plane of a served endpoint every 10s")
	}
	if len(errs) > 0 {
		return errors.New("invalid configuration:\n  " + strings.Join(errs, "\n  "))
	}
	return nil
}

// The admin listeners' defaults: loopback, so that /metrics, whose labels
// name every team's endpoints, is not reachable from the network unless an
// operator chooses so.
const (
	DefaultAdminAddr        = "127.0.0.1:9090"
	DefaultGatewayAdminAddr = "127.0.0.1:9091"
)

// checkAddr reports why addr is not a host:port to listen on (the host may
// be empty, for every interface; port 0 picks a free one).
func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("is required")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("must have a port number from 0 to 65535, got %q", addr)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// NewLogger returns the JSON logger every command uses.
func NewLogger(level string) *slog.Logger {
	l, _ := parseLevel(level)
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// splitHosts reads a comma-separated host list, dropping empty entries.
func splitHosts(v string) []string {
	var out []string
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// quotaResource is what a quota may name: a GPU type, cpu or memory.
var quotaResource = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// parseQuotas reads RESOURCE=AMOUNT pairs, comma separated; empty is none.
func parseQuotas(s string) (map[string]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, pair := range strings.Split(s, ",") {
		res, amount, ok := strings.Cut(strings.TrimSpace(pair), "=")
		n, err := strconv.ParseFloat(strings.TrimSpace(amount), 64)
		switch {
		case !ok || !quotaResource.MatchString(res):
			return nil, fmt.Errorf("%q is not RESOURCE=AMOUNT (a GPU type, cpu or memory)", pair)
		case err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n):
			return nil, fmt.Errorf("%q: the amount must be a number, 0 or more", pair)
		}
		out[res] = n
	}
	return out, nil
}
