package app

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/auth"
	"modelplane/auth/devidp"
	"modelplane/bus"
	"modelplane/controlplane"
	"modelplane/handlers"
	"modelplane/internal/chproc"
	"modelplane/internal/pgproc"
	"modelplane/notify"
)

// DevCLIClientID is the command-line client's public client at the
// development identity provider, for `modelplane login`.
const DevCLIClientID = "modelplane-cli"

// DevConfig configures `modelplane dev`.
type DevConfig struct {
	Dir string
	// AlertmanagerURL receives the control plane's own alerts (empty:
	// none); webhook secrets are sealed with MP_SECRET_KEY or a key dev
	// keeps in Dir.
	AlertmanagerURL string
	HTTPAddr        string
	GatewayAddr     string
	// AdminAddr and GatewayAdminAddr are the admin listeners (/metrics):
	// loopback, on a free port unless set.
	AdminAddr        string
	GatewayAdminAddr string
	IdPAddr          string
	LogLevel         string
	MaxUploadMB      int64
	// SimNodes and SimGPUsPerNode size the simulated GPU fleet.
	SimNodes       int
	SimGPUsPerNode int
	// SimPortBase is the first port of the simulated nodes' replicas:
	// node i has the SimPortsPerNode ports from SimPortBase + i·SimPortsPerNode.
	SimPortBase int
	// CPUNodes are real CPU nodes (process driver, artifact cache, the
	// built-in runtime), of CPUNodeCores cores and CPUNodeMemory
	// (agent.ParseMemory) each. Their port ranges follow the simulated
	// nodes': CPU node i is node SimNodes + i of the same layout.
	CPUNodes      int
	CPUNodeCores  int
	CPUNodeMemory string
	// DemoTraffic is the demo traffic's rate in requests per second
	// through the gateway; 0 sends none.
	DemoTraffic float64
	// RuntimeBinary is the modelplane binary that validates uploaded
	// versions (`runtime validate`) and that the CPU nodes run replicas
	// with (`runtime`); Flags sets it to this binary. Empty turns
	// validation at registration off, and the CPU nodes run the running
	// executable.
	RuntimeBinary string
}

// defaultCPUNodeCores are the cores a dev CPU node declares. The process
// driver pins each replica to the machine's least used cores, so the dev
// nodes, all on one machine, may declare more than it has: two nodes of
// four hold the demo's six CPU replicas (fraud-scoring's two, chat-cpu,
// the document-processor's three steps) with room for a canary.
func defaultCPUNodeCores() int { return 4 }

