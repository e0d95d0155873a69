package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"modelplane/bus"
)

// NATSConfig configures `modelplane nats init` and `modelplane nats creds`:
// the operator's tools for a production NATS server.
type NATSConfig struct {
	// Authority is the file holding the operator, system account and
	// account seeds: keep it as secret as a CA key.
	Authority string
	// Dir is where init writes the server's trust configuration and the
	// control plane's and a gateway's creds files.
	Dir string
	// Out is the creds file creds writes; Agent, Gateway and ControlPlane
	// choose whose (exactly one).
	Out          string
	Agent        string
	Gateway      string
	ControlPlane bool
}

// Flags registers the nats settings on fs.
func (c *NATSConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Authority, "authority", env("MP_NATS_AUTHORITY", "nats-authority.json"), "the NATS authority file (private keys; mode 0600) (MP_NATS_AUTHORITY)")
	fs.StringVar(&c.Dir, "dir", "nats", "init: where to write modelplane-trust.conf and the creds files")
	fs.StringVar(&c.Out, "out", "", "creds: the creds file to write")
	fs.StringVar(&c.Agent, "agent", "", "creds: a node agent's credential, for node NAME")
	fs.StringVar(&c.Gateway, "gateway", "", "creds: a gateway's credential, named NAME")
	fs.BoolVar(&c.ControlPlane, "control-plane", false, "creds: the control plane's credential")
}

// RunNATS runs `modelplane nats init` (a new authority, the server's trust
// configuration, and creds files for the control plane and a gateway) or
// `modelplane nats creds` (one more creds file).
func RunNATS(c NATSConfig, words []string, out io.Writer) error {
	if len(words) != 1 {
		return errors.New("usage: modelplane nats init [--authority FILE] [--dir DIR] | nats creds [--authority FILE] (--agent NODE | --gateway NAME | --control-plane) --out FILE")
	}
	switch words[0] {
	case "init":
		if _, err := os.Stat(c.Authority); err == nil {
			return fmt.Errorf("%s exists: init makes a new authority, which would orphan every credential and the JetStream data of the old account; use `nats creds` with it", c.Authority)
		}
		a, err := bus.LoadOrCreateAuthority(c.Authority)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(c.Dir, 0o700); err != nil {
			return err
		}
		trust := filepath.Join(c.Dir, "modelplane-trust.conf")
		if err := os.WriteFile(trust, []byte(a.ServerConfig()), 0o644); err != nil {
			return err
		}
		cp, err := a.ControlPlane()
		if err != nil {
			return err
		}
		gw, err := a.Gateway("gateway")
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			c    bus.Credential
		}{{"control-plane.creds", cp}, {"gateway.creds", gw}} {
			if err := f.c.WriteFile(filepath.Join(c.Dir, f.name)); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "authority %s (private: keep it safe)\nserver trust %s (include it in nats-server's configuration)\ncreds %s, %s\n",
			c.Authority, trust, filepath.Join(c.Dir, "control-plane.creds"), filepath.Join(c.Dir, "gateway.creds"))
		return nil
	case "creds":
		n := 0
		for _, set := range []bool{c.Agent != "", c.Gateway != "", c.ControlPlane} {
			if set {
				n++
			}
		}
		if n != 1 || c.Out == "" {
			return errors.New("nats creds: give exactly one of --agent NODE, --gateway NAME, --control-plane, and --out FILE")
		}
		if _, err := os.Stat(c.Authority); err != nil {
			return fmt.Errorf("MP_NATS_AUTHORITY (--authority): %w", err)
		}
		a, err := bus.LoadOrCreateAuthority(c.Authority)
		if err != nil {
			return err
		}
		var cred bus.Credential
		switch {
		case c.Agent != "":
			cred, err = a.Agent(c.Agent)
		case c.Gateway != "":
			cred, err = a.Gateway(c.Gateway)
		default:
			cred, err = a.ControlPlane()
		}
		if err != nil {
			return err
		}
		if err := cred.WriteFile(c.Out); err != nil {
			return err
		}
		fmt.Fprintf(out, "creds %s\n", c.Out)
		return nil
	}
	return fmt.Errorf("unknown nats command %q: init or creds", words[0])
}
