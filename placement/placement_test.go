package placement

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"modelplane/busapi"
)

const (
	a100 = "A100-80GB"
	h100 = "H100-80GB"
)

var profileMB = map[string]int{
	"mig-1g.10gb": 10240, "mig-2g.20gb": 20480, "mig-3g.40gb": 40960,
	"mig-4g.40gb": 40960, "mig-7g.80gb": 81920, busapi.ProfileFull: 81920,
}

// gpu returns the slices of one GPU: a whole GPU when no MIG profiles are
// given, else one slice per profile, numbered from 0.
func gpu(id int, typ string, profiles ...string) []Slice {
	if len(profiles) == 0 {
		profiles = []string{busapi.ProfileFull}
	}
	out := make([]Slice, len(profiles))
	for i, p := range profiles {
		out[i] = Slice{GPU: id, Index: i, GPUType: typ, Profile: p, MemoryMB: profileMB[p]}
	}
	return out
}

func node(name string, gpus ...[]Slice) Node {
	return Node{Name: name, Slices: slices.Concat(gpus...)}
}

// own marks slice (gpu, index) of n as held by a replica of endpoint and tier.
func own(n Node, gpuID, index int, endpoint, tier string) Node {
	n.Slices = slices.Clone(n.Slices)
	for i := range n.Slices {
		s := &n.Slices[i]
		if s.GPU == gpuID && s.Index == index {
			s.Owner, s.OwnerEndpoint, s.OwnerTier = fmt.Sprintf("old-%s-%d-%d", n.Name, gpuID, index), endpoint, tier
			return n
		}
	}
	panic("no such slice")
}

func rep(i int, endpoint, tier string, memoryMB int) Request {
	return Request{Replica: fmt.Sprintf("r%d", i), Endpoint: endpoint, Tier: tier, MemoryMB: memoryMB, GPUCount: 1}
}

func times(n int, f func(i int) Request) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

var (
	mig7x1g    = []string{"mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb"}
	mig3g4g    = []string{"mig-3g.40gb", "mig-4g.40gb"}
	mig3x2g1g  = []string{"mig-2g.20gb", "mig-2g.20gb", "mig-2g.20gb", "mig-1g.10gb"}
	oneOfEach  = []string{"mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	errNoneAt1 = "no free mig-1g.10gb, mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"
)

// place is Plan's result as "node/gpu:slice profile" strings, or the errors.
func place(nodes []Node, reqs []Request) []string {
	var out []string
	for _, r := range Plan(nodes, reqs) {
		out = append(out, describe(r))
	}
	return out
}

func describe(r Result) string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	var b strings.Builder
	b.WriteString(r.Node)
	for i, s := range r.Slots {
		sep := "/"
		if i > 0 {
			sep = ","
		}
		fmt.Fprintf(&b, "%s%d:%d", sep, s.GPU, s.Slice)
	}
	fmt.Fprintf(&b, " %s %s", r.Profile, r.GPUType)
	return b.String()
}

// TestSizing asks, one after another, for replicas of one size on a node with
// one slice of each profile, so each takes the next allocation in its order
// of preference until none is left.
func TestSizing(t *testing.T) {
	t.Parallel()
	var gpus [][]Slice
	for i, p := range oneOfEach {
		gpus = append(gpus, gpu(i, a100, p))
	}
	fleet := []Node{node("n1", gpus...)}
	all := []string{"mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	tests := []struct {
		name     string
		memoryMB int
		min      string
		want     []string
		err      string
	}{
		{"no memory named", 0, "", []string{"full"}, "no free whole GPU"},
		{"4 GB", 4096, "", all, errNoneAt1},
		{"10 GB", 10240, "", all, errNoneAt1},
		{"just over 10 GB", 10241, "", all[1:], "no free mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"20 GB", 20480, "", all[1:], "no free mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"just over 20 GB", 20481, "", all[2:], "no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"40 GB", 40960, "", all[2:], "no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"just over 40 GB", 40961, "", []string{"full", "mig-7g.80gb"}, "no free mig-7g.80gb slice or whole GPU"},
		{"80 GB", 81920, "", []string{"full", "mig-7g.80gb"}, "no free mig-7g.80gb slice or whole GPU"},
		{"min 3g, 4 GB", 4096, "mig-3g.40gb", all[2:], "no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"min 4g, 4 GB", 4096, "mig-4g.40gb", all[3:], "no free mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"min 2g, 30 GB changes nothing", 30000, "mig-2g.20gb", all[2:], "no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU"},
		{"min 1g, 4 GB changes nothing", 4096, "mig-1g.10gb", all, errNoneAt1},
		{"min full, 4 GB", 4096, "full", []string{"full"}, "no free whole GPU"},
		{"min 7g, 60 GB", 61440, "mig-7g.80gb", []string{"full", "mig-7g.80gb"}, "no free mig-7g.80gb slice or whole GPU"},
		{"min full, 60 GB", 61440, "full", []string{"full"}, "no free whole GPU"},
		{"min full, no memory", 0, "full", []string{"full"}, "no free whole GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reqs := times(len(tt.want)+1, func(i int) Request {
				r := rep(i, fmt.Sprintf("e%d", i), "standard", tt.memoryMB)
				r.MinProfile = tt.min
				return r
			})
			res := Plan(fleet, reqs)
			var got []string
			for _, r := range res[:len(tt.want)] {
				if r.Err != "" {
					got = append(got, "error: "+r.Err)
					continue
				}
				got = append(got, r.Profile)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("profiles: got %q, want %q", got, tt.want)
			}
			if last := res[len(tt.want)]; last.Err != tt.err {
				t.Errorf("when all are taken: got error %q, want %q", last.Err, tt.err)
			}
		})
	}
}

