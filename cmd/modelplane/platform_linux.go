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
	var err error
	switch cmd {
	case "dev":
		var cfg app.DevConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunDev(ctx, cfg, os.Stdout, nil)
	case "server":
		var cfg app.ServerConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunServer(ctx, cfg)
	case "gateway":
		var cfg app.GatewayConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunGateway(ctx, cfg)
	case "agent":
		var cfg app.AgentConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunAgent(ctx, cfg)
	case "runtime":
		if len(args) > 0 && args[0] == "validate" {
			var cfg app.RuntimeValidateConfig
			cfg.Flags(fs)
			if err := fs.Parse(args[1:]); err != nil {
				return parseExit(err)
			}
			return app.RunRuntimeValidate(ctx, cfg)
		}
		var cfg app.RuntimeConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunRuntime(ctx, cfg)
	case "fetch":
		var cfg app.FetchConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunFetch(ctx, cfg)
	case "guard":
		var cfg app.GuardConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunGuard(ctx, cfg)
	case "migrate":
		var cfg app.MigrateConfig
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunMigrate(ctx, cfg)
	case "nats":
		var cfg app.NATSConfig
		cfg.Flags(fs)
		var words []string
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			words, args = args[:1], args[1:] // nats init|creds [flags]
		}
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunNATS(cfg, append(words, fs.Args()...), os.Stdout)
	case "bench":
		var cfg bench.Config
		cfg.Flags(fs)
		var names []string
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			names, args = args[:1], args[1:] // bench NAME [flags]
		}
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = bench.Run(ctx, cfg, append(names, fs.Args()...), os.Stdout)
	case "sim":
		var cfg app.SimConfig
		cfg.Flags(fs)
		var words []string
		for len(args) > 0 && len(words) < 2 && !strings.HasPrefix(args[0], "-") {
			words, args = append(words, args[0]), args[1:] // sim run NAME [flags]
		}
		if err := fs.Parse(args); err != nil {
			return parseExit(err)
		}
		err = app.RunSim(ctx, cfg, append(words, fs.Args()...), os.Stdout)
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s\n", cmd, usage)
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "modelplane:", err)
		return 1
	}
	return 0
}
