package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coder/quartz"

	"modelplane/agent/cache"
	"modelplane/busapi"
)

// Defaults for the zero values of Config.
const (
	DefaultLease         = 15 * time.Second
	DefaultHeartbeat     = 3 * time.Second
	DefaultSpoolMaxBytes = 1 << 30
	DefaultAckTimeout    = 5 * time.Second
	DefaultMaxInFlight   = 64
	// DefaultBatchRecords is the most usage records in one MP_USAGE
	// message: a 1,000-record batch is about 300 KB of JSON, well under
	// NATS's default 1 MB payload limit.
	DefaultBatchRecords = 1000
)

// Config describes one node agent. Node, StateDir and an inventory (GPUs,
// or CPUCores and MemoryMB) are required; zero values of the rest take the
// defaults documented on each field.
type Config struct {
	// Node is the node's name: its key in mp_desired and a token of its
	// subjects, so letters, digits, '-' and '_' only.
	Node string
	// GPUs is a GPU node's inventory, as ParseInventory builds it.
	GPUs []busapi.GPU
	// CPUCores and MemoryMB make a CPU node, one without GPUs: the whole
	// cores and the memory, in MiB, its replicas may be given. A node is
	// either a GPU node or a CPU node: a GPU node's host CPUs serve its
	// GPU replicas and are not offered to CPU versions.
	CPUCores int
	MemoryMB int
	// StateDir holds the agent's state file and usage spool; it must
	// survive a restart of the agent and be private to this node.
	StateDir string
	// Lease is how long the control plane keeps the node alive without a
	// heartbeat. Default 15s.
	Lease time.Duration
	// Heartbeat is the interval between heartbeats. Default 3s; at most
	// half the lease, so one lost heartbeat never loses the node.
	Heartbeat time.Duration
	// SpoolMaxBytes bounds the usage spool on disk; batches beyond it are
	// dropped and counted. Default 1 GiB, days of one node's records.
	SpoolMaxBytes int64
	// AckTimeout is how long a usage batch waits for its JetStream ack
	// before it stays in the spool for a later replay. Default 5s.
	AckTimeout time.Duration
	// MaxInFlight bounds the usage batches published and not yet acked.
	// Default 64.
	MaxInFlight int
	// BatchRecords is the most records in one usage batch. Default 1,000.
	BatchRecords int
	// Cache prepares each replica's model directory from the node's
	// artifact cache before the driver starts it. Nil fetches nothing:
	// drivers get no directory (a simulated node).
	Cache *cache.Cache
	// Driver runs the replicas. Nil means a SimDriver the agent owns and
	// closes on Stop; a driver passed in outlives the agent, so another
	// Agent can adopt its replicas.
	Driver Driver
	// Clock is the agent's time: heartbeats, readiness checks, the backoff
	// of failed starts, the meter's seconds and the times in usage records
	// and heartbeats, so that tests move it by hand. Timeouts of single
	// NATS and replica calls are wall-clock time: they time real I/O.
	// Default quartz.NewReal().
	Clock quartz.Clock
}