// Flags registers the dev settings on fs.
func (c *DevConfig) Flags(fs *flag.FlagSet) {
	c.RuntimeBinary, _ = os.Executable()
	fs.StringVar(&c.Dir, "dir", env("MP_DEV_DIR", ".modelplane"), "state directory: PostgreSQL, ClickHouse, NATS, artifacts, dev.env (MP_DEV_DIR)")
	fs.StringVar(&c.AlertmanagerURL, "alertmanager-url", env("MP_ALERTMANAGER_URL", ""), "Alertmanager base URL for the control plane's own alerts; empty sends none (MP_ALERTMANAGER_URL)")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("MP_HTTP_ADDR", "127.0.0.1:8080"), "portal and API listen address (MP_HTTP_ADDR)")
	fs.StringVar(&c.GatewayAddr, "gateway-addr", env("MP_GATEWAY_ADDR", "127.0.0.1:8081"), "inference gateway listen address; empty for none (MP_GATEWAY_ADDR)")
	fs.StringVar(&c.AdminAddr, "admin-addr", env("MP_ADMIN_ADDR", "127.0.0.1:0"), "control plane admin listen address (/metrics); port 0 picks a free one (MP_ADMIN_ADDR)")
	fs.StringVar(&c.GatewayAdminAddr, "gateway-admin-addr", env("MP_GATEWAY_ADMIN_ADDR", "127.0.0.1:0"), "gateway admin listen address (/metrics); port 0 picks a free one (MP_GATEWAY_ADMIN_ADDR)")
	fs.StringVar(&c.IdPAddr, "idp-addr", env("MP_DEV_IDP_ADDR", "127.0.0.1:8082"), "development identity provider address; keep it stable, users are keyed by issuer (MP_DEV_IDP_ADDR)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "warn"), "debug, info, warn or error (MP_LOG_LEVEL)")
	fs.Int64Var(&c.MaxUploadMB, "max-upload-mb", envInt("MP_MAX_UPLOAD_MB", 2048), "largest version upload in MiB (MP_MAX_UPLOAD_MB)")
	fs.IntVar(&c.SimNodes, "sim-nodes", int(envInt("MP_SIM_NODES", 4)), "simulated GPU nodes; A100 and H100 alternate, every fourth node in MIG mode; 0 for none (MP_SIM_NODES)")
	fs.IntVar(&c.SimPortBase, "sim-port-base", int(envInt("MP_SIM_PORT_BASE", 31000)), "first port of the nodes' replicas, simulated nodes first, then CPU nodes; node i gets the 100 ports from base + 100·i (MP_SIM_PORT_BASE)")
	fs.IntVar(&c.SimGPUsPerNode, "sim-gpus-per-node", int(envInt("MP_SIM_GPUS_PER_NODE", 8)), "GPUs per simulated node (MP_SIM_GPUS_PER_NODE)")
	fs.IntVar(&c.CPUNodes, "cpu-nodes", int(envInt("MP_DEV_CPU_NODES", 2)), "CPU nodes running real replicas (process driver, built-in runtime); their ports follow the simulated nodes'; 0 for none (MP_DEV_CPU_NODES)")
	fs.IntVar(&c.CPUNodeCores, "cpu-node-cpus", int(envInt("MP_DEV_CPU_NODE_CPUS", int64(defaultCPUNodeCores()))), "cores of each CPU node (MP_DEV_CPU_NODE_CPUS)")
	fs.Float64Var(&c.DemoTraffic, "demo-traffic", envFloat("MP_DEV_DEMO_TRAFFIC", 5), "demo traffic through the gateway, requests per second over fraud-scoring, support-chat and document-processor; 0 for none (MP_DEV_DEMO_TRAFFIC)")
	fs.StringVar(&c.CPUNodeMemory, "cpu-node-memory", env("MP_DEV_CPU_NODE_MEMORY", "2GB"), "memory of each CPU node, as 2048 (MiB) or 2GB (MP_DEV_CPU_NODE_MEMORY)")
}

// devSecretKey reads the server key sealing webhook secrets from the
// state directory, making one on the first start: MP_SECRET_KEY when set.
func devSecretKey(dir string) (*notify.Keyring, error) {
	if v := os.Getenv("MP_SECRET_KEY"); v != "" {
		return notify.ParseKeyring(v)
	}
	path := filepath.Join(dir, "secret.key")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		raw = []byte(notify.NewKey())
		err = os.WriteFile(path, raw, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("dev server key: %w", err)
	}
	return notify.ParseKeyring(strings.TrimSpace(string(raw)))
}

