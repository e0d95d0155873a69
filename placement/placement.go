package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"modelplane/busapi"
)

// Node is one schedulable node (ready, not lost) with every slice it has.
// A CPU node has no slices and a CPU inventory instead: CPUCores whole
// cores and MemoryMB of memory, of which CPUHolds are taken.
type Node struct {
	Name     string
	Slices   []Slice
	CPUCores int
	MemoryMB int
	CPUHolds []CPUHold
	// Runtimes are the runtime catalogue entries the node runs, as its
	// heartbeat reports them (busapi.NodeStatus.Runtimes): nil when it
	// does not say, and then it takes any request; busapi.AnyRuntime for
	// every runtime.
	Runtimes []string
}

// CPUHold is what one replica holds of a CPU node.
type CPUHold struct {
	Owner         string
	OwnerEndpoint string
	Cores         int
	MemoryMB      int
}

// Slice is one allocatable unit of a GPU: a whole GPU (profile "full",
// index 0) or a MIG partition (profile "mig-1g.10gb", …).
type Slice struct {
	GPU      int
	Index    int
	GPUType  string // "A100-80GB", "H100-80GB"
	Profile  string
	MemoryMB int
	// Owner is the replica holding the slice; empty when free. OwnerEndpoint
	// and OwnerTier describe that replica.
	Owner         string
	OwnerEndpoint string
	OwnerTier     string
}

// Request asks for one replica.
type Request struct {
	// Replica is the new replica's ID; results carry it back.
	Replica  string
	Endpoint string
	// Tier is the endpoint's tier (critical, standard, batch).
	Tier string
	// MemoryMB is the version's GPU memory per GPU; 0 means a whole GPU.
	MemoryMB int
	// GPUCount is the number of GPUs; more than one means tensor
	// parallelism: that many whole GPUs of one type on one node.
	GPUCount int
	// GPUType is required when not empty.
	GPUType string
	// MinProfile is the smallest allocation the endpoint accepts (its
	// instance profile): a MIG profile, or "full". Empty means none.
	MinProfile string
	// CPUCores, with GPUCount 0, asks for a CPU replica: that many whole
	// cores and HostMemoryMB of memory on one CPU node, never a GPU.
	CPUCores     int
	HostMemoryMB int
	// Runtime is the runtime catalogue entry the replica runs on the kind
	// of node it asks for ("vllm", "triton", "builtin": agent/catalog.Name
	// of the version's runtime), so only nodes that run it are
	// candidates. Empty: any node.
	Runtime string
}

// CPU reports whether r asks for a CPU replica.
func (r Request) CPU() bool { return r.GPUCount == 0 && r.CPUCores > 0 }

// Result is where one requested replica goes, or why it cannot.
type Result struct {
	Replica string
	// Node, GPUType, Profile and Slots are set when placed; a CPU
	// replica has GPUType busapi.CPUType, Profile busapi.ProfileCPU, no
	// slots, and the request's CPUCores and HostMemoryMB.
	Node         string
	GPUType      string
	Profile      string
	Slots        []busapi.Slot
	CPUCores     int
	HostMemoryMB int
	// Err says why the replica could not be placed, for people to read
	// ("no free mig-3g.40gb slice or whole GPU on an H100-80GB"); empty when placed.
	Err string
}

// Plan places reqs, in order, on nodes and returns one Result per request.
// Each request sees the slices taken by the ones before it. Plan neither
// changes nor keeps its arguments, and the same input always gives the same
// output, whatever the order of nodes and slices.
func Plan(nodes []Node, reqs []Request) []Result {
	f := newFleet(nodes)
	c := newCPUFleet(nodes)
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		if r.CPU() {
			out[i] = c.place(r)
			continue
		}
		out[i] = f.place(r)
	}
	return out
}

// fleet is Plan's working copy of the nodes: per-GPU state and, for each
// profile and GPU type, the GPUs that have a free slice of it, so a request
// looks only at GPUs that could take it.
type fleet struct {
	nodes    []nodeState // by name
	gpus     []gpuState  // by node, then GPU index
	types    []string    // GPU types, sorted
	typeIdx  map[string]int
	allTypes []int // 0 … len(types)-1
	// buckets[profile][type] lists GPUs with a free slice of that profile,
	// in gpus order. GPUs that can never take the profile again are dropped
	// as requests go by.
	buckets [numProfiles][][]int32
	// spread[endpoint][node] counts the slices an endpoint holds per node.
	spread map[string][]int32
	// counts is scratch space for tensor parallelism, one per type.
	counts []int
}

