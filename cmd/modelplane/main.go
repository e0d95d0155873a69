// Command modelplane is the one binary of the platform; each subcommand parses
// its flags and calls package app (bench: package bench). The platform's
// commands run on Linux; a build for another system (a laptop's) has the
// client commands (package cli) only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
	return platform(ctx, cmd, args)
}