// Validate names every bad setting.
func (c *DevConfig) Validate() error {
	var errs []string
	if c.Dir == "" {
		errs = append(errs, "MP_DEV_DIR (--dir) is required")
	}
	if c.HTTPAddr == "" {
		errs = append(errs, "MP_HTTP_ADDR (--http-addr) is required")
	}
	if err := checkAddr(c.AdminAddr); err != nil {
		errs = append(errs, "MP_ADMIN_ADDR (--admin-addr) "+err.Error())
	}
	if c.GatewayAddr != "" {
		if err := checkAddr(c.GatewayAdminAddr); err != nil {
			errs = append(errs, "MP_GATEWAY_ADMIN_ADDR (--gateway-admin-addr) "+err.Error())
		}
	}
	if c.MaxUploadMB <= 0 {
		errs = append(errs, "MP_MAX_UPLOAD_MB (--max-upload-mb) must be a positive number")
	}
	if c.SimNodes < 0 || c.SimNodes > 1000 {
		errs = append(errs, "MP_SIM_NODES (--sim-nodes) must be between 0 and 1000")
	}
	if c.DemoTraffic < 0 || c.DemoTraffic > 1000 {
		errs = append(errs, "MP_DEV_DEMO_TRAFFIC (--demo-traffic) must be between 0 and 1000 requests per second")
	}
	if c.CPUNodes < 0 || c.CPUNodes > 16 {
		errs = append(errs, "MP_DEV_CPU_NODES (--cpu-nodes) must be between 0 and 16")
	}
	if n := max(c.SimNodes, 0) + max(c.CPUNodes, 0); n > 0 && (c.SimPortBase < 1024 || c.SimPortBase+n*SimPortsPerNode-1 > 65535) {
		errs = append(errs, fmt.Sprintf("MP_SIM_PORT_BASE (--sim-port-base) must leave %d ports per node (simulated and CPU) between 1024 and 65535", SimPortsPerNode))
	}
	if c.CPUNodes > 0 {
		if c.CPUNodeCores < 1 || c.CPUNodeCores > 256 {
			errs = append(errs, "MP_DEV_CPU_NODE_CPUS (--cpu-node-cpus) must be between 1 and 256")
		}
		if _, err := agent.ParseMemory(c.CPUNodeMemory); err != nil {
			errs = append(errs, "MP_DEV_CPU_NODE_MEMORY (--cpu-node-memory) "+err.Error())
		}
	}
	if c.SimGPUsPerNode < 1 || c.SimGPUsPerNode > 16 {
		errs = append(errs, "MP_SIM_GPUS_PER_NODE (--sim-gpus-per-node) must be between 1 and 16")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, "MP_LOG_LEVEL (--log-level) "+err.Error())
	}
	if len(errs) > 0 {
		return errors.New("invalid configuration:\n  " + strings.Join(errs, "\n  "))
	}
	return nil
}

// Dev is a running `modelplane dev`; Ready is closed once it serves.
type Dev struct {
	Ready   chan struct{}
	BaseURL string
	// AdminURL is the control plane's admin listener (/metrics);
	// GatewayAdminURL the gateway's, "off" without a gateway.
	AdminURL        string
	GatewayAdminURL string
	EnvFile         string
	// Backfilled is closed once the demo's week of history is stored (or
	// failed to be, which dev logs); set when Ready closes.
	Backfilled <-chan struct{}
}

