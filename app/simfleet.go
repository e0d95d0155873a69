package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/enrollment"
	"modelplane/tracing"
	"modelplane/trust"
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

// simFleet is how `modelplane dev` (and the app tests) run a simulated
// fleet: n nodes of gpusPerNode GPUs, over NATS at natsURL, each enrolled
// through enroll (a join token exchanged as a remote agent does), each
// node's replicas on ports of its own from PortBase.
type simFleet struct {
	natsURL     string
	enroll      *enrollment.Service
	dir         string
	nodes, gpus int
	// PortBase is the first port of node 0; node i serves its replicas on
	// the SimPortsPerNode ports from PortBase + i·SimPortsPerNode.
	portBase int
}

// SimPortsPerNode is the size of each simulated node's port range.
const SimPortsPerNode = 100

// startSimFleet runs the nodes' agents in this process, each with a sim
// driver and a state directory of its own under dir, each over a NATS
// connection of its own with its node's credential, got by enrolling
// (enrollDevNode: a join token, exchanged). Every node shares 127.0.0.1, so
// each enrolls with a port range of its own, the only ports its driver
// listens on, and the control plane believes no replica address outside it.
// They reach the control plane only through NATS, with the permissions
// remote agents have.
func startSimFleet(ctx context.Context, log *slog.Logger, sf simFleet) (stop func(), err error) {
	tp, err := simReplicaTracer(ctx, log)
	if err != nil {
		return nil, fmt.Errorf("sim fleet: %w", err)
	}
	var agents []*agent.Agent
	var drivers []*agent.SimDriver
	var conns []*nats.Conn
	stop = func() {
		for _, a := range agents {
			a.Stop()
		}
		for _, d := range drivers {
			d.Close(context.Background())
		}
		for _, nc := range conns {
			nc.Close()
		}
		_ = tp.Shutdown(context.WithoutCancel(ctx))
	}
	for i := range sf.nodes {
		spec, mig := simFleetLayout(i, sf.gpus)
		inv, err := agent.ParseInventory(spec, mig)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		node := fmt.Sprintf("gpu-node-%02d", i+1)
		addr := trust.Address{Host: "127.0.0.1", PortFirst: sf.portBase + i*SimPortsPerNode, PortLast: sf.portBase + (i+1)*SimPortsPerNode - 1}
		nc, _, err := devNode{natsURL: sf.natsURL, enroll: sf.enroll, log: log}.join(ctx, node, addr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		conns = append(conns, nc)
		driver := agent.NewSimDriver(agent.SimDriverConfig{Log: log, PortFirst: addr.PortFirst, PortLast: addr.PortLast, Tracer: tp})
		drivers = append(drivers, driver)
		a, err := agent.New(agent.Config{Node: node, GPUs: inv, StateDir: filepath.Join(sf.dir, node), Driver: driver}, nc, log.With(slog.String("node", node)))
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

// simReplicaTracer is the tracer of the simulated replicas a process
// serves: a service of its own, so a trace shows which hop was simulated.
func simReplicaTracer(ctx context.Context, log *slog.Logger) (tracing.Provider, error) {
	return processTracer(ctx, log, "modelplane-sim-replica", "the simulated replicas' requests")
}
