package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/bus"
)

// AgentConfig configures `modelplane agent`.
type AgentConfig struct {
	NATS bus.ClientConfig
	// Driver runs the replicas: only "sim" for now.
	Driver string
	Node   string
	// GPUs and MIG are the --gpus and --mig specs, each possibly repeated;
	// agent.ParseInventory reads them.
	GPUs          []string
	MIG           []string
	StateDir      string
	Lease         time.Duration
	Heartbeat     time.Duration
	SpoolMaxBytes int64
	// LoadDelay is how long a sim replica takes to load its model.
	LoadDelay time.Duration
	LogLevel  string
}

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
	fs.StringVar(&c.Driver, "driver", env("MP_AGENT_DRIVER", "sim"), "replica driver: sim (MP_AGENT_DRIVER)")
	fs.StringVar(&c.Node, "node", env("MP_AGENT_NODE", hostNode()), "node name, its key in mp_desired (MP_AGENT_NODE; default the host name)")
	if v := env("MP_AGENT_GPUS", ""); v != "" {
		c.GPUs = []string{v}
	}
	fs.Var(listFlag{&c.GPUs}, "gpus", "GPUs in index order, repeatable or comma-separated, as in 4xA100-80GB,4xH100-80GB (MP_AGENT_GPUS)")
	if v := env("MP_AGENT_MIG", ""); v != "" {
		c.MIG = []string{v}
	}
	fs.Var(listFlag{&c.MIG}, "mig", "MIG layouts GPU:LAYOUT, repeatable or comma-separated, as in 0:7x1g.10gb,1:3g.40gb+4g.40gb (MP_AGENT_MIG)")
	fs.StringVar(&c.StateDir, "state-dir", env("MP_AGENT_STATE_DIR", ".modelplane/agent"), "replica state and usage spool; keep it across restarts (MP_AGENT_STATE_DIR)")
	fs.DurationVar(&c.Lease, "lease", envDuration("MP_AGENT_LEASE", agent.DefaultLease), "how long the node stays alive without a heartbeat (MP_AGENT_LEASE)")
	fs.DurationVar(&c.Heartbeat, "heartbeat", envDuration("MP_AGENT_HEARTBEAT", agent.DefaultHeartbeat), "heartbeat interval, at most half the lease (MP_AGENT_HEARTBEAT)")
	fs.Int64Var(&c.SpoolMaxBytes, "spool-max-bytes", envInt("MP_AGENT_SPOOL_MAX_BYTES", agent.DefaultSpoolMaxBytes), "bound of the usage spool on disk (MP_AGENT_SPOOL_MAX_BYTES)")
	fs.DurationVar(&c.LoadDelay, "sim-load-delay", envDuration("MP_AGENT_SIM_LOAD_DELAY", 0), "sim driver: how long a replica takes to load (MP_AGENT_SIM_LOAD_DELAY)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
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
	if c.Driver != "sim" {
		bad("MP_AGENT_DRIVER (--driver) %q: only sim is available", c.Driver)
	}
	if c.LoadDelay < 0 {
		bad("MP_AGENT_SIM_LOAD_DELAY (--sim-load-delay) must not be negative")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("MP_LOG_LEVEL (--log-level) %v", err)
	}
	gpus, err := agent.ParseInventory(c.GPUs, strings.Join(c.MIG, ","))
	if err != nil {
		bad("MP_AGENT_GPUS / MP_AGENT_MIG (--gpus / --mig): %v", err)
	}
	cfg := agent.Config{
		Node:          c.Node,
		GPUs:          gpus,
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
	drv := agent.NewSimDriver(agent.SimDriverConfig{LoadDelay: c.LoadDelay, Log: log})
	cfg.Driver = drv
	a, err := agent.New(cfg, nc, log)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	log.Info("modelplane agent running", slog.String("node", cfg.Node), slog.Int("gpus", len(cfg.GPUs)), slog.String("state_dir", cfg.StateDir))
	<-ctx.Done()
	a.Stop()
	// The sim driver's replicas live in this process; end them cleanly.
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drv.Close(stopCtx)
	return ctx.Err()
}