type nodeState struct {
	name     string
	used     int     // compute in use, in sevenths of a GPU
	gpus     []int32 // into fleet.gpus, by GPU index
	runtimes []string
}

type gpuState struct {
	node     int32
	id       int
	typ      int
	memoryMB int // of its whole-GPU slice, 0 when unknown
	held     int // slices held
	used     int // compute in use, in sevenths
	fullHeld bool
	// tier is the tier of the replicas on the GPU when held > 0; mixed when
	// the fleet already has several tiers on it, which then takes no more.
	tier  string
	mixed bool
	free  [numProfiles][]int // free slice indices, ascending
}

// accepts reports whether a replica of tier may join the GPU.
func (g *gpuState) accepts(tier string) bool {
	return g.held == 0 || (!g.mixed && g.tier == tier)
}

// canGive reports whether the GPU has a slice of profile p to give.
func (g *gpuState) canGive(p int) bool {
	return len(g.free[p]) > 0 && !g.fullHeld && (p != pFull || g.held == 0)
}

func newFleet(nodes []Node) *fleet {
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(nodes[a].Name, nodes[b].Name) })

	f := &fleet{nodes: make([]nodeState, len(nodes)), typeIdx: map[string]int{}, spread: map[string][]int32{}}
	for _, nd := range nodes {
		for _, s := range nd.Slices {
			if _, ok := f.typeIdx[s.GPUType]; !ok {
				f.typeIdx[s.GPUType] = 0
				f.types = append(f.types, s.GPUType)
			}
		}
	}
	slices.Sort(f.types)
	for i, t := range f.types {
		f.typeIdx[t] = i
		f.allTypes = append(f.allTypes, i)
	}
	f.counts = make([]int, len(f.types))
	for p := range f.buckets {
		f.buckets[p] = make([][]int32, len(f.types))
	}

	var ss []Slice // one node's slices, sorted
	for ni, oi := range order {
		nd := &nodes[oi]
		f.nodes[ni].name = nd.Name
		f.nodes[ni].runtimes = nd.Runtimes
		ss = append(ss[:0], nd.Slices...)
		slices.SortStableFunc(ss, func(a, b Slice) int {
			return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.Index, b.Index))
		})
		for i := 0; i < len(ss); {
			j := i + 1
			for j < len(ss) && ss[j].GPU == ss[i].GPU {
				j++
			}
			f.addGPU(int32(ni), ss[i:j])
			i = j
		}
	}
	return f
}

// addGPU adds one GPU from its slices, sorted by index. A slice listed twice
// is one slice, held if any copy has an owner.
func (f *fleet) addGPU(node int32, ss []Slice) {
	gi := int32(len(f.gpus))
	f.gpus = append(f.gpus, gpuState{node: node, id: ss[0].GPU, typ: f.typeIdx[ss[0].GPUType]})
	g := &f.gpus[gi]
	nd := &f.nodes[node]
	nd.gpus = append(nd.gpus, gi)
	for i := 0; i < len(ss); {
		s := ss[i]
		for i++; i < len(ss) && ss[i].Index == s.Index; i++ {
			if s.Owner == "" {
				s = ss[i]
			}
		}
		p, known := profileRank(s.Profile)
		if p == pFull && s.MemoryMB > 0 {
			g.memoryMB = s.MemoryMB
		}
		if s.Owner == "" {
			if known {
				g.free[p] = append(g.free[p], s.Index)
			}
			continue
		}
		switch {
		case g.held == 0:
			g.tier = s.OwnerTier
		case g.tier != s.OwnerTier:
			g.mixed = true
		}
		g.held++
		c := Compute(s.Profile)
		g.used += c
		nd.used += c
		g.fullHeld = g.fullHeld || p == pFull && known
		f.count(s.OwnerEndpoint, node, 1)
	}
	for p := range g.free {
		if len(g.free[p]) > 0 {
			f.buckets[p][g.typ] = append(f.buckets[p][g.typ], gi)
		}
	}
}

// count adds n slices held by endpoint on node.
func (f *fleet) count(endpoint string, node int32, n int32) {
	c := f.spread[endpoint]
	if c == nil {
		c = make([]int32, len(f.nodes))
		f.spread[endpoint] = c
	}
	c[node] += n
}

// typesFor returns the GPU types a request may use.
func (f *fleet) typesFor(gpuType string) []int {
	if gpuType == "" {
		return f.allTypes
	}
	if t, ok := f.typeIdx[gpuType]; ok {
		return []int{t}
	}
	return nil
}

