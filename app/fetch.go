package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"modelplane/agent/cache"
	"modelplane/agent/catalog"
	"modelplane/agent/triton"
	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/egress"
)

// FetchConfig configures `modelplane fetch`: the Kubernetes driver's init
// container (agent/cluster), which prepares one replica's model directory
// in the pod's volume with the node agent's own artifact cache, so a pod
// loads exactly what a node would: every file fetched by digest from the
// control plane with the pool's credential and verified against its sha256
// before the runtime may open the directory.
type FetchConfig struct {
	ControlPlaneURL string
	Token           Secret
	Manifest        string
	Replica         string
	// Dir is the volume: the cache goes to Dir/.cache, and Dir/model links
	// to the prepared directory the runtime is given.
	Dir string
	// Settings are the runtime's settings (busapi.ReplicaSpec.Settings),
	// written into the directory as the node agent writes them.
	Settings string
	// TritonModel, when set, makes the command also lay out Triton's model
	// repository serving the version under that name in Dir/repository,
	// as the process driver does on a node (package triton), for a
	// replica that sees GPUs GPUs.
	TritonModel         string
	GPUs                int
	EgressAllowLoopback bool
	LogLevel            string
}

// Flags registers the settings on fs, with MP_* environment variables as
// defaults.
func (c *FetchConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.ControlPlaneURL, "control-plane", env("MP_CONTROL_PLANE_URL", ""), "control plane URL to fetch from (MP_CONTROL_PLANE_URL)")
	c.Token = Secret(env("MP_AGENT_TOKEN", ""))
	fs.Var(secretFlag{&c.Token}, "agent-token", "the pool's artifact credential (MP_AGENT_TOKEN)")
	fs.StringVar(&c.Manifest, "manifest", "", "sha256 of the version's manifest")
	fs.StringVar(&c.Replica, "replica", env("MP_REPLICA_ID", ""), "the replica's id (MP_REPLICA_ID)")
	fs.StringVar(&c.Dir, "dir", "/models", "the pod's model volume; the directory is linked as DIR/model")
	fs.StringVar(&c.Settings, "settings", "", "the runtime's settings as JSON, written beside the files")
	fs.StringVar(&c.TritonModel, "triton-model", "", "lay out Triton's model repository for this model in DIR/repository")
	fs.IntVar(&c.GPUs, "gpus", 0, "GPUs the replica sees, for Triton's instance group (with --triton-model)")
	loop := env("MP_AGENT_EGRESS_ALLOW_LOOPBACK", "") == "true"
	fs.BoolVar(&c.EgressAllowLoopback, "egress-allow-loopback", loop, "let downloads reach a control plane on a loopback address (MP_AGENT_EGRESS_ALLOW_LOOPBACK)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
}

// Validate names every bad setting.
func (c FetchConfig) Validate() error {
	var errs []error
	if u, err := url.Parse(c.ControlPlaneURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("MP_CONTROL_PLANE_URL (--control-plane) must be an http(s) URL, got %q", c.ControlPlaneURL))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("MP_AGENT_TOKEN (--agent-token) is required: the control plane serves files only to agents"))
	}
	if !artifact.IsDigest(c.Manifest) {
		errs = append(errs, fmt.Errorf("--manifest %q is not a sha256", c.Manifest))
	}
	if c.Replica == "" {
		errs = append(errs, errors.New("--replica is required"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("--dir is required"))
	}
	if c.Settings != "" && !json.Valid([]byte(c.Settings)) {
		errs = append(errs, errors.New("--settings is not JSON"))
	}
	if c.GPUs < 0 {
		errs = append(errs, fmt.Errorf("--gpus %d is negative", c.GPUs))
	}
	if c.GPUs > 0 && c.TritonModel == "" {
		errs = append(errs, errors.New("--gpus needs --triton-model"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("MP_LOG_LEVEL (--log-level) %w", err))
	}
	return errors.Join(errs...)
}

// RunFetch prepares the replica's model directory and links it as
// Dir/model. A file that fails its digest twice fails the command, whose
// message Kubernetes keeps as the init container's termination message,
// which the cluster agent reports as the replica's reason.
func RunFetch(ctx context.Context, c FetchConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	fc, err := cache.New(cache.Config{Dir: filepath.Join(c.Dir, ".cache"), URL: strings.TrimRight(c.ControlPlaneURL, "/"),
		Token: string(c.Token), Egress: &egress.Policy{AllowLoopback: c.EgressAllowLoopback}, Log: log})
	if err != nil {
		return err
	}
	spec := busapi.ReplicaSpec{ID: c.Replica, Manifest: c.Manifest}
	if c.Settings != "" {
		spec.Settings = json.RawMessage(c.Settings)
	}
	p, err := fc.Prepare(ctx, spec)
	if err != nil {
		return terminate(fmt.Errorf("prepare model files: %w", err))
	}
	rel, err := filepath.Rel(c.Dir, p.Dir)
	if err != nil {
		return err
	}
	link := filepath.Join(c.Dir, "model")
	_ = os.Remove(link)
	if err := os.Symlink(rel, link); err != nil {
		return fmt.Errorf("link model directory: %w", err)
	}
	if c.TritonModel != "" {
		// The link's target is the volume's own path, which the runtime
		// container mounts at the same place.
		v := catalog.Vars{Model: c.TritonModel, ModelDir: link}
		if _, err := triton.WriteRepository(filepath.Join(c.Dir, "repository"), v, spec.Settings, c.GPUs); err != nil {
			// A version without a model file Triton serves: the reason the
			// replica reports.
			return terminate(fmt.Errorf("triton model repository: %w", err))
		}
	}
	log.Info("model files ready", slog.String("replica", c.Replica), slog.String("dir", link),
		slog.Int("fetched", p.Fetched), slog.Int64("download_ms", p.Download.Milliseconds()), slog.Int64("verify_ms", p.Verify.Milliseconds()))
	return nil
}

// terminate writes err as the container's termination message, which the
// cluster agent reports as the replica's reason, and returns it.
// Kubernetes mounts the file in a container; elsewhere there is none to
// write.
func terminate(err error) error {
	if f, ferr := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); ferr == nil {
		_, _ = f.WriteString(err.Error())
		_ = f.Close()
	}
	return err
}
