package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"modelplane/buildinfo"
)

// Exit codes of every command; scripts may rely on them.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitNotFound = 3
	ExitConflict = 4
)

// Env is what a run of the client reads and writes besides the network:
// main passes the process's own, tests their buffers.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	// Getenv reads MP_API, MP_API_KEY, MP_GATEWAY, MP_TLS_CA and MP_CONTEXT.
	Getenv func(string) string
	// ConfigDir holds config.json; "" is modelplane under the user's
	// configuration directory.
	ConfigDir string
	// HTTP is the client to call with; nil is a default one.
	HTTP *http.Client
	// Version is the version the client reports; "" is this build's.
	Version string
	// OpenBrowser opens login's sign-in URL; nil runs the system's
	// opener (xdg-open, open). Tests play the browser here.
	OpenBrowser func(url string) error
	// Now is the time the defaults that depend on it are taken from
	// (chargeback's month, a key's expiry); nil is the system clock.
	Now func() time.Time
}

// now is the client's clock: Env.Now, or the system's.
func (a *app) now() time.Time {
	if a.env.Now != nil {
		return a.env.Now()
	}
	return time.Now()
}

// nouns are the first words main hands to Run.
var nouns = []string{"login", "logout", "models", "versions", "endpoints", "traffic", "rollouts", "experiments", "keys", "chargeback", "drift", "nodes", "audit", "predict", "chat", "context", "completion", "me", "version"}

// globals are the client's flags that may come before its noun
// (`modelplane --key K nodes list`).
var globals = []string{"--api", "--key", "--gateway", "--tls-ca", "--context", "--output", "-o"}

// Has reports whether word, the first of a command line, starts a command
// of the client: one of its nouns or one of its global flags.
func Has(word string) bool {
	name, _, _ := strings.Cut(word, "=")
	return slices.Contains(nouns, word) || slices.Contains(globals, name)
}

// usageError is a command line the client cannot make sense of: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// app is one run: its environment, global flags and API client.
type app struct {
	env                        Env
	api, key, gateway, ctxName string
	ca                         string
	output                     string
	client                     *client
}

// Run runs the client with argv (without the program name) and returns
// the exit code.
func Run(ctx context.Context, argv []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Version == "" {
		env.Version = buildinfo.Version()
	}
	a := &app{env: env}
	root := a.root()
	root.SetArgs(argv)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetIn(env.Stdin)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	fmt.Fprintln(env.Stderr, "modelplane:", err)
	if code == ExitUsage && cmd != nil {
		fmt.Fprintf(env.Stderr, "run '%s --help' for usage\n", cmd.CommandPath())
	}
	return code
}

// exitCode maps an error to the exit code scripts see.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return ExitUsage
	}
	// Cobra's own checks of the command line return plain errors.
	for _, prefix := range []string{"required flag(s)", "unknown command", "unknown flag", "invalid argument", "flag needs an argument"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return ExitUsage
		}
	}
	var p *Problem
	if errors.As(err, &p) {
		switch p.Status {
		case http.StatusNotFound:
			return ExitNotFound
		case http.StatusConflict:
			return ExitConflict
		}
	}
	return ExitError
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "modelplane",
		Short: "The modelplane command-line client",
		Long: `modelplane <noun> <verb> calls the REST API (and the gateway for predict).

Where to go and with which key: --api and --key, else MP_API and MP_API_KEY
(source .modelplane/dev.env sets both), else the current context
(modelplane context use NAME). The server-side commands (dev, server,
gateway, agent, runtime, migrate, nats, sim, bench) are listed by
'modelplane help'.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       a.env.Version,
	}
	root.SetVersionTemplate("modelplane {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&a.api, "api", "", "API base URL, e.g. http://127.0.0.1:8080/api/v1 (MP_API)")
	pf.StringVar(&a.key, "key", "", "API key (MP_API_KEY)")
	pf.StringVar(&a.gateway, "gateway", "", "inference gateway URL for predict (MP_GATEWAY)")
	pf.StringVar(&a.ca, "tls-ca", "", "PEM bundle of the CAs the API's and gateway's certificates chain to; empty: the system's roots (MP_TLS_CA)")
	pf.StringVar(&a.ctxName, "context", "", "use this context of the configuration file (MP_CONTEXT)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		cfg, _ := a.loadConfig()
		return cfg.names(), cobra.ShellCompDirectiveNoFileComp
	})
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		switch a.output {
		case "table", "json", "yaml":
		default:
			return usagef("-o %q: want table, json or yaml", a.output)
		}
		return nil
	}
	root.AddCommand(a.modelsCmd(), a.versionsCmd(), a.endpointsCmd(), a.trafficCmd(), a.rolloutsCmd(), a.experimentsCmd(), a.keysCmd(),
		a.chargebackCmd(), a.driftCmd(), a.nodesCmd(), a.auditCmd(), a.predictCmd(), a.chatCmd(), a.contextCmd(), a.meCmd(), a.versionCmd(),
		a.loginCmd(), a.logoutCmd())
	root.CompletionOptions.HiddenDefaultCmd = false
	return root
}

// group is a noun: its verbs are subcommands; alone or with an unknown
// verb it is a usage error.
func group(use, short string, verbs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s: a verb is missing (%s)", use, verbNames(cmd))
			}
			return usagef("%s: unknown verb %q (%s)", use, args[0], verbNames(cmd))
		},
	}
	c.AddCommand(verbs...)
	return c
}

func verbNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// args checks a verb's positional arguments by count and names them in
// the error.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		switch {
		case len(got) == len(names):
		case len(names) == 0:
			return usagef("%s takes no arguments, got %q", cmd.Name(), strings.Join(got, " "))
		default:
			return usagef("want %d argument(s) %s, got %d", len(names), strings.Join(names, " "), len(got))
		}
		return nil
	}
}

// configDir is where config.json lives.
func (a *app) configDir() (string, error) {
	if a.env.ConfigDir != "" {
		return a.env.ConfigDir, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("configuration directory: %w", err)
	}
	return filepath.Join(d, "modelplane"), nil
}