// RunDev runs everything on one machine until ctx ends: private PostgreSQL and
// ClickHouse child processes, embedded NATS, the development identity
// provider, demo data and the portal/API. Everything started is stopped on
// return; data stays in cfg.Dir for the next run.
func RunDev(ctx context.Context, cfg DevConfig, out io.Writer, d *Dev) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := NewLogger(cfg.LogLevel)
	dropSharedAgentToken(log)
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The addresses the caller chose are taken first, before PostgreSQL,
	// ClickHouse and NATS pick free ports of their own, which could
	// otherwise be one of them (a test that picked free ports for dev met
	// "address already in use" that way).
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s (MP_HTTP_ADDR): %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	adm, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("listen %s (MP_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	defer adm.Close()
	var gwLn net.Listener
	if cfg.GatewayAddr != "" {
		if gwLn, err = net.Listen("tcp", cfg.GatewayAddr); err != nil {
			return fmt.Errorf("listen %s (MP_GATEWAY_ADDR): %w", cfg.GatewayAddr, err)
		}
		defer gwLn.Close()
	}
	baseURL := "http://" + cfg.HTTPAddr
	idp, err := devidp.Start(devidp.Config{Addr: cfg.IdPAddr, ClientID: "modelplane-dev", ClientSecret: "modelplane-dev-secret",
		RedirectURLs: []string{baseURL + "/auth/callback"}, PublicClients: []string{DevCLIClientID}})
	if err != nil {
		return fmt.Errorf("development identity provider: %w", err)
	}
	defer idp.Close()

	st, err := startDevStores(ctx, dir, out, log)
	if err != nil {
		return err
	}
	defer st.close()
	pool, chConn, nc := st.pool, st.ch, st.nc
	// The one real clock of the control plane: every service and loop
	// gets it from here.
	clock := quartz.NewReal()
	oidc, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: idp.Issuer(), ClientID: idp.ClientID(), ClientSecret: idp.ClientSecret(),
		RedirectURL: baseURL + "/auth/callback", CLIClientID: DevCLIClientID}, pool, clock)
	if err != nil {
		return fmt.Errorf("oidc: %w", err)
	}
	artifactDir := filepath.Join(dir, "artifacts")
	var devUsers []handlers.DevUser
	for _, u := range idp.Users() {
		devUsers = append(devUsers, handlers.DevUser{Email: u.Email, Description: u.Description})
	}
	// Nodes enroll as in production: the authority mints their
	// credentials and a system-user connection pushes revocations.
	sysCred, err := st.natsAuth.SystemUser()
	if err != nil {
		return err
	}
	reconnected := make(chan struct{}, 1)
	snc, err := nats.Connect(st.natsURL, append(sysCred.Options(), bus.ErrorLogger(log), nats.Name("modelplane-dev-system"), nats.MaxReconnects(-1),
		nats.ReconnectHandler(signalOn(reconnected)))...)
	if err != nil {
		return fmt.Errorf("connect nats as the system user: %w", err)
	}
	defer snc.Close()
	keys, err := devSecretKey(dir)
	if err != nil {
		return err
	}
	// The demo is seeded before the fleet starts; its first placement
	// waits (up to a minute) for every dev node to report, so the demo's
	// replicas land where they would on a running fleet (support-chat on
	// its MIG slice) rather than on the first node to report.
	fleetNodes, holdUntil := cfg.SimNodes+cfg.CPUNodes, time.Now().Add(time.Minute)
	hold := func(nodes int) bool { return nodes < fleetNodes && time.Now().Before(holdUntil) }
	tp, err := controlPlaneTracer(ctx, log)
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: chConn, NC: nc}, controlplane.Config{Log: log, OIDC: oidc, Clock: clock, HoldPlacement: hold, Tracer: tp,
		SecretKeys: keys, Alertmanager: cfg.AlertmanagerURL,
		ArtifactDir: artifactDir, MaxUploadBytes: cfg.MaxUploadMB << 20, RuntimeBinary: cfg.RuntimeBinary,
		Sessions:  auth.SessionConfig{IdleTimeout: 8 * time.Hour, AbsoluteTimeout: 24 * time.Hour},
		Authority: st.natsAuth, Push: func(ctx context.Context) error { return st.natsAuth.Push(ctx, snc) }, Reconnected: reconnected})
	if err != nil {
		return err
	}
	h := NewHTTP(cp, HTTPOptions{DevUsers: devUsers, MaxUploadBytes: cfg.MaxUploadMB << 20, Ready: readiness(pool, chConn, nc), PublicURL: baseURL,
		Tracer: tp})
	if err := seedDemo(ctx, cp, idp); err != nil {
		return fmt.Errorf("demo data: %w", err)
	}
	// The demo's week of history is stored while the rest starts; a run
	// stopped before it ends stores the missing days the next time.
	outdated := demoOutdated(ctx, cp)
	bfCtx, cancelBackfill := context.WithCancel(ctx)
	bfDone := make(chan struct{})
	go func() {
		defer close(bfDone)
		if outdated {
			return
		}
		began := time.Now()
		if err := backfillDemo(bfCtx, cp, chConn, dir, began); err != nil {
			if bfCtx.Err() == nil {
				log.Error("demo history not backfilled", slog.String("error", err.Error()))
			}
			return
		}
		log.Info("demo history backfilled", slog.Duration("took", time.Since(began)))
	}()
	defer func() {
		cancelBackfill()
		<-bfDone
	}()
	envFile := filepath.Join(dir, "dev.env")
	if err := writeDevEnv(ctx, envFile, baseURL, st.natsURL, st.natsCreds, st.clickhouseURL, cp); err != nil {
		return fmt.Errorf("dev credentials: %w", err)
	}
	adminURL := "http://" + adm.Addr().String()
	if err := cp.Start(ctx); err != nil {
		return err
	}
	defer cp.Stop()
	if cfg.SimNodes > 0 {
		stopFleet, err := startSimFleet(ctx, log, simFleet{natsURL: st.natsURL, enroll: cp.Enrollment, dir: filepath.Join(dir, "fleet"),
			nodes: cfg.SimNodes, gpus: cfg.SimGPUsPerNode, portBase: cfg.SimPortBase})
		if err != nil {
			return err
		}
		defer stopFleet()
	}
	cpuMemoryMB := 0
	if cfg.CPUNodes > 0 {
		cpuMemoryMB, _ = agent.ParseMemory(cfg.CPUNodeMemory) // checked by Validate
		stopNodes, err := startDevCPUNodes(ctx, log, cfg, dir, st, cp, loopbackURL(ln.Addr()))
		if err != nil {
			return err
		}
		defer stopNodes()
	}
	gatewayURL, gatewayAdminURL := "off (MP_GATEWAY_ADDR is empty)", "off"
	trafficRate := 0.0
	if cfg.GatewayAddr != "" {
		gatewayURL = "http://" + cfg.GatewayAddr
		gwCred, err := st.natsAuth.Gateway("dev")
		if err != nil {
			return err
		}
		gnc, err := nats.Connect(st.natsURL, append(gwCred.Options(), bus.ErrorLogger(log), nats.Name("modelplane-gateway"), nats.MaxReconnects(-1))...)
		if err != nil {
			return fmt.Errorf("gateway: connect nats: %w", err)
		}
		defer gnc.Close()
		gwAdmin, stopGateway, err := startDevGateway(ctx, log, gnc, dir, gwLn, cfg.GatewayAdminAddr, envFile)
		if err != nil {
			return err
		}
		gatewayAdminURL = "http://" + gwAdmin
		defer stopGateway()
		// The portal's "Try it" sends through the gateway as the platform
		// admin: a development convenience only; server leaves it off.
		h.GatewayURL, h.GatewayKey = gatewayURL, readEnvFile(envFile)["MP_ADMIN_KEY"]
		if cfg.DemoTraffic > 0 {
			stopTraffic, err := startDemoTraffic(ctx, log, gatewayURL, readEnvFile(envFile), cfg.DemoTraffic, !outdated, cfg.CPUNodes > 0)
			if err != nil {
				return err
			}
			defer stopTraffic()
			trafficRate = cfg.DemoTraffic
		}
	}
	printDevBanner(out, devBanner{base: baseURL, issuer: idp.Issuer(), envFile: envFile, nats: st.natsURL, dir: dir,
		gateway: gatewayURL, nodes: cfg.SimNodes, gpus: cfg.SimGPUsPerNode, admin: adminURL, gatewayAdmin: gatewayAdminURL,
		cpuNodes: cfg.CPUNodes, cpuCores: cfg.CPUNodeCores, cpuMemoryMB: cpuMemoryMB, traffic: trafficRate, outdated: outdated})
	if d != nil {
		d.BaseURL, d.AdminURL, d.GatewayAdminURL, d.EnvFile, d.Backfilled = baseURL, adminURL, gatewayAdminURL, envFile, bfDone
		close(d.Ready)
	}
	return serveWithAdmin(ctx, log, ln, httpServer(h.Handler()), apiDrain, adm, h.AdminHandler())
}