func TestTooLargeAndInvalid(t *testing.T) {
	t.Parallel()
	fleet := []Node{node("n1", gpu(0, a100), gpu(1, a100))}
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"over 80 GB on one GPU", Request{Replica: "r", MemoryMB: 96 * 1024, GPUCount: 1}, "needs 96 GB on one GPU; ask for several GPUs (tensor parallelism)"},
		{"over 80 GB, count 0", Request{Replica: "r", MemoryMB: 81921}, "needs 81 GB on one GPU; ask for several GPUs (tensor parallelism)"},
		{"unknown instance profile", Request{Replica: "r", MemoryMB: 4096, MinProfile: "mig-1g.5gb"}, `unknown instance profile "mig-1g.5gb"`},
		{"instance profile of the endpoint form", Request{Replica: "r", MinProfile: "gpu-a100-80gb"}, `unknown instance profile "gpu-a100-80gb"`},
		{"negative memory", Request{Replica: "r", MemoryMB: -1}, "GPU memory is negative"},
		{"negative count", Request{Replica: "r", GPUCount: -2}, "GPU count is negative"},
		{"no replica id", Request{MemoryMB: 4096}, "request has no replica id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Plan(fleet, []Request{tt.req})[0]
			if got.Err != tt.want || got.Node != "" || got.Slots != nil {
				t.Errorf("got %+v, want error %q", got, tt.want)
			}
			if got.Replica != tt.req.Replica {
				t.Errorf("replica: got %q, want %q", got.Replica, tt.req.Replica)
			}
		})
	}
}

