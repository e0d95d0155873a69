//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"modelplane/app"
	"modelplane/bench"
)

// platform runs one of the platform's own commands: the processes of the
// control plane, gateway, agent and runtime, and the tools beside them.
func platform(ctx context.Context, cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	switch cmd {
	case "dev":
		return command(fs, args, 0, func(c app.DevConfig, _ []string) error { return app.RunDev(ctx, c, os.Stdout, nil) })
	case "server":
		return command(fs, args, 0, func(c app.ServerConfig, _ []string) error { return app.RunServer(ctx, c) })
	case "gateway":
		return command(fs, args, 0, func(c app.GatewayConfig, _ []string) error { return app.RunGateway(ctx, c) })
	case "agent":
		return command(fs, args, 0, func(c app.AgentConfig, _ []string) error { return app.RunAgent(ctx, c) })
	case "runtime":
		if len(args) > 0 && args[0] == "validate" {
			code := 0
			if parsed := command(fs, args[1:], 0, func(c app.RuntimeValidateConfig, _ []string) error {
				code = app.RunRuntimeValidate(ctx, c)
				return nil
			}); parsed != 0 {
				return parsed
			}
			return code
		}
		return command(fs, args, 0, func(c app.RuntimeConfig, _ []string) error { return app.RunRuntime(ctx, c) })
	case "fetch":
		return command(fs, args, 0, func(c app.FetchConfig, _ []string) error { return app.RunFetch(ctx, c) })
	case "guard":
		return command(fs, args, 0, func(c app.GuardConfig, _ []string) error { return app.RunGuard(ctx, c) })
	case "migrate":
		return command(fs, args, 0, func(c app.MigrateConfig, _ []string) error { return app.RunMigrate(ctx, c) })
	case "nats": // nats init|creds [flags]
		return command(fs, args, 1, func(c app.NATSConfig, words []string) error { return app.RunNATS(c, words, os.Stdout) })
	case "bench": // bench NAME [flags]
		return command(fs, args, 1, func(c bench.Config, words []string) error { return bench.Run(ctx, c, words, os.Stdout) })
	case "sim": // sim run NAME [flags]
		return command(fs, args, 2, func(c app.SimConfig, words []string) error { return app.RunSim(ctx, c, words, os.Stdout) })
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s\n", cmd, usage)
		return 2
	}
}

// command parses args into a C, its flags registered on fs, and runs it
// with run, which gets the words before the flags (at most lead of them)
// and those after; it returns the process's exit code.
func command[C any, P interface {
	*C
	Flags(*flag.FlagSet)
}](fs *flag.FlagSet, args []string, lead int, run func(C, []string) error) int {
	var cfg C
	P(&cfg).Flags(fs)
	var words []string
	for len(args) > 0 && len(words) < lead && !strings.HasPrefix(args[0], "-") {
		words, args = append(words, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if err := run(cfg, append(words, fs.Args()...)); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "modelplane:", err)
		return 1
	}
	return 0
}