// devStores are the private PostgreSQL, ClickHouse and embedded NATS of
// `modelplane dev` and the connections to them; close stops everything in
// reverse order of its start.
type devStores struct {
	pool                   *pgxpool.Pool
	ch                     driver.Conn
	nc                     *nats.Conn
	natsURL, clickhouseURL string
	// natsAuth mints the credentials of dev's gateway and nodes;
	// natsCreds is the control plane's creds file, for dev.env.
	natsAuth  *bus.Authority
	natsCreds string
	closers   []func()
}

func (s *devStores) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// startDevStores starts the stores under dir and opens them, migrated.
func startDevStores(ctx context.Context, dir string, out io.Writer, log *slog.Logger) (st *devStores, err error) {
	st = &devStores{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	fmt.Fprintln(out, "starting PostgreSQL, ClickHouse and NATS under", dir)
	pgDir := filepath.Join(dir, "postgres")
	if err := pgproc.Reachable(pgDir); err != nil {
		// Run as root from a directory the postgres user cannot enter (a
		// checkout under /root): keep the cluster in a directory of its own,
		// named after this state directory so the next run finds it again.
		sum := sha256.Sum256([]byte(dir))
		pgDir = filepath.Join("/var/lib/modelplane", hex.EncodeToString(sum[:8]), "postgres")
		if err := os.MkdirAll(filepath.Dir(pgDir), 0o755); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "the postgres user cannot reach %s; PostgreSQL keeps its data in %s\n", dir, pgDir)
	}
	pg, err := pgproc.Start(ctx, pgDir)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, pg.Stop)
	if err := createDatabase(ctx, pg.URL("postgres"), "modelplane"); err != nil {
		return nil, err
	}
	ch, err := chproc.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, ch.Stop)
	// NATS runs with the production permissions: the authority is kept
	// with its data (JetStream stores under the account's key), and every
	// process of dev connects with a credential of its own.
	natsDir := filepath.Join(dir, "nats")
	if st.natsAuth, err = bus.LoadOrCreateAuthority(filepath.Join(natsDir, "authority.json")); err != nil {
		return nil, err
	}
	ns, err := bus.StartEmbedded(natsDir, st.natsAuth, log)
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, ns.Shutdown)
	st.natsURL, st.clickhouseURL = ns.ClientURL(), ch.URL("modelplane")
	cpCred, err := st.natsAuth.ControlPlane()
	if err != nil {
		return nil, err
	}
	st.natsCreds = filepath.Join(natsDir, "control-plane.creds")
	if err := cpCred.WriteFile(st.natsCreds); err != nil {
		return nil, err
	}
	pool, chConn, nc, err := openStores(ctx, pg.URL("modelplane"), st.clickhouseURL, st.natsURL, append(cpCred.Options(), bus.ErrorLogger(log)))
	if err != nil {
		return nil, err
	}
	st.pool, st.ch, st.nc = pool, chConn, nc
	st.closers = append(st.closers, pool.Close, func() { chConn.Close() }, nc.Close)
	return st, nil
}

