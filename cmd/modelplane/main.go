// Command modelplane is the one binary of the platform; each subcommand parses
// its flags and calls package app (bench: package bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"modelplane/app"
	"modelplane/bench"
	"modelplane/cli"
)

const usage = `usage: modelplane <command> [flags]

commands:
  dev       everything on one machine: PostgreSQL, ClickHouse, NATS, demo data, portal and API
  server    the control plane: portal, REST API, controllers (needs MP_DATABASE_URL, MP_CLICKHOUSE_URL, MP_NATS_URL, MP_NATS_CREDS, MP_OIDC_*)
  gateway   inference gateway: routes /v1/endpoints/{endpoint}/... to replicas (needs only NATS: MP_NATS_URL, MP_NATS_CREDS)
  agent     node agent: runs the replicas placed on this machine (needs only NATS: MP_NATS_URL, MP_NATS_CREDS)
  runtime   the built-in serving runtime for one replica: runtime --model-dir D --port P;
            runtime validate --model-dir D answers the sample inputs once and prints a JSON report
  fetch     a replica's model files, fetched and verified into a directory: the Kubernetes
            driver's init container (fetch --manifest SHA256 --replica ID --dir /models)
  guard     the replica token check in front of a runtime that does not check it: the Kubernetes
            driver's sidecar (guard --listen :8000 --upstream 127.0.0.1:8001, token in MP_REPLICA_TOKEN)
  nats      NATS credentials for production: nats init (authority, server trust, creds), nats creds --agent NODE --out FILE
  migrate   apply PostgreSQL and ClickHouse migrations
  sim       fleet simulation in virtual time: sim list, sim run <scenario|file.yaml> [--json]
  bench     benchmarks printing JSON with --json: bench api, engine, placement, ingest, gateway,
            rollback, chargeback, drift, runtime,
            autoscale, llm (run 'modelplane bench' for each one's flags)

client commands (the REST API; MP_API and MP_API_KEY, or --api and --key):
  models, versions, endpoints, traffic, rollouts, experiments, keys, chargeback, drift,
  nodes, audit, predict, me, context, completion, version   e.g. modelplane endpoints list

run 'modelplane <command> -h' for its flags`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// parseExit is the exit code of a flag parse that failed: 0 for -h or
// --help, which print the usage as asked, 2 for a bad flag.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func run(ctx context.Context, argv []string) int {
	if len(argv) < 1 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	cmd, args := argv[0], argv[1:]
	if cli.Has(cmd) {
		return cli.Run(ctx, argv, cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv})
	}
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
