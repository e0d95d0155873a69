package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/agent/cache"
	"modelplane/agent/cluster"
	"modelplane/agent/process"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/egress"
	"modelplane/enrollment"
	"modelplane/runtime/onnx"
	"modelplane/tlscert"
)

// AgentConfig configures `modelplane agent`.
type AgentConfig struct {
	NATS bus.ClientConfig
	// Driver runs the replicas: "sim" (in this process), "process" (a
	// child process per replica, from the runtime catalogue) or
	// "kubernetes" (a pod per replica in a cluster, which is the pool).
	Driver string
	// Kube configures the kubernetes driver.
	Kube KubeConfig
	Node string
	// GPUs and MIG are the --gpus and --mig specs, each possibly repeated;
	// agent.ParseInventory reads them.
	GPUs []string
	MIG  []string
	// CPUs and Memory make a CPU node (no --gpus): whole cores, and a
	// size agent.ParseMemory reads.
	CPUs          int
	Memory        string
	StateDir      string
	Lease         time.Duration
	Heartbeat     time.Duration
	SpoolMaxBytes int64
	// LoadDelay is how long a sim replica takes to load its model.
	LoadDelay time.Duration
	// ModelRoot is the process driver's directory of model directories,
	// <root>/<model>/<version>, until the artifact cache hands the driver
	// a verified directory per replica.
	ModelRoot string
	// RuntimeUser is who the process driver's runtimes run as when the
	// agent runs as root.
	RuntimeUser string
	// RuntimeUIDs and RuntimeCgroup are process.Config.UIDs and Cgroup:
	// the per-replica users and the cgroup v2 directory for memory limits.
	RuntimeUIDs, RuntimeCgroup string
	// StopReplicas makes the process driver's runtimes end with the agent;
	// by default they keep serving and the next agent adopts them.
	StopReplicas bool
	LogLevel     string
	// ControlPlaneURL is where the agent fetches artifacts; "" keeps no
	// cache and fetches nothing (enough for sim replicas).
	ControlPlaneURL string
	// AgentToken is the credential artifact requests carry.
	AgentToken Secret
	// CacheDir holds the node's artifact cache; "" is <state dir>/cache.
	CacheDir string
	// CacheBytes bounds the cache (evicting from 80 % to 70 %).
	CacheBytes int64
	// Join is a join token to enroll with (--join): exchanged once with the
	// control plane for the node's credentials, which are kept in the state
	// directory and used by every later start without a token.
	Join Secret
	// RotateEvery is how often an enrolled agent rotates its credentials
	// (0: never).
	RotateEvery time.Duration
	// EgressAllowLoopback lets the artifact downloads reach a control
	// plane on a loopback address (one machine, as in development); off,
	// they dial only ControlPlaneURL's host and never a loopback,
	// link-local or metadata address.
	EgressAllowLoopback bool
	// TLS is the certificate and key every replica's address serves
	// (MP_TLS_CERT, MP_TLS_KEY; it must name the node's host) and the CA
	// bundle the agent trusts for the control plane and its own replicas
	// (MP_TLS_CA).
	TLS tlscert.Files

	// pool is the cluster's inventory once the kubernetes driver read it.
	pool *cluster.Inventory
}

// DefaultCacheBytes is the artifact cache's default size.
const DefaultCacheBytes = 50 << 30

// listFlag is a repeatable string flag.
type listFlag struct{ v *[]string }