// devBanner is what `modelplane dev` tells a newcomer once it serves.
type devBanner struct {
	base, issuer, envFile, nats, dir, gateway, admin, gatewayAdmin string
	nodes, gpus                                                    int
	cpuNodes, cpuCores, cpuMemoryMB                                int
	traffic                                                        float64
	// outdated says the directory holds the simulated fraud model of an
	// earlier release.
	outdated bool
}

func printDevBanner(out io.Writer, b devBanner) {
	fmt.Fprintf(out, `
modelplane dev is running.

  portal   %[1]s
           sign in with SSO: the development identity provider (%[2]s) lists the demo
           users (platform admin, risk admin/engineer/viewer, search admin, finance); no password.
  API      %[1]s/api/v1   (OpenAPI: %[1]s/api/v1/openapi.json)
           source %[3]s   # MP_API, MP_ADMIN_KEY, MP_RISK_KEY, MP_SEARCH_KEY, MP_FINANCE_KEY
           curl -H "Authorization: Bearer $MP_RISK_KEY" $MP_API/endpoints
           modelplane endpoints list   # the CLI: MP_API and MP_API_KEY (the risk admin's key)
  gateway  %[6]s   (MP_GATEWAY; inference: POST /v1/endpoints/{endpoint}/predict, …/chat/completions)
           curl -H "Authorization: Bearer $MP_RISK_KEY" $MP_GATEWAY/v1/endpoints/fraud-scoring/predict \
                -d '{"instances":[{"amount":42.5,"merchant_category":"grocery","country":"US","hour_of_day":14,"account_age_days":800,"distance_km":3.2}]}'
           OpenAI clients: base URL $MP_GATEWAY/v1, API key $MP_SEARCH_KEY, model support-chat
           (simulated GPUs) or chat-cpu (a real tiny GGUF LLM on the CPU nodes)
           search's document-processor graph, shared with risk (tokenizer → embedder → classifier):
           curl -H "Authorization: Bearer $MP_RISK_KEY" $MP_GATEWAY/v1/endpoints/document-processor/predict \
                -d '{"instances":[{"text":"Please find attached invoice 4521 for $1,250.00."}]}'
  metrics  %[9]s/metrics (control plane), %[10]s/metrics (gateway): loopback only
  fleet    %[7]d simulated nodes of %[8]d GPUs (Fleet page, GET $MP_API/nodes)
           %[11]s
  demo     %[12]s
           a week of backfilled usage, statistics and samples: charts, drift and chargeback have data
  NATS     %[4]s   (MP_NATS_URL, MP_NATS_CREDS in dev.env: the control plane's credential)
  data     %[5]s (kept between runs; delete it to start over)

%[13]sCtrl-C stops everything.
`, b.base, b.issuer, b.envFile, b.nats, b.dir, b.gateway, b.nodes, b.gpus, b.admin, b.gatewayAdmin, b.cpuLine(), b.trafficLine(), b.outdatedNote())
}

