package app

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/controlplane"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
)

func TestDevConfigNamesBadNodeAndTrafficSettings(t *testing.T) {
	c := DevConfig{Dir: "d", HTTPAddr: "127.0.0.1:1", AdminAddr: "127.0.0.1:0", MaxUploadMB: 1, LogLevel: "warn",
		SimNodes: 4, SimGPUsPerNode: 8, SimPortBase: 65000, CPUNodes: 2, CPUNodeCores: 0, CPUNodeMemory: "lots", DemoTraffic: -1}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a bad configuration")
	}
	for _, want := range []string{"MP_SIM_PORT_BASE", "MP_DEV_CPU_NODE_CPUS", "MP_DEV_CPU_NODE_MEMORY", "MP_DEV_DEMO_TRAFFIC"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q; want it to name %s", err, want)
		}
	}
}

func TestDevFlagsDefaultToTwoCPUNodesAndDemoTraffic(t *testing.T) {
	var c DevConfig
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--demo-traffic=0"}); err != nil {
		t.Fatal(err)
	}
	if c.CPUNodes != 2 || c.CPUNodeCores < 1 || c.CPUNodeMemory != "2GB" || c.DemoTraffic != 0 {
		t.Errorf("defaults %d CPU nodes of %d cores and %s, traffic %v; want 2 nodes of 2GB and the traffic off", c.CPUNodes, c.CPUNodeCores, c.CPUNodeMemory, c.DemoTraffic)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestOutdatedDemoIsDetectedAndExplained: a directory whose fraud-detector
// v23 is the simulated model of earlier releases is recognised, and the
// banner says how to start over; the real demo is not outdated.
func TestOutdatedDemoIsDetectedAndExplained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nc := natstest.Connect(t)
	cp, err := controlplane.New(controlplane.Stores{Pool: pgtest.New(t), CH: chtest.New(t), NC: nc}, controlplane.Config{Log: NewLogger("error"),
		ArtifactDir: t.TempDir(), MaxUploadBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Tenant.CreateTeam(ctx, system, "risk", "Risk"); err != nil {
		t.Fatal(err)
	}
	if demoOutdated(ctx, cp) {
		t.Fatal("an empty directory is outdated")
	}
	if err := seedModel(ctx, cp, simFraud); err != nil {
		t.Fatal(err)
	}
	if !demoOutdated(ctx, cp) {
		t.Fatal("the simulated fraud model is not recognised as outdated")
	}
	var out bytes.Buffer
	printDevBanner(&out, devBanner{dir: "/x/.modelplane", outdated: true})
	if !strings.Contains(out.String(), "rm -rf /x/.modelplane && make run") {
		t.Errorf("banner does not say how to start over:\n%s", out.String())
	}
	out.Reset()
	printDevBanner(&out, devBanner{dir: "/x/.modelplane", cpuNodes: 2, cpuCores: 2, cpuMemoryMB: 2048, traffic: 5})
	for _, want := range []string{"2 CPU nodes (cpu-node-01…02) of 2 cores and 2048 MiB", "5 requests/s of demo traffic"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "rm -rf") {
		t.Errorf("banner of a current directory tells to start over:\n%s", out.String())
	}
}

// TestRuntimeBinaryIsCopiedWhereTheRuntimeUserCanRunIt: as root, a binary
// in a private directory is copied into the nodes' directory, and one the
// runtime user can already execute is used where it is.
func TestRuntimeBinaryIsCopiedWhereTheRuntimeUserCanRunIt(t *testing.T) {
	t.Parallel()
	uid, switches := runtimeUID()
	if !switches {
		t.Skip("not root: runtimes run as the agent's own user, nothing to copy")
	}
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(private, "modelplane")
	if err := os.WriteFile(self, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	for _, d := range []string{filepath.Dir(open), open} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if reachable(self, uid) {
		t.Fatalf("%s in a 0700 directory is reachable by uid %d", self, uid)
	}
	got, err := runtimeBinary(self, filepath.Join(open, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(open, "bin", "modelplane") || !reachable(got, uid) {
		t.Fatalf("runtime binary %s (reachable %v); want a copy in %s/bin the runtime user can run", got, reachable(got, uid), open)
	}
	if again, err := runtimeBinary(got, filepath.Join(open, "other")); err != nil || again != got {
		t.Fatalf("a reachable binary: %s, %v; want it used where it is", again, err)
	}
}