func (c *Config) defaults() {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.SpoolMaxBytes == 0 {
		c.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.BatchRecords == 0 {
		c.BatchRecords = DefaultBatchRecords
	}
	if c.Clock == nil {
		c.Clock = quartz.NewReal()
	}
}

// Validate names every bad setting; zero values stand for their defaults.
func (c Config) Validate() error {
	c.defaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := validNode(c.Node); err != nil {
		bad("node: %w", err)
	}
	switch {
	case len(c.GPUs) > 0 && (c.CPUCores != 0 || c.MemoryMB != 0):
		bad("cpus and memory: a node is a GPU node or a CPU node; leave them out with gpus (its host CPUs serve its GPU replicas)")
	case len(c.GPUs) > 0:
		if err := validInventory(c.GPUs); err != nil {
			bad("gpus: %w", err)
		}
	case c.CPUCores == 0 && c.MemoryMB == 0:
		bad("gpus: at least one GPU, or cpus and memory for a CPU node, is required")
	default:
		if c.CPUCores < 1 || c.CPUCores > MaxCPUCores {
			bad("cpus %d: want 1 to %d whole cores", c.CPUCores, MaxCPUCores)
		}
		if c.MemoryMB < 1 || c.MemoryMB > MaxMemoryMB {
			bad("memory %d MiB: want 1 to %d", c.MemoryMB, MaxMemoryMB)
		}
	}
	if c.StateDir == "" {
		bad("state dir is required: it holds the replica state and the usage spool")
	}
	if c.Lease < time.Second {
		bad("lease %s: want at least 1s", c.Lease)
	}
	if c.Heartbeat <= 0 || c.Heartbeat*2 > c.Lease {
		bad("heartbeat %s: want above 0 and at most half the lease (%s), so one lost heartbeat never loses the node", c.Heartbeat, c.Lease)
	}
	if c.SpoolMaxBytes <= 0 {
		bad("spool max bytes %d: want a positive size", c.SpoolMaxBytes)
	}
	if c.AckTimeout <= 0 {
		bad("ack timeout %s: want above 0", c.AckTimeout)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 4096 {
		bad("max in flight %d: want 1 to 4096", c.MaxInFlight)
	}
	if c.BatchRecords < 1 || c.BatchRecords > 10000 {
		bad("batch records %d: want 1 to 10000", c.BatchRecords)
	}
	return errors.Join(errs...)
}

// Bounds of a CPU node's inventory, generous for any one machine; they
// keep a typo from advertising capacity that does not exist.
const (
	MaxCPUCores = 1024
	MaxMemoryMB = 64 * 1024 * 1024
)

// CPUNode reports whether the configuration describes a CPU node.
func (c Config) CPUNode() bool { return len(c.GPUs) == 0 && c.CPUCores > 0 }

// ParseMemory reads a memory size for --memory: MiB as a whole number
// ("65536"), or with a unit, "MB", "MiB", "GB" or "GiB" (any case; GB and
// GiB both mean 1024 MiB, as the GPU types' "80GB" do).
func ParseMemory(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GIB", 1024}, {"GB", 1024}, {"G", 1024}, {"MIB", 1}, {"MB", 1}, {"M", 1}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 1 || n > MaxMemoryMB/mult {
		return 0, fmt.Errorf("memory %q: want a size such as 65536 (MiB) or 64GB", s)
	}
	return n * mult, nil
}

// validNode accepts names that are a single NATS subject token and a KV
// key: the node appears in mp.node.<node>.status and as its mp_desired key.
func validNode(n string) error {
	if n == "" {
		return errors.New("required")
	}
	if len(n) > 64 {
		return fmt.Errorf("%q is longer than 64 characters", n)
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%q: use letters, digits, '-' and '_' only", n)
		}
	}
	return nil
}

// validInventory checks an inventory built by hand as ParseInventory would
// have built it: GPUs and their slices indexed from 0 in order.
func validInventory(gpus []busapi.GPU) error {
	if len(gpus) == 0 {
		return errors.New("at least one GPU is required")
	}
	if len(gpus) > MaxGPUs {
		return fmt.Errorf("more than %d GPUs", MaxGPUs)
	}
	for i, g := range gpus {
		if g.Index != i {
			return fmt.Errorf("gpu %d has index %d; index GPUs 0, 1, 2… in order", i, g.Index)
		}
		if g.MemoryMB <= 0 {
			return fmt.Errorf("gpu %d: memory must be positive", i)
		}
		if len(g.Slices) == 0 {
			return fmt.Errorf("gpu %d has no slices; a GPU without MIG has one %q slice", i, busapi.ProfileFull)
		}
		for j, s := range g.Slices {
			if s.Index != j {
				return fmt.Errorf("gpu %d slice %d has index %d", i, j, s.Index)
			}
			if sliceMemoryMB(g.MemoryMB, s.Profile) == 0 {
				return fmt.Errorf("gpu %d slice %d: unknown profile %q", i, j, s.Profile)
			}
		}
	}
	return nil
}
