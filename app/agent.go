package app

import (
	"context"
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

	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/agent/cache"
	"modelplane/agent/process"
	"modelplane/agent/proto"
	"modelplane/bus"
	"modelplane/egress"
)

// AgentConfig configures `modelplane agent`.
type AgentConfig struct {
	NATS bus.ClientConfig
	// Driver runs the replicas: "sim" (in this process) or "process" (a
	// child process per replica, from the runtime catalogue).
	Driver string
	Node   string
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
	// EgressAllowLoopback lets the artifact downloads reach a control
	// plane on a loopback address (one machine, as in development); off,
	// they dial only ControlPlaneURL's host and never a loopback,
	// link-local or metadata address.
	EgressAllowLoopback bool
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
	fs.StringVar(&c.Driver, "driver", env("MP_AGENT_DRIVER", "sim"), "replica driver: sim or process (MP_AGENT_DRIVER)")
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
	fs.StringVar(&c.RuntimeUser, "runtime-user", env("MP_AGENT_RUNTIME_USER", process.DefaultRunAs), "process driver: user runtimes run as when the agent is root; nobody when it does not exist (MP_AGENT_RUNTIME_USER)")
	stopDefault, _ := strconv.ParseBool(env("MP_AGENT_STOP_REPLICAS_ON_EXIT", "false"))
	fs.BoolVar(&c.StopReplicas, "stop-replicas-on-exit", stopDefault, "process driver: stop the runtimes when the agent exits instead of leaving them to the next agent (MP_AGENT_STOP_REPLICAS_ON_EXIT)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
	fs.StringVar(&c.ControlPlaneURL, "control-plane", env("MP_CONTROL_PLANE_URL", ""), "control plane URL the agent fetches model files from; empty fetches none (MP_CONTROL_PLANE_URL)")
	c.AgentToken = Secret(env("MP_AGENT_TOKEN", ""))
	fs.Var(secretFlag{&c.AgentToken}, "agent-token", "credential for fetching model files, the control plane's MP_AGENT_TOKEN (MP_AGENT_TOKEN)")
	fs.StringVar(&c.CacheDir, "cache-dir", env("MP_AGENT_CACHE_DIR", ""), "node artifact cache; keep it across restarts (MP_AGENT_CACHE_DIR; default <state-dir>/cache)")
	loopbackDefault, _ := strconv.ParseBool(env("MP_AGENT_EGRESS_ALLOW_LOOPBACK", "false"))
	fs.BoolVar(&c.EgressAllowLoopback, "egress-allow-loopback", loopbackDefault, "let artifact downloads reach a control plane on a loopback address (MP_AGENT_EGRESS_ALLOW_LOOPBACK)")
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
	errs = append(errs, c.NATS.Validate()...)
	if c.Driver != "sim" && c.Driver != "process" {
		bad("MP_AGENT_DRIVER (--driver) %q: want sim or process", c.Driver)
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
		if c.AgentToken == "" {
			bad("MP_AGENT_TOKEN (--agent-token) is required with MP_CONTROL_PLANE_URL: the control plane serves model files only to agents that present it")
		}
	}
	if c.CacheBytes <= 0 {
		bad("MP_AGENT_CACHE_BYTES (--cache-bytes) must be a positive number of bytes")
	}
	var gpus []proto.GPU
	var memMB int
	var err error
	if len(c.GPUs) > 0 || len(c.MIG) > 0 || c.CPUs == 0 && c.Memory == "" {
		gpus, err = agent.ParseInventory(c.GPUs, strings.Join(c.MIG, ","))
		if err != nil {
			bad("MP_AGENT_GPUS / MP_AGENT_MIG (--gpus / --mig): %v; or --cpus and --memory for a CPU node", err)
		}
	}
	if c.Memory != "" {
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
		CPUCores:      c.CPUs,
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

// RunAgent runs `modelplane agent` until ctx ends, then stops the agent and
// its replicas. It starts even while NATS is unreachable: the agent serves
// what its state file records and connects when NATS comes.
func RunAgent(ctx context.Context, c AgentConfig) error {
	cfg, err := c.agentConfig()
	if err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	nc, err := connectNATS(c.NATS, log, "modelplane-agent-"+cfg.Node,
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		// Nothing waits in the client while NATS is away: heartbeats are
		// skipped and usage waits in the agent's own spool on disk.
		nats.ReconnectBufSize(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.ControlPlaneURL != "" {
		cc, err := cache.New(cache.Config{Dir: c.cacheDir(), LimitBytes: c.CacheBytes, URL: c.ControlPlaneURL,
			Token: string(c.AgentToken), Egress: &egress.Policy{AllowLoopback: c.EgressAllowLoopback}, Log: log.With(slog.String("node", cfg.Node))})
		if err != nil {
			return err
		}
		cfg.Cache = cc
	}
	var stop func(context.Context)
	switch c.Driver {
	case "process":
		user := c.RuntimeUser
		if user == process.DefaultRunAs {
			user = "" // the driver falls back to nobody when it is missing
		}
		drv, err := process.New(process.Config{StateDir: filepath.Join(cfg.StateDir, "process"), ModelRoot: c.ModelRoot, RunAs: user, Log: log})
		if err != nil {
			return err
		}
		cfg.Driver = drv
		if c.StopReplicas {
			stop = drv.Close
		}
	default:
		drv := agent.NewSimDriver(agent.SimDriverConfig{LoadDelay: c.LoadDelay, Log: log})
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
	log.Info("modelplane agent running", slog.String("node", cfg.Node), slog.Int("gpus", len(cfg.GPUs)), slog.Int("cpus", cfg.CPUCores), slog.Int("memory_mb", cfg.MemoryMB), slog.String("state_dir", cfg.StateDir))
	<-ctx.Done()
	a.Stop()
	if stop != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stop(stopCtx)
	}
	return ctx.Err()
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
