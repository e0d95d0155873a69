package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"modelplane/agent"
)

// simFleetLayout is the inventory of node i of the dev fleet: A100s on even
// nodes, H100s on odd ones, and every fourth node in MIG mode (half its GPUs
// as 7 x 1g.10gb, half as 3g.40gb + 4g.40gb), so that the default four nodes
// have exactly one MIG node.
func simFleetLayout(i, gpusPerNode int) (gpus []string, mig string) {
	typ := "A100-80GB"
	if i%2 == 1 {
		typ = "H100-80GB"
	}
	gpus = []string{fmt.Sprintf("%dx%s", gpusPerNode, typ)}
	if i%4 != 3 {
		return gpus, ""
	}
	for g := range gpusPerNode {
		if g > 0 {
			mig += ","
		}
		if g < (gpusPerNode+1)/2 {
			mig += fmt.Sprintf("%d:7x1g.10gb", g)
		} else {
			mig += fmt.Sprintf("%d:3g.40gb+4g.40gb", g)
		}
	}
	return gpus, mig
}

// startSimFleet runs n node agents in this process, each with the sim driver
// and a state directory of its own under dir, over one NATS connection of
// their own. They reach the control plane only through NATS, as remote
// agents do.
func startSimFleet(ctx context.Context, log *slog.Logger, natsURL, dir string, n, gpusPerNode int) (stop func(), err error) {
	nc, err := nats.Connect(natsURL, nats.Name("modelplane-sim-fleet"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("sim fleet: connect nats: %w", err)
	}
	driver := agent.NewSimDriver(agent.SimDriverConfig{Log: log})
	var agents []*agent.Agent
	stop = func() {
		for _, a := range agents {
			a.Stop()
		}
		driver.Close(context.Background())
		nc.Close()
	}
	for i := range n {
		spec, mig := simFleetLayout(i, gpusPerNode)
		inv, err := agent.ParseInventory(spec, mig)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		node := fmt.Sprintf("gpu-node-%02d", i+1)
		a, err := agent.New(agent.Config{Node: node, GPUs: inv, StateDir: filepath.Join(dir, node), Driver: driver}, nc, log.With(slog.String("node", node)))
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		if err := a.Start(ctx); err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		agents = append(agents, a)
	}
	return stop, nil
}
