package placement

import (
	"cmp"
	"fmt"
	"slices"

	"modelplane/busapi"
)

// cpuFleet is Plan's working copy of the CPU nodes: nodes without GPU
// slices and with cores. GPU nodes are not in it, so a CPU replica never
// lands on a GPU node, and the GPU fleet never sees a CPU node.
type cpuFleet struct {
	nodes []cpuNode // by name
}

type cpuNode struct {
	name                  string
	freeCores, freeMemory int
	spread                map[string]int // replicas per endpoint
	runtimes              []string
}

func newCPUFleet(nodes []Node) *cpuFleet {
	c := &cpuFleet{}
	for _, nd := range nodes {
		if len(nd.Slices) > 0 || nd.CPUCores <= 0 {
			continue
		}
		n := cpuNode{name: nd.Name, freeCores: nd.CPUCores, freeMemory: nd.MemoryMB,
			spread: map[string]int{}, runtimes: nd.Runtimes}
		seen := map[string]bool{}
		for _, h := range nd.CPUHolds {
			if seen[h.Owner] {
				continue // a hold listed twice is one hold
			}
			seen[h.Owner] = true
			n.freeCores -= h.Cores
			n.freeMemory -= h.MemoryMB
			n.spread[h.OwnerEndpoint]++
		}
		c.nodes = append(c.nodes, n)
	}
	slices.SortStableFunc(c.nodes, func(a, b cpuNode) int { return cmp.Compare(a.name, b.name) })
	return c
}

// place gives r its cores and memory on the CPU node with the fewest
// replicas of the same endpoint (spread), then the fewest cores left free
// after it (best fit: partly used nodes fill first and empty ones stay
// whole for big replicas), then the least memory left, then by name.
func (c *cpuFleet) place(r Request) Result {
	res := Result{Replica: r.Replica}
	switch {
	case r.Replica == "":
		res.Err = "request has no replica id"
		return res
	case r.HostMemoryMB < 0:
		res.Err = "memory is negative"
		return res
	}
	best, runs := -1, 0
	for i := range c.nodes {
		n := &c.nodes[i]
		if r.Runtime != "" && !busapi.RunsRuntime(n.runtimes, r.Runtime) {
			continue
		}
		runs++
		if n.freeCores < r.CPUCores || n.freeMemory < r.HostMemoryMB {
			continue
		}
		if best >= 0 {
			b := &c.nodes[best]
			if d := cmp.Or(cmp.Compare(n.spread[r.Endpoint], b.spread[r.Endpoint]), cmp.Compare(n.freeCores, b.freeCores),
				cmp.Compare(n.freeMemory, b.freeMemory)); d >= 0 {
				continue
			}
		}
		best = i
	}
	if best < 0 {
		res.Err = fmt.Sprintf("no CPU node with %d free cores and %d MiB of free memory", r.CPUCores, r.HostMemoryMB)
		if r.Runtime != "" {
			res.Err = runtimeReason(res.Err, r.Runtime, runs, len(c.nodes), "CPU")
		}
		return res
	}
	n := &c.nodes[best]
	n.freeCores -= r.CPUCores
	n.freeMemory -= r.HostMemoryMB
	n.spread[r.Endpoint]++
	res.Node, res.GPUType, res.Profile = n.name, busapi.CPUType, busapi.ProfileCPU
	res.CPUCores, res.HostMemoryMB = r.CPUCores, r.HostMemoryMB
	return res
}