func (b devBanner) outdatedNote() string {
	if !b.outdated {
		return ""
	}
	return fmt.Sprintf(`NOTE     %[1]s was made by an earlier modelplane: its fraud-detector is the simulated
           one, and versions are immutable. For the real fraud model, demo traffic and the
           backfilled week, stop dev, delete the directory and run again:
               rm -rf %[1]s && make run
           (this deletes the demo's data and everything made with it.)

`, b.dir)
}

func (b devBanner) trafficLine() string {
	if b.traffic <= 0 {
		return "no demo traffic (--demo-traffic=0)"
	}
	to := "fraud-scoring and support-chat"
	if b.cpuNodes > 0 {
		to = "fraud-scoring, support-chat and document-processor"
	}
	return fmt.Sprintf("%g requests/s of demo traffic to %s, the amounts drifting up (--demo-traffic=0 stops it)", b.traffic, to)
}

func (b devBanner) cpuLine() string {
	if b.cpuNodes == 0 {
		return "no CPU nodes (--cpu-nodes 0)"
	}
	names := cpuNodeName(0)
	if b.cpuNodes > 1 {
		names += "…" + strings.TrimPrefix(cpuNodeName(b.cpuNodes-1), "cpu-node-")
	}
	return fmt.Sprintf("%d CPU nodes (%s) of %d cores and %d MiB: real replicas, the built-in runtime as child processes", b.cpuNodes, names, b.cpuCores, b.cpuMemoryMB)
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// readEnvFile reads KEY=value lines.
func readEnvFile(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			out[k] = strings.Trim(v, `"'`)
		}
	}
	return out
}