func TestTensorParallel(t *testing.T) {
	t.Parallel()
	whole := func(name, typ string, n int) Node {
		nd := Node{Name: name}
		for i := range n {
			nd.Slices = append(nd.Slices, gpu(i, typ)...)
		}
		return nd
	}
	tp := func(n int, typ string) []Request {
		return []Request{{Replica: "r0", Endpoint: "llm", Tier: "standard", MemoryMB: 61440, GPUCount: n, GPUType: typ}}
	}
	tests := []struct {
		name  string
		nodes []Node
		reqs  []Request
		want  []string
	}{
		{"on one node", []Node{whole("a", a100, 8)}, tp(4, ""),
			[]string{"a/0:0,1:0,2:0,3:0 full A100-80GB"}},
		{"six free in the fleet, but three per node", []Node{whole("a", a100, 3), whole("b", a100, 3)}, tp(4, a100),
			[]string{"error: no node with 4 free whole A100-80GB GPUs"}},
		{"no type named: one type per replica", []Node{node("a", gpu(0, a100), gpu(1, h100), gpu(2, a100), gpu(3, h100))}, tp(4, ""),
			[]string{"error: no node with 4 free whole GPUs of one type"}},
		{"no type named: the type that has enough", []Node{node("a", gpu(0, a100), gpu(1, h100), gpu(2, a100), gpu(3, h100), gpu(4, h100))}, tp(3, ""),
			[]string{"a/1:0,3:0,4:0 full H100-80GB"}},
		{"the type asked for", []Node{whole("a", a100, 4), whole("b", h100, 4)}, tp(2, h100),
			[]string{"b/0:0,1:0 full H100-80GB"}},
		{"never MIG slices", []Node{node("a", gpu(0, a100, "mig-7g.80gb"), gpu(1, a100, "mig-7g.80gb"), gpu(2, a100))}, tp(2, ""),
			[]string{"error: no node with 2 free whole GPUs of one type"}},
		{"owned GPUs are taken", []Node{own(whole("a", a100, 4), 1, 0, "other", "standard")}, tp(3, ""),
			[]string{"a/0:0,2:0,3:0 full A100-80GB"}},
		{"best fit: the node with fewest free GPUs that suffice", []Node{whole("a", a100, 8), whole("b", a100, 4), whole("c", a100, 2)}, tp(4, ""),
			[]string{"b/0:0,1:0,2:0,3:0 full A100-80GB"}},
		{"same fit: the busier node", []Node{whole("a", a100, 4), own(whole("b", a100, 5), 4, 0, "x", "batch")}, tp(4, ""),
			[]string{"b/0:0,1:0,2:0,3:0 full A100-80GB"}},
		{"same fit, same use: by name", []Node{whole("b", a100, 4), whole("a", a100, 4)}, tp(4, ""),
			[]string{"a/0:0,1:0,2:0,3:0 full A100-80GB"}},
		{"spread before fit", []Node{own(whole("a", a100, 3), 0, 0, "llm", "standard"), whole("b", a100, 8)}, tp(2, ""),
			[]string{"b/0:0,1:0 full A100-80GB"}},
		{"each replica takes its own GPUs", []Node{whole("a", a100, 4)},
			[]Request{{Replica: "r0", GPUCount: 2}, {Replica: "r1", GPUCount: 2}, {Replica: "r2", GPUCount: 2}},
			[]string{"a/0:0,1:0 full A100-80GB", "a/2:0,3:0 full A100-80GB", "error: no node with 2 free whole GPUs of one type"}},
		{"a GPU with a slice held is not whole", []Node{node("a", gpu(0, a100, "full", "mig-1g.10gb"), gpu(1, a100), gpu(2, a100))},
			[]Request{{Replica: "r0", MemoryMB: 4096}, {Replica: "r1", GPUCount: 2}, {Replica: "r2", GPUCount: 1}},
			[]string{"a/0:1 mig-1g.10gb A100-80GB", "a/1:0,2:0 full A100-80GB", "error: no free whole GPU"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := place(tt.nodes, tt.reqs); !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestGPUType(t *testing.T) {
	t.Parallel()
	fleet := []Node{
		node("a", gpu(0, a100, mig7x1g...), gpu(1, a100)),
		node("b", gpu(0, h100, mig3g4g...), gpu(1, h100)),
	}
	typed := func(memoryMB int, typ string) Request {
		return Request{Replica: "r", Endpoint: "e", Tier: "standard", MemoryMB: memoryMB, GPUType: typ}
	}
	tests := []struct {
		name string
		reqs []Request
		want []string
	}{
		{"small on an H100 takes a 3g", []Request{typed(4096, h100)}, []string{"b/0:0 mig-3g.40gb H100-80GB"}},
		{"small on an A100 takes a 1g", []Request{typed(4096, a100)}, []string{"a/0:0 mig-1g.10gb A100-80GB"}},
		{"whole H100", []Request{typed(0, h100)}, []string{"b/1:0 full H100-80GB"}},
		{"type not in the fleet", []Request{typed(20480, "L4-24GB")},
			[]string{"error: no free mig-2g.20gb, mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU on an L4-24GB"}},
		{"all H100s taken", []Request{typed(61440, h100), typed(30000, h100), typed(30000, h100), typed(30000, h100)},
			[]string{"b/1:0 full H100-80GB", "b/0:0 mig-3g.40gb H100-80GB", "b/0:1 mig-4g.40gb H100-80GB",
				"error: no free mig-3g.40gb, mig-4g.40gb, mig-7g.80gb slice or whole GPU on an H100-80GB"}},
		{"a whole GPU too small for the replica", []Request{typed(61440, "T4-16GB")}, []string{"error: no free mig-7g.80gb slice or whole GPU on a T4-16GB"}},
	}
	small := node("c", []Slice{{GPU: 0, GPUType: "T4-16GB", Profile: "full", MemoryMB: 16384}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := place(append(slices.Clone(fleet), small), tt.reqs); !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestTiersApart(t *testing.T) {
	t.Parallel()
	twoGPUs := node("a", gpu(0, a100, mig7x1g...), gpu(1, a100, mig7x1g...))
	criticalOn0 := own(twoGPUs, 0, 0, "c", "critical")
	tests := []struct {
		name  string
		nodes []Node
		reqs  []Request
		want  []string
	}{
		{"same tier joins the used GPU", []Node{criticalOn0}, []Request{rep(0, "x", "critical", 4096)},
			[]string{"a/0:1 mig-1g.10gb A100-80GB"}},
		{"another tier takes a fresh GPU", []Node{criticalOn0}, []Request{rep(0, "x", "batch", 4096)},
			[]string{"a/1:0 mig-1g.10gb A100-80GB"}},
		{"then the fresh GPU is that tier's", []Node{criticalOn0},
			[]Request{rep(0, "x", "batch", 4096), rep(1, "y", "critical", 4096), rep(2, "z", "batch", 4096)},
			[]string{"a/1:0 mig-1g.10gb A100-80GB", "a/0:1 mig-1g.10gb A100-80GB", "a/1:1 mig-1g.10gb A100-80GB"}},
		{"tiers set within one plan", []Node{twoGPUs},
			[]Request{rep(0, "x", "critical", 4096), rep(1, "y", "standard", 4096), rep(2, "z", "batch", 4096)},
			[]string{"a/0:0 mig-1g.10gb A100-80GB", "a/1:0 mig-1g.10gb A100-80GB",
				"error: " + errNoneAt1 + "; the free ones are on GPUs kept for other tiers"}},
		{"a GPU already mixed takes no more", []Node{own(own(twoGPUs, 0, 0, "c", "critical"), 0, 1, "b", "batch")},
			[]Request{rep(0, "x", "critical", 4096), rep(1, "y", "critical", 4096)},
			[]string{"a/1:0 mig-1g.10gb A100-80GB", "a/1:1 mig-1g.10gb A100-80GB"}},
		{"whole GPUs are never shared", []Node{node("a", gpu(0, a100), gpu(1, a100, "mig-7g.80gb"))},
			[]Request{rep(0, "x", "batch", 0), rep(1, "x", "batch", 0)},
			[]string{"a/0:0 full A100-80GB", "error: no free whole GPU"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := place(tt.nodes, tt.reqs); !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestSpreadAndFit(t *testing.T) {
	t.Parallel()
	migNode := func(name string) Node { return node(name, gpu(0, a100, mig7x1g...), gpu(1, a100, mig7x1g...)) }
	tests := []struct {
		name  string
		nodes []Node
		reqs  []Request
		want  []string
	}{
		{"an endpoint's replicas spread over nodes", []Node{migNode("c"), migNode("a"), migNode("b")},
			times(4, func(i int) Request { return rep(i, "e", "standard", 4096) }),
			[]string{"a/0:0 mig-1g.10gb A100-80GB", "b/0:0 mig-1g.10gb A100-80GB", "c/0:0 mig-1g.10gb A100-80GB", "a/0:1 mig-1g.10gb A100-80GB"}},
		{"slices the endpoint holds already count", []Node{own(migNode("a"), 1, 3, "e", "standard"), migNode("b")},
			times(2, func(i int) Request { return rep(i, "e", "standard", 4096) }),
			[]string{"b/0:0 mig-1g.10gb A100-80GB", "a/1:0 mig-1g.10gb A100-80GB"}},
		{"spread before fit; other endpoints fill the used GPU", []Node{own(migNode("a"), 1, 3, "e", "standard"), migNode("b")},
			[]Request{rep(0, "e", "standard", 4096), rep(1, "f", "standard", 4096)},
			[]string{"b/0:0 mig-1g.10gb A100-80GB", "a/1:0 mig-1g.10gb A100-80GB"}},
		{"best fit: the fullest GPU first", []Node{own(own(migNode("b"), 1, 0, "x", "standard"), 1, 1, "x", "standard"), own(migNode("a"), 0, 6, "y", "standard")},
			[]Request{rep(0, "e", "standard", 4096)},
			[]string{"b/1:2 mig-1g.10gb A100-80GB"}},
		{"best fit counts compute, not slices", []Node{
			node("a", gpu(0, a100, mig7x1g...), gpu(1, a100, mig3x2g1g...)),
			node("b", gpu(0, a100, mig7x1g...)),
		}, []Request{rep(0, "x", "standard", 20480), rep(1, "y", "standard", 4096), rep(2, "z", "standard", 4096)},
			[]string{"a/1:0 mig-2g.20gb A100-80GB", "a/1:3 mig-1g.10gb A100-80GB", "a/0:0 mig-1g.10gb A100-80GB"}},
		{"fresh GPUs: the busier node first", []Node{node("a", gpu(0, a100), gpu(1, a100)), own(node("b", gpu(0, a100), gpu(1, a100)), 0, 0, "x", "batch")},
			[]Request{rep(0, "e", "standard", 0), rep(1, "f", "standard", 0)},
			[]string{"b/1:0 full A100-80GB", "a/0:0 full A100-80GB"}},
		{"partly used GPU fills before a fresh one on its node", []Node{own(migNode("a"), 1, 5, "x", "standard")},
			times(3, func(i int) Request { return rep(i, fmt.Sprintf("e%d", i), "standard", 4096) }),
			[]string{"a/1:0 mig-1g.10gb A100-80GB", "a/1:1 mig-1g.10gb A100-80GB", "a/1:2 mig-1g.10gb A100-80GB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := place(tt.nodes, tt.reqs); !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestDuplicateSliceListedOnce(t *testing.T) {
	t.Parallel()
	n := node("a", gpu(0, a100, "mig-1g.10gb", "mig-1g.10gb"))
	n.Slices = append(n.Slices, n.Slices[0])
	n.Slices[2].Owner, n.Slices[2].OwnerTier = "old", "standard"
	got := place([]Node{n}, times(2, func(i int) Request { return rep(i, "e", "standard", 4096) }))
	want := []string{"a/0:1 mig-1g.10gb A100-80GB", "error: " + errNoneAt1}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestProfiles(t *testing.T) {
	t.Parallel()
	want := []string{"mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	got := Profiles()
	if !slices.Equal(got, want) {
		t.Errorf("Profiles() = %q, want %q", got, want)
	}
	got[0] = "changed"
	if Profiles()[0] != want[0] {
		t.Error("Profiles returned its own array")
	}
	for _, tt := range []struct {
		profile string
		want    int
	}{{"mig-1g.10gb", 1}, {"mig-2g.20gb", 2}, {"mig-3g.40gb", 3}, {"mig-4g.40gb", 4}, {"mig-7g.80gb", 7}, {"full", 7}, {"mig-1g.5gb", 0}, {"", 0}} {
		if got := Compute(tt.profile); got != tt.want {
			t.Errorf("Compute(%q) = %d, want %d", tt.profile, got, tt.want)
		}
	}
}

// randomFleet is a small fleet of whole and MIG GPUs of three types, some
// slices held, most GPUs by one tier and a few by several.
func randomFleet(rng *rand.Rand) []Node {
	layouts := [][]string{nil, nil, mig7x1g, mig3g4g, mig3x2g1g, {"mig-7g.80gb"}, {"mig-1g.10gb", "mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb"}}
	tiers := []string{"critical", "standard", "batch"}
	nodes := make([]Node, 1+rng.IntN(6))
	for ni := range nodes {
		nd := &nodes[ni]
		nd.Name = fmt.Sprintf("n%02d", rng.IntN(100)*10+ni) // unique, not in input order
		typ := []string{a100, h100}[rng.IntN(2)]
		whole := rng.IntN(5) < 2
		for g := range 1 + rng.IntN(8) {
			var ss []Slice
			if whole {
				ss = gpu(g, typ)
			} else {
				ss = gpu(g, typ, layouts[rng.IntN(len(layouts))]...)
			}
			if rng.IntN(10) == 0 {
				ss = []Slice{{GPU: g, GPUType: "L4-24GB", Profile: "full", MemoryMB: 24576}}
			}
			tier := tiers[rng.IntN(len(tiers))]
			for i := range ss {
				if rng.IntN(5) > 0 {
					continue
				}
				if rng.IntN(10) == 0 {
					tier = tiers[rng.IntN(len(tiers))]
				}
				ss[i].Owner = fmt.Sprintf("old-%d-%d-%d", ni, g, i)
				ss[i].OwnerEndpoint = fmt.Sprintf("e%d", rng.IntN(5))
				ss[i].OwnerTier = tier
			}
			nd.Slices = append(nd.Slices, ss...)
		}
	}
	return nodes
}

func randomRequests(rng *rand.Rand, n int) []Request {
	mems := []int{0, 4096, 10240, 15000, 20480, 30000, 40960, 61440, 81920, 100000}
	mins := []string{"", "", "", "mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	typs := []string{"", "", a100, h100, "L4-24GB"}
	reqs := make([]Request, n)
	for i := range reqs {
		count := 1
		switch rng.IntN(10) {
		case 0:
			count = 0
		case 1:
			count = 2 + rng.IntN(3)
		}
		reqs[i] = Request{
			Replica: fmt.Sprintf("r%d", i), Endpoint: fmt.Sprintf("e%d", rng.IntN(5)),
			Tier:     []string{"critical", "standard", "batch"}[rng.IntN(3)],
			MemoryMB: mems[rng.IntN(len(mems))], GPUCount: count,
			GPUType: typs[rng.IntN(len(typs))], MinProfile: mins[rng.IntN(len(mins))],
		}
	}
	return reqs
}

// refCandidates is the sizing rule written out plainly.
func refCandidates(memoryMB int, min string) []string {
	var c []string
	switch {
	case memoryMB == 0:
		c = []string{"full"}
	case memoryMB <= 10240:
		c = []string{"mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	case memoryMB <= 20480:
		c = []string{"mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	case memoryMB <= 40960:
		c = []string{"mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", "full"}
	default:
		c = []string{"full", "mig-7g.80gb"}
	}
	size := map[string]int{"": 0, "mig-1g.10gb": 1, "mig-2g.20gb": 2, "mig-3g.40gb": 3, "mig-4g.40gb": 4, "mig-7g.80gb": 5, "full": 6}
	return slices.DeleteFunc(c, func(p string) bool { return size[p] < size[min] })
}

type gpuKey struct {
	node string
	gpu  int
}

type sliceKey struct {
	node       string
	gpu, index int
}

// reference is a brute-force Plan: every request looks at every slice.
// Plan must give exactly its results.
type reference struct {
	all      []sliceKey
	slice    map[sliceKey]Slice
	held     map[sliceKey]bool
	gpuHeld  map[gpuKey]int
	gpuUsed  map[gpuKey]int
	gpuFull  map[gpuKey]bool
	gpuTiers map[gpuKey]map[string]bool
	nodeUsed map[string]int
	spread   map[string]map[string]int
}

func referencePlan(nodes []Node, reqs []Request) []Result {
	f := reference{slice: map[sliceKey]Slice{}, held: map[sliceKey]bool{}, gpuHeld: map[gpuKey]int{}, gpuUsed: map[gpuKey]int{},
		gpuFull: map[gpuKey]bool{}, gpuTiers: map[gpuKey]map[string]bool{}, nodeUsed: map[string]int{}, spread: map[string]map[string]int{}}
	for _, n := range nodes {
		for _, s := range n.Slices {
			k := sliceKey{n.Name, s.GPU, s.Index}
			f.all = append(f.all, k)
			f.slice[k] = s
			if s.Owner != "" {
				f.hold(k, s.OwnerEndpoint, s.OwnerTier)
			}
		}
	}
	slices.SortFunc(f.all, func(a, b sliceKey) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.index, b.index))
	})
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = f.place(r)
	}
	return out
}

func (f *reference) hold(k sliceKey, endpoint, tier string) {
	g := gpuKey{k.node, k.gpu}
	f.held[k] = true
	f.gpuHeld[g]++
	f.gpuUsed[g] += Compute(f.slice[k].Profile)
	f.nodeUsed[k.node] += Compute(f.slice[k].Profile)
	f.gpuFull[g] = f.gpuFull[g] || f.slice[k].Profile == "full"
	if f.gpuTiers[g] == nil {
		f.gpuTiers[g] = map[string]bool{}
	}
	f.gpuTiers[g][tier] = true
	if f.spread[endpoint] == nil {
		f.spread[endpoint] = map[string]int{}
	}
	f.spread[endpoint][k.node]++
}

// free reports whether slice k may go to a replica, leaving tiers aside.
func (f *reference) free(k sliceKey) bool {
	g := gpuKey{k.node, k.gpu}
	return !f.held[k] && !f.gpuFull[g] && (f.slice[k].Profile != "full" || f.gpuHeld[g] == 0)
}

func (f *reference) place(r Request) Result {
	res := Result{Replica: r.Replica}
	if _, ok := profileRank(r.MinProfile); !ok && r.MinProfile != "" {
		res.Err = fmt.Sprintf("unknown instance profile %q", r.MinProfile)
		return res
	}
	switch {
	case r.GPUCount > 1:
		f.placeTP(r, &res)
	case r.MemoryMB > 81920:
		res.Err = fmt.Sprintf("needs %d GB on one GPU; ask for several GPUs (tensor parallelism)", (r.MemoryMB+1023)/1024)
	default:
		f.placeOne(r, &res)
	}
	return res
}

func (f *reference) placeOne(r Request, res *Result) {
	cands := refCandidates(r.MemoryMB, r.MinProfile)
	blocked := false
	for _, p := range cands {
		var best *sliceKey
		var bestKey [3]int
		for _, k := range f.all {
			s := f.slice[k]
			g := gpuKey{k.node, k.gpu}
			if s.Profile != p || (r.GPUType != "" && s.GPUType != r.GPUType) || !f.free(k) {
				continue
			}
			if f.gpuHeld[g] > 0 && (len(f.gpuTiers[g]) > 1 || !f.gpuTiers[g][r.Tier]) {
				blocked = true
				continue
			}
			if p == "full" && s.MemoryMB > 0 && s.MemoryMB < r.MemoryMB {
				continue
			}
			key := [3]int{f.spread[r.Endpoint][k.node], -f.gpuUsed[g], -f.nodeUsed[k.node]}
			if best == nil || slices.Compare(key[:], bestKey[:]) < 0 {
				best, bestKey = &k, key
			}
		}
		if best != nil {
			f.hold(*best, r.Endpoint, r.Tier)
			s := f.slice[*best]
			res.Node, res.GPUType, res.Profile = best.node, s.GPUType, p
			res.Slots = []busapi.Slot{{GPU: best.gpu, Slice: best.index}}
			return
		}
	}
	var ranks []int
	for _, p := range cands {
		i, _ := profileRank(p)
		ranks = append(ranks, i)
	}
	res.Err = noFree(ranks, r.GPUType, blocked)
}

func (f *reference) placeTP(r Request, res *Result) {
	type choice struct {
		node, typ string
		key       [2]int
		gpus      []sliceKey
	}
	var best *choice
	byNodeType := map[[2]string][]sliceKey{}
	var order [][2]string
	for _, k := range f.all {
		s := f.slice[k]
		if s.Profile != "full" || !f.free(k) || (r.GPUType != "" && s.GPUType != r.GPUType) {
			continue
		}
		nt := [2]string{k.node, s.GPUType}
		if byNodeType[nt] == nil {
			order = append(order, nt)
		}
		byNodeType[nt] = append(byNodeType[nt], k)
	}
	slices.SortFunc(order, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, nt := range order {
		ks := byNodeType[nt]
		if len(ks) < r.GPUCount {
			continue
		}
		c := choice{node: nt[0], typ: nt[1], key: [2]int{f.spread[r.Endpoint][nt[0]], len(ks)}, gpus: ks[:r.GPUCount]}
		if best == nil || slices.Compare(c.key[:], best.key[:]) < 0 ||
			c.key == best.key && f.nodeUsed[c.node] > f.nodeUsed[best.node] {
			best = &c
		}
	}
	if best == nil {
		if r.GPUType == "" {
			res.Err = fmt.Sprintf("no node with %d free whole GPUs of one type", r.GPUCount)
		} else {
			res.Err = fmt.Sprintf("no node with %d free whole %s GPUs", r.GPUCount, r.GPUType)
		}
		return
	}
	res.Node, res.GPUType, res.Profile = best.node, best.typ, "full"
	for _, k := range best.gpus {
		f.hold(k, r.Endpoint, r.Tier)
		res.Slots = append(res.Slots, busapi.Slot{GPU: k.gpu, Slice: k.index})
	}
}

// checkInvariants fails t when results break a rule that must hold whatever
// the choice: no slice twice, owners kept, whole GPUs whole, tiers apart,
// GPU type, size and instance profile respected.
func checkInvariants(t *testing.T, nodes []Node, reqs []Request, res []Result) {
	t.Helper()
	slice := map[sliceKey]Slice{}
	gpuTiers := map[gpuKey]map[string]bool{}
	gpuProfiles := map[gpuKey][]string{}
	given := map[gpuKey]bool{}
	holder := map[sliceKey]string{}
	for _, n := range nodes {
		for _, s := range n.Slices {
			k := sliceKey{n.Name, s.GPU, s.Index}
			slice[k] = s
			if s.Owner != "" {
				holder[k] = s.Owner
				g := gpuKey{n.Name, s.GPU}
				if gpuTiers[g] == nil {
					gpuTiers[g] = map[string]bool{}
				}
				gpuTiers[g][s.OwnerTier] = true
				gpuProfiles[g] = append(gpuProfiles[g], s.Profile)
			}
		}
	}
	if len(res) != len(reqs) {
		t.Fatalf("got %d results for %d requests", len(res), len(reqs))
	}
	for i, r := range res {
		q := reqs[i]
		if r.Replica != q.Replica {
			t.Errorf("result %d: replica %q, want %q", i, r.Replica, q.Replica)
		}
		if r.Err != "" {
			if r.Node != "" || r.Slots != nil {
				t.Errorf("%s: error %q with a placement", q.Replica, r.Err)
			}
			continue
		}
		want := max(q.GPUCount, 1)
		if len(r.Slots) != want {
			t.Errorf("%s: %d slots, want %d", q.Replica, len(r.Slots), want)
		}
		if q.GPUType != "" && r.GPUType != q.GPUType {
			t.Errorf("%s: GPU type %s, want %s", q.Replica, r.GPUType, q.GPUType)
		}
		if q.GPUCount > 1 {
			if r.Profile != "full" {
				t.Errorf("%s: tensor parallel on %s", q.Replica, r.Profile)
			}
		} else if !slices.Contains(refCandidates(q.MemoryMB, q.MinProfile), r.Profile) {
			t.Errorf("%s: %d MB, min %q, got %s", q.Replica, q.MemoryMB, q.MinProfile, r.Profile)
		}
		for _, sl := range r.Slots {
			k := sliceKey{r.Node, sl.GPU, sl.Slice}
			s, ok := slice[k]
			switch {
			case !ok:
				t.Errorf("%s: no slice %v", q.Replica, k)
				continue
			case holder[k] != "":
				t.Errorf("%s: slice %v already held by %s", q.Replica, k, holder[k])
			case s.Profile != r.Profile || s.GPUType != r.GPUType:
				t.Errorf("%s: slice %v is %s %s, result says %s %s", q.Replica, k, s.Profile, s.GPUType, r.Profile, r.GPUType)
			}
			holder[k] = q.Replica
			g := gpuKey{r.Node, sl.GPU}
			if gpuTiers[g] == nil {
				gpuTiers[g] = map[string]bool{}
			}
			gpuTiers[g][q.Tier] = true
			gpuProfiles[g] = append(gpuProfiles[g], s.Profile)
			given[g] = true
		}
	}
	for g := range given {
		if len(gpuTiers[g]) > 1 {
			t.Errorf("GPU %v got a replica while holding tiers %v", g, gpuTiers[g])
		}
		if ps := gpuProfiles[g]; slices.Contains(ps, "full") && len(ps) > 1 {
			t.Errorf("GPU %v: whole GPU shared: %v", g, ps)
		}
	}
}

// TestRandomFleets plans random requests on random fleets: Plan keeps every
// invariant and gives exactly what a brute-force scan of every slice gives.
func TestRandomFleets(t *testing.T) {
	t.Parallel()
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 1))
		nodes := randomFleet(rng)
		reqs := randomRequests(rng, 1+rng.IntN(40))
		got := Plan(nodes, reqs)
		checkInvariants(t, nodes, reqs, got)
		if want := referencePlan(nodes, reqs); !reflect.DeepEqual(got, want) {
			for i := range got {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("seed %d, request %+v:\ngot  %s\nwant %s", seed, reqs[i], describe(got[i]), describe(want[i]))
				}
			}
		}
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

func cloneNodes(nodes []Node) []Node {
	out := slices.Clone(nodes)
	for i := range out {
		out[i].Slices = slices.Clone(out[i].Slices)
	}
	return out
}

// TestDeterministic: the same fleet and requests give the same results, in
// whatever order nodes and slices come, from concurrent calls, and Plan
// leaves its arguments as they were.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 2))
		nodes := randomFleet(rng)
		reqs := randomRequests(rng, 30)
		nodesBefore, reqsBefore := cloneNodes(nodes), slices.Clone(reqs)
		want := Plan(nodes, reqs)

		var wg sync.WaitGroup
		results := make([][]Result, 8)
		for i := range results {
			wg.Go(func() { results[i] = Plan(nodes, reqs) })
		}
		wg.Wait()
		for i, got := range results {
			if !reflect.DeepEqual(got, want) {
				t.Errorf("seed %d: concurrent call %d differs", seed, i)
			}
		}
		if !reflect.DeepEqual(nodes, nodesBefore) || !reflect.DeepEqual(reqs, reqsBefore) {
			t.Errorf("seed %d: Plan changed its arguments", seed)
		}

		shuffled := cloneNodes(nodes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, n := range shuffled {
			rng.Shuffle(len(n.Slices), func(i, j int) { n.Slices[i], n.Slices[j] = n.Slices[j], n.Slices[i] })
		}
		if got := Plan(shuffled, reqs); !reflect.DeepEqual(got, want) {
			t.Errorf("seed %d: shuffled nodes and slices give other results", seed)
		}
	}
}

// benchFleet is 250 nodes of 8 GPUs, A100s and H100s: 175 in MIG mode (six
// GPUs as 7x1g.10gb, one as 3x2g.20gb+1g.10gb, one as 3g.40gb+4g.40gb) and
// 75 of whole GPUs, about 8,400 slices; and 3,000 replicas of 500 endpoints,
// mostly small, some medium, large, whole-GPU and 2-GPU tensor parallel, of
// three tiers, a tenth of them asking for a GPU type.
func benchFleet() ([]Node, []Request) {
	nodes := make([]Node, 250)
	for i := range nodes {
		typ := []string{a100, h100}[i%2]
		n := &nodes[i]
		n.Name = fmt.Sprintf("gpu-node-%03d", i)
		for g := range 8 {
			switch {
			case i >= 175:
				n.Slices = append(n.Slices, gpu(g, typ)...)
			case g < 6:
				n.Slices = append(n.Slices, gpu(g, typ, mig7x1g...)...)
			case g == 6:
				n.Slices = append(n.Slices, gpu(g, typ, mig3x2g1g...)...)
			default:
				n.Slices = append(n.Slices, gpu(g, typ, mig3g4g...)...)
			}
		}
	}
	var reqs []Request
	for e := range 500 {
		r := Request{Endpoint: fmt.Sprintf("endpoint-%03d", e), Tier: []string{"critical", "standard", "batch"}[e%3], GPUCount: 1}
		switch k := e % 20; {
		case k < 13:
			r.MemoryMB = 4096
		case k < 15:
			r.MemoryMB = 16384
		case k < 17:
			r.MemoryMB = 32768
		case k < 19:
			r.MemoryMB = 61440
		default:
			r.MemoryMB, r.GPUCount = 61440, 2
		}
		if e%10 == 3 {
			r.GPUType = h100
		}
		for i := range 6 {
			r.Replica = fmt.Sprintf("%s-%d", r.Endpoint, i)
			reqs = append(reqs, r)
		}
	}
	return nodes, reqs
}

func TestBenchFleet(t *testing.T) {
	t.Parallel()
	nodes, reqs := benchFleet()
	res := Plan(nodes, reqs)
	checkInvariants(t, nodes, reqs, res)
	placed := 0
	for _, r := range res {
		if r.Err == "" {
			placed++
		}
	}
	if placed < len(reqs)*9/10 {
		t.Errorf("placed %d of %d replicas", placed, len(reqs))
	}
}

// smallFleet is 2,000 GPUs all as 7x1g.10gb (14,000 slices) and 3,000
// small replicas that may take any of them: the widest scan per request.
func smallFleet() ([]Node, []Request) {
	nodes := make([]Node, 250)
	for i := range nodes {
		nodes[i].Name = fmt.Sprintf("gpu-node-%03d", i)
		for g := range 8 {
			nodes[i].Slices = append(nodes[i].Slices, gpu(g, []string{a100, h100}[i%2], mig7x1g...)...)
		}
	}
	reqs := times(3000, func(i int) Request {
		return rep(i, fmt.Sprintf("endpoint-%03d", i/6), []string{"critical", "standard", "batch"}[i/6%3], 4096)
	})
	return nodes, reqs
}

func BenchmarkPlan(b *testing.B) {
	for _, bb := range []struct {
		name  string
		fleet func() ([]Node, []Request)
	}{{"mixed", benchFleet}, {"small", smallFleet}} {
		b.Run(bb.name, func(b *testing.B) {
			nodes, reqs := bb.fleet()
			slicesN := 0
			for _, n := range nodes {
				slicesN += len(n.Slices)
			}
			var placed int
			for b.Loop() {
				placed = 0
				for _, r := range Plan(nodes, reqs) {
					if r.Err == "" {
						placed++
					}
				}
			}
			b.ReportMetric(float64(placed), "placed")
			b.ReportMetric(float64(slicesN), "slices")
		})
	}
}