func (f *fleet) place(r Request) Result {
	res := Result{Replica: r.Replica}
	least := 0
	if r.MinProfile != "" {
		p, ok := profileRank(r.MinProfile)
		if !ok {
			res.Err = fmt.Sprintf("unknown instance profile %q", r.MinProfile)
			return res
		}
		least = p
	}
	switch {
	case r.Replica == "":
		res.Err = "request has no replica id"
	case r.MemoryMB < 0:
		res.Err = "GPU memory is negative"
	case r.GPUCount < 0:
		res.Err = "GPU count is negative"
	case r.GPUCount > 1:
		f.placeTP(r, &res)
	case r.MemoryMB > maxSliceMB:
		res.Err = fmt.Sprintf("needs %d GB on one GPU; ask for several GPUs (tensor parallelism)", (r.MemoryMB+1023)/1024)
	default:
		f.placeOne(r, candidates(r.MemoryMB, least), &res)
	}
	return res
}

// placeOne gives r one slice of the first profile in cands that has one
// free, choosing among those by spread, then fit, then name.
func (f *fleet) placeOne(r Request, cands []int, res *Result) {
	types := f.typesFor(r.GPUType)
	spread := f.spread[r.Endpoint]
	blocked := false
	for _, p := range cands {
		best := int32(-1)
		var bestSpread int32
		var bestUsed, bestNodeUsed int
		for _, t := range types {
			b := f.buckets[p][t]
			w := 0
			for _, gi := range b {
				g := &f.gpus[gi]
				if !g.canGive(p) {
					continue // holds only grow in a Plan: never again
				}
				b[w] = gi
				w++
				if r.Runtime != "" && !busapi.RunsRuntime(f.nodes[g.node].runtimes, r.Runtime) {
					continue
				}
				if !g.accepts(r.Tier) {
					blocked = true
					continue
				}
				if p == pFull && g.memoryMB > 0 && g.memoryMB < r.MemoryMB {
					continue
				}
				var sp int32
				if spread != nil {
					sp = spread[g.node]
				}
				if best >= 0 && (sp > bestSpread || sp == bestSpread && g.used < bestUsed) {
					continue // cheap rejection of most GPUs, before the node is read
				}
				nodeUsed := f.nodes[g.node].used
				if best >= 0 && !better(sp, g.used, nodeUsed, gi, bestSpread, bestUsed, bestNodeUsed, best) {
					continue
				}
				best, bestSpread, bestUsed, bestNodeUsed = gi, sp, g.used, nodeUsed
			}
			clear(b[w:])
			f.buckets[p][t] = b[:w]
		}
		if best >= 0 {
			g := &f.gpus[best]
			slot := busapi.Slot{GPU: g.id, Slice: g.free[p][0]}
			g.free[p] = g.free[p][1:]
			f.take(r, best, p)
			res.Node, res.GPUType, res.Profile = f.nodes[g.node].name, f.types[g.typ], profileNames[p]
			res.Slots = []busapi.Slot{slot}
			return
		}
	}
	res.Err = f.withRuntime(r, noFree(cands, r.GPUType, blocked))
}

// better orders candidate GPUs: fewer slices of the endpoint on the node,
// then more compute in use on the GPU, then on the node, then gpus order.
func better(sp int32, used, nodeUsed int, gi int32, bsp int32, bused, bnodeUsed int, bgi int32) bool {
	if sp != bsp {
		return sp < bsp
	}
	if used != bused {
		return used > bused
	}
	if nodeUsed != bnodeUsed {
		return nodeUsed > bnodeUsed
	}
	return gi < bgi
}

// take marks one slice of profile p on GPU gi as held by r.
func (f *fleet) take(r Request, gi int32, p int) {
	g := &f.gpus[gi]
	if g.held == 0 {
		g.tier = r.Tier
	}
	g.held++
	g.used += compute[p]
	g.fullHeld = g.fullHeld || p == pFull
	f.nodes[g.node].used += compute[p]
	f.count(r.Endpoint, g.node, 1)
}