func (f listFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

func (f listFlag) Set(s string) error { *f.v = append(*f.v, s); return nil }

// Flags registers the agent settings on fs, with MP_* environment variables
// as defaults.
func (c *AgentConfig) Flags(fs *flag.FlagSet) {
	natsFlags(fs, &c.NATS, "nats", nats.DefaultURL)
	fs.StringVar(&c.Driver, "driver", env("MP_AGENT_DRIVER", "sim"), "replica driver: sim, process or kubernetes (MP_AGENT_DRIVER)")
	c.Kube.Flags(fs)
	fs.StringVar(&c.Node, "node", env("MP_AGENT_NODE", hostNode()), "node name, its key in mp_desired (MP_AGENT_NODE; default the host name)")
	if v := env("MP_AGENT_GPUS", ""); v != "" {
		c.GPUs = []string{v}
	}
	fs.Var(listFlag{&c.GPUs}, "gpus", "GPUs in index order, repeatable or comma-separated, as in 4xA100-80GB,4xH100-80GB (MP_AGENT_GPUS)")
	if v := env("MP_AGENT_MIG", ""); v != "" {
		c.MIG = []string{v}
	}
	fs.Var(listFlag{&c.MIG}, "mig", "MIG layouts GPU:LAYOUT, repeatable or comma-separated, as in 0:7x1g.10gb,1:3g.40gb+4g.40gb (MP_AGENT_MIG)")
	fs.IntVar(&c.CPUs, "cpus", int(envInt("MP_AGENT_CPUS", 0)), "a CPU node's whole cores for replicas, with --memory and without --gpus (MP_AGENT_CPUS)")
	fs.StringVar(&c.Memory, "memory", env("MP_AGENT_MEMORY", ""), "a CPU node's memory for replicas, as 65536 (MiB) or 64GB (MP_AGENT_MEMORY)")
	fs.StringVar(&c.StateDir, "state-dir", env("MP_AGENT_STATE_DIR", ".modelplane/agent"), "replica state and usage spool; keep it across restarts (MP_AGENT_STATE_DIR)")
	fs.DurationVar(&c.Lease, "lease", envDuration("MP_AGENT_LEASE", agent.DefaultLease), "how long the node stays alive without a heartbeat (MP_AGENT_LEASE)")
	fs.DurationVar(&c.Heartbeat, "heartbeat", envDuration("MP_AGENT_HEARTBEAT", agent.DefaultHeartbeat), "heartbeat interval, at most half the lease (MP_AGENT_HEARTBEAT)")
	fs.Int64Var(&c.SpoolMaxBytes, "spool-max-bytes", envInt("MP_AGENT_SPOOL_MAX_BYTES", agent.DefaultSpoolMaxBytes), "bound of the usage spool on disk (MP_AGENT_SPOOL_MAX_BYTES)")
	fs.DurationVar(&c.LoadDelay, "sim-load-delay", envDuration("MP_AGENT_SIM_LOAD_DELAY", 0), "sim driver: how long a replica takes to load (MP_AGENT_SIM_LOAD_DELAY)")
	fs.StringVar(&c.ModelRoot, "model-root", env("MP_AGENT_MODEL_ROOT", ""), "process driver: model directories as ROOT/<model>/<version> (MP_AGENT_MODEL_ROOT)")
	fs.StringVar(&c.RuntimeUIDs, "runtime-uids", env("MP_AGENT_RUNTIME_UIDS", ""), "process driver: FIRST-LAST uids, one per replica, when the agent is root; empty for 1500000000-1500065535, shared for all as --runtime-user (MP_AGENT_RUNTIME_UIDS)")
	fs.StringVar(&c.RuntimeCgroup, "runtime-cgroup", env("MP_AGENT_RUNTIME_CGROUP", ""), "process driver: cgroup v2 directory delegated for replicas' memory limits; empty to make one when the agent is in the root cgroup, none for RLIMIT_AS only (MP_AGENT_RUNTIME_CGROUP)")
	fs.StringVar(&c.RuntimeUser, "runtime-user", env("MP_AGENT_RUNTIME_USER", process.DefaultRunAs), "process driver: user runtimes run as when the agent is root; nobody when it does not exist (MP_AGENT_RUNTIME_USER)")
	stopDefault, _ := strconv.ParseBool(env("MP_AGENT_STOP_REPLICAS_ON_EXIT", "false"))
	fs.BoolVar(&c.StopReplicas, "stop-replicas-on-exit", stopDefault, "process driver: stop the runtimes when the agent exits instead of leaving them to the next agent (MP_AGENT_STOP_REPLICAS_ON_EXIT)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
	fs.StringVar(&c.ControlPlaneURL, "control-plane", env("MP_CONTROL_PLANE_URL", ""), "control plane URL the agent fetches model files from; empty fetches none (MP_CONTROL_PLANE_URL)")
	c.AgentToken = Secret(env("MP_AGENT_TOKEN", ""))
	fs.Var(secretFlag{&c.AgentToken}, "agent-token", "credential for fetching model files, the control plane's MP_AGENT_TOKEN (MP_AGENT_TOKEN)")
	c.Join = Secret(env("MP_AGENT_JOIN_TOKEN", ""))
	fs.Var(secretFlag{&c.Join}, "join", "join token from a platform admin: enroll this node once and keep its credentials in the state directory (MP_AGENT_JOIN_TOKEN)")
	fs.DurationVar(&c.RotateEvery, "rotate-every", envDuration("MP_AGENT_ROTATE_EVERY", DefaultRotateEvery), "how often an enrolled node rotates its credentials; 0 never (MP_AGENT_ROTATE_EVERY)")
	fs.StringVar(&c.CacheDir, "cache-dir", env("MP_AGENT_CACHE_DIR", ""), "node artifact cache; keep it across restarts (MP_AGENT_CACHE_DIR; default <state-dir>/cache)")
	loopbackDefault, _ := strconv.ParseBool(env("MP_AGENT_EGRESS_ALLOW_LOOPBACK", "false"))
	fs.BoolVar(&c.EgressAllowLoopback, "egress-allow-loopback", loopbackDefault, "let artifact downloads reach a control plane on a loopback address (MP_AGENT_EGRESS_ALLOW_LOOPBACK)")
	tlsFlags(fs, &c.TLS, "the node's replicas")
	tlsCAFlag(fs, &c.TLS, "the control plane's and the replicas'")
	fs.Int64Var(&c.CacheBytes, "cache-bytes", envInt("MP_AGENT_CACHE_BYTES", DefaultCacheBytes), "size of the artifact cache; least recently used versions are evicted above 80 % (MP_AGENT_CACHE_BYTES)")
}

// cacheDir is the cache directory the settings name.
func (c *AgentConfig) cacheDir() string {
	if c.CacheDir != "" {
		return c.CacheDir
	}
	return filepath.Join(c.StateDir, "cache")
}

// hostNode is the host name's first label, a valid node name on most
// machines.
func hostNode() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// agentConfig checks the command's settings and turns them into the
// package's; the error names every bad setting.
func (c *AgentConfig) agentConfig() (agent.Config, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	enrolled := c.enrolled()
	for _, e := range c.NATS.Validate() {
		if enrolled && strings.HasPrefix(e, "MP_NATS_CREDS") {
			continue // the enrollment's credential
		}
		errs = append(errs, e)
	}
	if c.Join != "" && c.ControlPlaneURL == "" {
		bad("MP_CONTROL_PLANE_URL (--control-plane) is required with --join: the join token is exchanged there")
	}
	if c.RotateEvery < 0 {
		bad("MP_AGENT_ROTATE_EVERY (--rotate-every) must not be negative")
	}
	if c.Driver != "sim" && c.Driver != "process" && c.Driver != DriverKubernetes {
		bad("MP_AGENT_DRIVER (--driver) %q: want sim, process or kubernetes", c.Driver)
	}
	if c.Driver == DriverKubernetes {
		for _, e := range c.Kube.validate() {
			bad("%s", e)
		}
		if c.Kube.ServerName != "" && c.TLS.Cert == "" {
			bad("MP_KUBE_SERVER_NAME (--kube-server-name) needs MP_TLS_CERT: the pods serve TLS with the agent's certificate")
		}
	}
	if c.LoadDelay < 0 {
		bad("MP_AGENT_SIM_LOAD_DELAY (--sim-load-delay) must not be negative")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("MP_LOG_LEVEL (--log-level) %v", err)
	}
	if c.ControlPlaneURL != "" {
		if !strings.HasPrefix(c.ControlPlaneURL, "http://") && !strings.HasPrefix(c.ControlPlaneURL, "https://") {
			bad("MP_CONTROL_PLANE_URL (--control-plane) must be an http(s) URL, got %q", c.ControlPlaneURL)
		}
		if u, err := url.Parse(c.ControlPlaneURL); err == nil && !c.EgressAllowLoopback && isLoopbackHost(u.Hostname()) {
			bad("MP_CONTROL_PLANE_URL (--control-plane) %q is a loopback address: set MP_AGENT_EGRESS_ALLOW_LOOPBACK (--egress-allow-loopback) to download from it", c.ControlPlaneURL)
		}
		if c.AgentToken == "" && !enrolled {
			bad("MP_AGENT_TOKEN (--agent-token) is required with MP_CONTROL_PLANE_URL: the control plane serves model files only to agents that present it")
		}
	}
	errs = append(errs, tlsProblems(c.TLS)...)
	if c.CacheBytes <= 0 {
		bad("MP_AGENT_CACHE_BYTES (--cache-bytes) must be a positive number of bytes")
	}
	var gpus []busapi.GPU
	var memMB int
	var err error
	cpus := c.CPUs
	switch {
	case c.Driver == DriverKubernetes:
		// The pool's inventory is the cluster's nodes', read at start.
		if c.pool != nil {
			gpus, cpus, memMB = c.pool.GPUs, c.pool.CPUCores, c.pool.MemoryMB
		} else {
			cpus, memMB = 1, 1 // checked once the cluster is read
		}
	case len(c.GPUs) > 0 || len(c.MIG) > 0 || c.CPUs == 0 && c.Memory == "":
		gpus, err = agent.ParseInventory(c.GPUs, strings.Join(c.MIG, ","))
		if err != nil {
			bad("MP_AGENT_GPUS / MP_AGENT_MIG (--gpus / --mig): %v; or --cpus and --memory for a CPU node", err)
		}
	}
	if c.Driver == DriverKubernetes {
		// --cpus and --memory do not apply: the cluster says.
	} else if c.Memory != "" {
		if memMB, err = agent.ParseMemory(c.Memory); err != nil {
			bad("MP_AGENT_MEMORY (--memory): %v", err)
		}
	} else if c.CPUs != 0 {
		bad("MP_AGENT_MEMORY (--memory) is required with --cpus, as in 64GB")
	}
	if c.CPUs < 0 {
		bad("MP_AGENT_CPUS (--cpus) must not be negative")
	}
	cfg := agent.Config{
		Node:          c.Node,
		GPUs:          gpus,
		CPUCores:      cpus,
		MemoryMB:      memMB,
		StateDir:      c.StateDir,
		Lease:         c.Lease,
		Heartbeat:     c.Heartbeat,
		SpoolMaxBytes: c.SpoolMaxBytes,
	}
	if verr := cfg.Validate(); verr != nil {
		for _, line := range strings.Split(verr.Error(), "\n") {
			if err != nil && strings.HasPrefix(line, "gpus:") {
				continue // named above
			}
			bad("%s", line)
		}
	}
	if len(errs) > 0 {
		return agent.Config{}, errors.New("invalid configuration:\n  " + strings.Join(errs, "\n  "))
	}
	return cfg, nil
}

// enrolled reports whether the agent runs on enrollment credentials: a
// join token to exchange, or credentials an earlier exchange kept.
func (c *AgentConfig) enrolled() bool {
	if c.Join != "" {
		return true
	}
	_, err := os.Stat(filepath.Join(c.StateDir, nodeCredsFile))
	return err == nil
}

// enroll returns the node's session: from the join token when there is
// one (exchanged now and kept), else from the kept credentials; nil when
// the agent is not enrolled (it connects with --nats-creds).
func (c *AgentConfig) enroll(ctx context.Context, log *slog.Logger) (*nodeSession, error) {
	roots, err := c.TLS.Client()
	if err != nil {
		return nil, fmt.Errorf("MP_TLS_CA (--tls-ca): %w", err)
	}
	src := newControlPlaneSource(c.ControlPlaneURL, roots)
	var creds enrollment.Credentials
	switch kept, ok, err := loadNodeCreds(c.StateDir); {
	case c.Join != "":
		if creds, err = src.Join(ctx, string(c.Join)); err != nil {
			return nil, err
		}
		if err := saveNodeCreds(c.StateDir, creds); err != nil {
			return nil, err
		}
		log.Info("enrolled", slog.String("node", creds.Node), slog.String("credentials", filepath.Join(c.StateDir, nodeCredsFile)))
	case err != nil:
		return nil, err
	case ok:
		creds = kept
	default:
		return nil, nil
	}
	return newNodeSession(src, c.StateDir, creds, log)
}

// connectEnrolled connects as the session's credential, to the NATS URLs
// and CA the control plane named, or the agent's own settings.
func (c *AgentConfig) connectEnrolled(sess *nodeSession, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	creds := sess.creds.Load()
	nc := c.NATS
	nc.Creds = ""
	if len(creds.NATSURLs) > 0 {
		nc.URL = strings.Join(creds.NATSURLs, ",")
	}
	if creds.NATSCA != "" && nc.CA == "" {
		nc.CA = filepath.Join(c.StateDir, "nats-ca.pem")
		if err := os.WriteFile(nc.CA, []byte(creds.NATSCA), 0o600); err != nil {
			return nil, fmt.Errorf("nats ca: %w", err)
		}
	}
	opts, err := nc.Options(log)
	if err != nil {
		return nil, err
	}
	conn, err := nats.Connect(nc.URL, append(append(sess.Options(), opts...), append([]nats.Option{nats.Name("modelplane-agent-" + creds.Node)}, extra...)...)...)
	if err != nil {
		if hint := bus.Hint(err); hint != "" {
			return nil, fmt.Errorf("connect nats %s: %w (the node's credentials may be revoked, or expired after 48 h without a rotation: enroll again with a new join token)", nc.URL, err)
		}
		return nil, fmt.Errorf("connect nats %s: %w", nc.URL, err)
	}
	sess.Attach(conn)
	return conn, nil
}

// RunAgent runs `modelplane agent` until ctx ends, then stops the agent and
// its replicas. It starts even while NATS is unreachable: the agent serves
// what its state file records and connects when NATS comes.
func RunAgent(ctx context.Context, c AgentConfig) error {
	if _, err := c.agentConfig(); err != nil {
		return err
	}
	if c.Driver == DriverKubernetes {
		if err := c.Kube.connect(ctx); err != nil {
			return err
		}
		c.pool = &c.Kube.inventory
	}
	cfg, err := c.agentConfig()
	if err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	// The one real clock of the agent: everything below gets it from here.
	clock := quartz.NewReal()
	cfg.Clock = clock
	sess, err := c.enroll(ctx, log)
	if err != nil {
		return err
	}
	reconnect := []nats.Option{
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		// Nothing waits in the client while NATS is away: heartbeats are
		// skipped and usage waits in the agent's own spool on disk.
		nats.ReconnectBufSize(-1)}
	var nc *nats.Conn
	if sess != nil {
		// The credentials name the node; the token was made for it.
		cfg.Node = sess.Node()
		nc, err = c.connectEnrolled(sess, log, reconnect...)
	} else {
		nc, err = connectNATS(c.NATS, log, "modelplane-agent-"+cfg.Node, reconnect...)
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.AgentToken != "" {
		warnSharedAgentToken(log, "agent")
	}
	srvTLS, err := c.TLS.Server(log)
	if err != nil {
		return fmt.Errorf("MP_TLS_CERT (--tls-cert): %w", err)
	}
	clientTLS, err := c.TLS.Client()
	if err != nil {
		return fmt.Errorf("MP_TLS_CA (--tls-ca): %w", err)
	}
	var replicaTLS *tls.Config
	if srvTLS != nil {
		replicaTLS = srvTLS.Config()
	}
	var roots *x509.CertPool
	if clientTLS != nil {
		roots = clientTLS.RootCAs
	}
	if c.ControlPlaneURL != "" && c.Driver != DriverKubernetes { // pods fetch their own files
		cc := cache.Config{Dir: c.cacheDir(), LimitBytes: c.CacheBytes, URL: c.ControlPlaneURL,
			Token: string(c.AgentToken), Egress: &egress.Policy{AllowLoopback: c.EgressAllowLoopback, RootCAs: roots}, Log: log.With(slog.String("node", cfg.Node)),
			Clock: clock}
		if sess != nil {
			cc.TokenFunc = sess.ArtifactToken
		}
		fetcher, err := cache.New(cc)
		if err != nil {
			return err
		}
		cfg.Cache = fetcher
	}
	if sess != nil && c.RotateEvery > 0 && c.ControlPlaneURL != "" {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go sess.RotateEvery(rctx, clock, c.RotateEvery)
	}
	var stop func(context.Context)
	switch c.Driver {
	case DriverKubernetes:
		var podTLS *cluster.PodTLS
		if c.TLS.Cert != "" {
			// The agent's certificate is the pool's, which its pods serve.
			podTLS = &cluster.PodTLS{ServerName: c.Kube.ServerName, CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, Roots: roots}
		}
		drv, err := c.Kube.driver(ctx, cfg, c, podTLS, sess, clock, log)
		if err != nil {
			return err
		}
		cfg.Driver = drv
		// Pods outlive the agent; its watches end with it.
		stop = func(context.Context) { drv.Close() }
	case "process":
		user := c.RuntimeUser
		if user == process.DefaultRunAs {
			user = "" // the driver falls back to nobody when it is missing
		}
		drv, err := process.New(process.Config{StateDir: filepath.Join(cfg.StateDir, "process"), Node: cfg.Node, ModelRoot: c.ModelRoot, RunAs: user,
			UIDs: c.RuntimeUIDs, Cgroup: c.RuntimeCgroup, Env: runtimeEnv(), Log: log, Clock: clock,
			TLS: replicaTLS, ClientTLS: clientTLS})
		if err != nil {
			return err
		}
		cfg.Driver = drv
		if c.StopReplicas {
			stop = drv.Close
		}
	default:
		tp, err := simReplicaTracer(ctx, log)
		if err != nil {
			return err
		}
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
		drv := agent.NewSimDriver(agent.SimDriverConfig{LoadDelay: c.LoadDelay, Log: log, TLS: replicaTLS, ClientTLS: clientTLS, Tracer: tp})
		cfg.Driver = drv
		// The sim driver's replicas live in this process; end them cleanly.
		stop = drv.Close
	}
	a, err := agent.New(cfg, nc, log)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	log.Info("modelplane agent running", slog.String("replica_scheme", srvTLS.Scheme()), slog.String("node", cfg.Node), slog.Int("gpus", len(cfg.GPUs)), slog.Int("cpus", cfg.CPUCores), slog.Int("memory_mb", cfg.MemoryMB), slog.String("state_dir", cfg.StateDir))
	<-ctx.Done()
	a.Stop()
	if stop != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stop(stopCtx)
	}
	return ctx.Err()
}

// runtimeEnv is what the agent tells its runtimes of this machine: its
// tracing settings (OTEL_*) and where the ONNX Runtime library is, when the agent finds one ($MP_ONNXRUNTIME_LIB
// or install-deps.sh's), since the runtimes' user has a home of its own.
// The runtimes' user must be able to read it: install it outside a
// private home in production (docs/operations.md).
func runtimeEnv() []string {
	env := tracingEnv()
	lib, err := onnx.LibraryPath()
	if err != nil {
		return env
	}
	if _, err := os.Stat(lib); err != nil {
		return env
	}
	return append(env, onnx.LibraryEnv+"="+lib)
}

// tracingEnv is this process's OTEL_* settings. An agent (dev's CPU nodes
// too) passes them to its runtimes, so that a replica's spans join the
// gateway's trace and leave for the same collector.
func tracingEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// isLoopbackHost reports whether host names this machine: localhost or a
// loopback IP literal (a name that resolves to one is refused at the dial).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
