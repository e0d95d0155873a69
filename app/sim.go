package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coder/quartz"

	"modelplane/sim/scenario"
)

// SimConfig configures `modelplane sim`.
type SimConfig struct {
	// JSON prints the report as JSON instead of tables.
	JSON bool
	// Seed, when set, replaces the scenario's seed.
	Seed *uint64
	// Duration, when above 0, replaces the scenario's duration.
	Duration time.Duration
}

// Flags registers the sim settings on fs.
func (c *SimConfig) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.Func("seed", "random seed (default: the scenario's)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a whole number from 0")
		}
		c.Seed = &v
		return nil
	})
	fs.DurationVar(&c.Duration, "duration", 0, "simulated time requests arrive for (default: the scenario's)")
}

const simUsage = `usage:
  modelplane sim list
  modelplane sim run <scenario name or file.yaml> [--json] [--seed N] [--duration D]`

// RunSim runs `modelplane sim list` or `modelplane sim run`.
func RunSim(ctx context.Context, cfg SimConfig, args []string, out io.Writer) error {
	switch {
	case len(args) == 1 && args[0] == "list":
		return simList(out)
	case len(args) == 2 && args[0] == "run":
	default:
		return errors.New(simUsage)
	}
	sc, err := loadScenario(args[1])
	if err != nil {
		return err
	}
	if cfg.Seed != nil {
		sc.Seed = *cfg.Seed
	}
	if cfg.Duration > 0 {
		sc.Duration = cfg.Duration
		if sc.Warmup >= sc.Duration {
			sc.Warmup = 0
		}
	}
	rep, err := scenario.Run(ctx, sc, scenario.Options{Clock: quartz.NewReal()})
	if err != nil {
		return fmt.Errorf("sim run %s: %w", args[1], err)
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(out)
}

// loadScenario reads a scenario file when the argument names one (it ends
// in .yaml or .yml, or holds a path separator), else a built-in.
func loadScenario(arg string) (scenario.Scenario, error) {
	if !strings.HasSuffix(arg, ".yaml") && !strings.HasSuffix(arg, ".yml") && !strings.ContainsRune(arg, os.PathSeparator) {
		return scenario.Builtin(arg)
	}
	f, err := os.Open(arg)
	if err != nil {
		return scenario.Scenario{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, scenario.MaxFileBytes+1))
	if err != nil {
		return scenario.Scenario{}, fmt.Errorf("read %s: %w", arg, err)
	}
	sc, err := scenario.Parse(data)
	if err != nil {
		return scenario.Scenario{}, fmt.Errorf("%s: %w", arg, err)
	}
	return sc, nil
}

func simList(out io.Writer) error {
	all, err := scenario.Builtins()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tGPUs\tarrivals\tduration\tdescription")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%d\t%g req/s %s\t%v\t%s\n", s.Name, s.GPUs(), s.Arrivals.Rate, s.Arrivals.Process, s.Duration, s.Description)
	}
	return tw.Flush()
}
