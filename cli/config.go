package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Config is the client's configuration file: named contexts, one per
// server, and the one in use.
type Config struct {
	Current  string                   `json:"current,omitempty"`
	Contexts map[string]ConfigContext `json:"contexts,omitempty"`
}

// ConfigContext is where one server is and the key to call it with.
type ConfigContext struct {
	API     string `json:"api"`
	Key     string `json:"key,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	// CA is a PEM bundle of the CAs the server's certificates chain to,
	// for a server with a certificate of an internal CA.
	CA string `json:"ca,omitempty"`
	// Token is what `modelplane login` signed in with, used when no key
	// is given.
	Token *Token `json:"token,omitempty"`
}

func (c Config) names() []string {
	var out []string
	for n := range c.Contexts {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// configFile is config.json's path.
func (a *app) configFile() (string, error) {
	d, err := a.configDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "config.json"), nil
}

// loadConfig reads the file; a missing one is an empty configuration.
func (a *app) loadConfig() (Config, error) {
	var cfg Config
	path, err := a.configFile()
	if err != nil {
		return cfg, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// saveConfig writes the file readable by its owner only: it holds keys.
func (a *app) saveConfig(cfg Config) error {
	path, err := a.configFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return err
	}
	return os.Rename(tmp, path)
}

// target is where a command goes: the API base, the key and the gateway.
type target struct{ api, key, gateway, ca string }

// resolve picks the target: flags, then an explicit context (--context,
// MP_CONTEXT), then MP_API / MP_API_KEY / MP_GATEWAY, then the current
// context.
func (a *app) resolve() (target, error) {
	var t target
	cfg, err := a.loadConfig()
	if err != nil {
		return t, err
	}
	fill := func(api, key, gw, ca string) {
		if t.ca == "" {
			t.ca = ca
		}
		if t.api == "" {
			t.api = api
		}
		if t.key == "" {
			t.key = key
		}
		if t.gateway == "" {
			t.gateway = gw
		}
	}
	fill(a.api, a.key, a.gateway, a.ca)
	name := a.ctxName
	if name == "" {
		name = a.env.Getenv("MP_CONTEXT")
	}
	if name != "" {
		c, ok := cfg.Contexts[name]
		if !ok {
			return t, usagef("no context %q (have: %s)", name, strings.Join(cfg.names(), ", "))
		}
		fill(c.API, c.Key, c.Gateway, c.CA)
	}
	fill(a.env.Getenv("MP_API"), a.env.Getenv("MP_API_KEY"), a.env.Getenv("MP_GATEWAY"), a.env.Getenv("MP_TLS_CA"))
	if c, ok := cfg.Contexts[cfg.Current]; ok {
		fill(c.API, c.Key, c.Gateway, c.CA)
	}
	if t.api == "" {
		return t, usagef("no API: set MP_API and MP_API_KEY (source .modelplane/dev.env), pass --api and --key, or run 'modelplane context set'")
	}
	t.api = apiBase(t.api)
	return t, nil
}

// apiBase is u with /api/v1 at its end, however it was given.
func apiBase(u string) string {
	u = strings.TrimRight(u, "/")
	if !strings.HasSuffix(u, "/api/v1") {
		u += "/api/v1"
	}
	return u
}

func (a *app) contextCmd() *cobra.Command {
	var set ConfigContext
	setCmd := &cobra.Command{
		Use:   "set NAME --api URL [--key KEY] [--gateway URL]",
		Short: "Add or change a context and use it",
		Args:  args("NAME"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if set.API == "" {
				return usagef("context set: --api is required")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			if cfg.Contexts == nil {
				cfg.Contexts = map[string]ConfigContext{}
			}
			set.API = apiBase(set.API)
			cfg.Contexts[argv[0]] = set
			cfg.Current = argv[0]
			if err := a.saveConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "context %s set and in use\n", argv[0])
			return nil
		},
	}
	setCmd.Flags().StringVar(&set.API, "api", "", "API base URL")
	setCmd.Flags().StringVar(&set.Key, "key", "", "API key")
	setCmd.Flags().StringVar(&set.Gateway, "gateway", "", "gateway URL")
	setCmd.Flags().StringVar(&set.CA, "tls-ca", "", "PEM bundle of the CAs the server's certificates chain to")
	complete := func(_ *cobra.Command, argv []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(argv) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cfg, _ := a.loadConfig()
		return cfg.names(), cobra.ShellCompDirectiveNoFileComp
	}
	use := &cobra.Command{
		Use:               "use NAME",
		Short:             "Use a context from now on",
		Args:              args("NAME"),
		ValidArgsFunction: complete,
		RunE: func(cmd *cobra.Command, argv []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			if _, ok := cfg.Contexts[argv[0]]; !ok {
				return &Problem{Status: 404, Title: "Not Found", Detail: fmt.Sprintf("no context %q (have: %s)", argv[0], strings.Join(cfg.names(), ", "))}
			}
			cfg.Current = argv[0]
			if err := a.saveConfig(cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "using context %s\n", argv[0])
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the contexts (* marks the one in use)",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			var rows []map[string]any
			for _, n := range cfg.names() {
				c := cfg.Contexts[n]
				cur := ""
				if n == cfg.Current {
					cur = "*"
				}
				rows = append(rows, map[string]any{"current": cur, "name": n, "api": c.API, "gateway": c.Gateway})
			}
			return a.printItems(rows, []column{{"", "current"}, {"NAME", "name"}, {"API", "api"}, {"GATEWAY", "gateway"}})
		},
	}
	del := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Forget a context",
		Args:              args("NAME"),
		ValidArgsFunction: complete,
		RunE: func(cmd *cobra.Command, argv []string) error {
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			if _, ok := cfg.Contexts[argv[0]]; !ok {
				return &Problem{Status: 404, Title: "Not Found", Detail: fmt.Sprintf("no context %q", argv[0])}
			}
			delete(cfg.Contexts, argv[0])
			if cfg.Current == argv[0] {
				cfg.Current = ""
			}
			return a.saveConfig(cfg)
		},
	}
	return group("context", "Several servers: set, use, list and delete contexts", setCmd, use, list, del)
}