// placeTP gives r GPUCount whole GPUs of one type on one node.
func (f *fleet) placeTP(r Request, res *Result) {
	types := f.typesFor(r.GPUType)
	spread := f.spread[r.Endpoint]
	bestNode, bestType, bestFree := -1, -1, 0
	var bestSpread int32
	for ni := range f.nodes {
		nd := &f.nodes[ni]
		if r.Runtime != "" && !busapi.RunsRuntime(nd.runtimes, r.Runtime) {
			continue
		}
		clear(f.counts)
		for _, gi := range nd.gpus {
			if g := &f.gpus[gi]; g.canGive(pFull) {
				f.counts[g.typ]++
			}
		}
		var sp int32
		if spread != nil {
			sp = spread[ni]
		}
		for _, t := range types {
			free := f.counts[t]
			if free < r.GPUCount {
				continue
			}
			if bestNode >= 0 {
				if sp != bestSpread {
					if sp > bestSpread {
						continue
					}
				} else if free != bestFree {
					if free > bestFree {
						continue
					}
				} else if nd.used <= f.nodes[bestNode].used {
					continue // same fit: the busier node, else the first by name and type
				}
			}
			bestNode, bestType, bestFree, bestSpread = ni, t, free, sp
		}
	}
	if bestNode < 0 {
		if r.GPUType == "" {
			res.Err = fmt.Sprintf("no node with %d free whole GPUs of one type", r.GPUCount)
		} else {
			res.Err = fmt.Sprintf("no node with %d free whole %s GPUs", r.GPUCount, r.GPUType)
		}
		res.Err = f.withRuntime(r, res.Err)
		return
	}
	res.Node, res.GPUType, res.Profile = f.nodes[bestNode].name, f.types[bestType], busapi.ProfileFull
	res.Slots = make([]busapi.Slot, 0, r.GPUCount)
	for _, gi := range f.nodes[bestNode].gpus {
		g := &f.gpus[gi]
		if g.typ != bestType || !g.canGive(pFull) {
			continue
		}
		res.Slots = append(res.Slots, busapi.Slot{GPU: g.id, Slice: g.free[pFull][0]})
		g.free[pFull] = g.free[pFull][1:]
		f.take(r, gi, pFull)
		if len(res.Slots) == r.GPUCount {
			break
		}
	}
}

// withRuntime is why r could not be placed once the nodes that lack its
// runtime are counted: when no GPU node runs it, that alone ("no node can
// run vllm (installed on none of 3 GPU nodes)"), else reason with how few
// do.
func (f *fleet) withRuntime(r Request, reason string) string {
	if r.Runtime == "" {
		return reason
	}
	gpuNodes, runs := 0, 0
	for i := range f.nodes {
		if len(f.nodes[i].gpus) == 0 {
			continue
		}
		gpuNodes++
		if busapi.RunsRuntime(f.nodes[i].runtimes, r.Runtime) {
			runs++
		}
	}
	return runtimeReason(reason, r.Runtime, runs, gpuNodes, "GPU")
}

// runtimeReason adds to reason how many of the kind's nodes run runtime,
// or replaces it when none does.
func runtimeReason(reason, runtime string, runs, nodes int, kind string) string {
	switch {
	case nodes == 0 || runs == nodes:
		return reason
	case runs == 0:
		return fmt.Sprintf("no node can run %s (installed on none of %d %s %s)", runtime, nodes, kind, plural(nodes, "node"))
	}
	return fmt.Sprintf("%s; %s is installed on only %d of %d %s nodes", reason, runtime, runs, nodes, kind)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// noFree says which allocations a replica could not get, as in "no free
// mig-3g.40gb, mig-4g.40gb slice or whole GPU on an H100-80GB".
func noFree(cands []int, gpuType string, blocked bool) string {
	var b strings.Builder
	b.WriteString("no free ")
	full := false
	migs := 0
	for _, p := range cands {
		if p == pFull {
			full = true
			continue
		}
		if migs > 0 {
			b.WriteString(", ")
		}
		b.WriteString(profileNames[p])
		migs++
	}
	switch {
	case migs > 0 && full:
		b.WriteString(" slice or whole GPU")
	case migs > 0:
		b.WriteString(" slice")
	default:
		b.WriteString("whole GPU")
	}
	if gpuType != "" {
		b.WriteString(" on ")
		b.WriteString(article(gpuType))
		b.WriteString(" ")
		b.WriteString(gpuType)
	}
	if blocked {
		b.WriteString("; the free ones are on GPUs kept for other tiers")
	}
	return b.String()
}

// article is "an" before a name read as starting with a vowel sound (an
// A100, an H100, an L4), else "a".
func article(name string) string {
	if name != "" && strings.ContainsRune("AEFHILMNORSXaeiou", rune(name[0])) {
		return "an"
	}
	return "a"
}
