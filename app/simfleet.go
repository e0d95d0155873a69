package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/bus"
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
// and a state directory of its own under dir, each over a NATS connection
// of its own with its node's credential from auth. They reach the control
// plane only through NATS, with the permissions remote agents have.
func startSimFleet(ctx context.Context, log *slog.Logger, natsURL string, auth *bus.Authority, dir string, n, gpusPerNode int) (stop func(), err error) {
	driver := agent.NewSimDriver(agent.SimDriverConfig{Log: log})
	var agents []*agent.Agent
	var conns []*nats.Conn
	stop = func() {
		for _, a := range agents {
			a.Stop()
		}
		driver.Close(context.Background())
		for _, nc := range conns {
			nc.Close()
		}
	}
	for i := range n {
		spec, mig := simFleetLayout(i, gpusPerNode)
		inv, err := agent.ParseInventory(spec, mig)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		node := fmt.Sprintf("gpu-node-%02d", i+1)
		cred, err := auth.Agent(node)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		nc, err := nats.Connect(natsURL, append(cred.Options(), bus.ErrorLogger(log), nats.Name("modelplane-sim-"+node), nats.MaxReconnects(-1))...)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: connect nats: %w", err)
		}
		conns = append(conns, nc)
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
