package placement_test

import (
	"slices"
	"testing"

	"modelplane/placement"
)

// mig returns one MIG A100 with 1g.10gb slices held as owners says
// (owner, endpoint, tier per slice; "" free).
func migGPU(gpu int, held ...[3]string) []placement.Slice {
	var out []placement.Slice
	for i := range 7 {
		s := placement.Slice{GPU: gpu, Index: i, GPUType: "A100-80GB", Profile: "mig-1g.10gb", MemoryMB: 10240}
		if i < len(held) {
			s.Owner, s.OwnerEndpoint, s.OwnerTier = held[i][0], held[i][1], held[i][2]
		}
		out = append(out, s)
	}
	return out
}

func TestPreempt(t *testing.T) {
	t.Parallel()
	crit := placement.Request{Replica: "new", Endpoint: "pay", Tier: "critical", MemoryMB: 4096, GPUCount: 1}
	yieldAll := placement.Yield{Group: map[string]string{"b1": "nightly", "b2": "nightly", "s1": "web"},
		Spare: map[string]int{"nightly": 2, "web": 1}}
	cases := []struct {
		name    string
		slices  []placement.Slice
		req     placement.Request
		y       placement.Yield
		victims []string // nil: no preemption
	}{
		{"a lower tier beyond its minimum gives way", migGPU(0, [3]string{"b1", "nightly", "batch"}), crit, yieldAll, []string{"b1"}},
		{"every holder of the GPU goes, so tiers never share it",
			migGPU(0, [3]string{"b1", "nightly", "batch"}, [3]string{"b2", "nightly", "batch"}), crit, yieldAll, []string{"b1", "b2"}},
		{"never below a minimum", migGPU(0, [3]string{"b1", "nightly", "batch"}, [3]string{"b2", "nightly", "batch"}), crit,
			placement.Yield{Group: yieldAll.Group, Spare: map[string]int{"nightly": 1}}, nil},
		{"a replica without spare never goes", migGPU(0, [3]string{"x", "other", "batch"}), crit, yieldAll, nil},
		{"same tier never preempts", migGPU(0, [3]string{"s1", "web", "standard"}),
			placement.Request{Replica: "new", Endpoint: "api", Tier: "standard", MemoryMB: 4096, GPUCount: 1}, yieldAll, nil},
		{"a lower tier never preempts a higher one", migGPU(0, [3]string{"s1", "web", "standard"}),
			placement.Request{Replica: "new", Endpoint: "job", Tier: "batch", MemoryMB: 4096, GPUCount: 1}, yieldAll, nil},
		{"the GPU with fewer victims wins",
			append(migGPU(0, [3]string{"b1", "nightly", "batch"}, [3]string{"b2", "nightly", "batch"}), migGPU(1, [3]string{"s1", "web", "standard"})...),
			crit, yieldAll, []string{"s1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nodes := []placement.Node{{Name: "n1", Slices: c.slices}}
			victims, res, ok := placement.Preempt(nodes, c.req, c.y)
			if c.victims == nil {
				if ok {
					t.Fatalf("Preempt = %v, want none", victims)
				}
				return
			}
			if !ok || !slices.Equal(victims, c.victims) {
				t.Fatalf("Preempt victims = %v (ok %v), want %v", victims, ok, c.victims)
			}
			if res.Err != "" || res.Node != "n1" || len(res.Slots) != 1 {
				t.Fatalf("result = %+v, want one slot on n1", res)
			}
			for _, s := range c.slices {
				if s.GPU == res.Slots[0].GPU && s.Owner != "" && !slices.Contains(victims, s.Owner) {
					t.Errorf("placed on GPU %d beside %s of tier %s", s.GPU, s.Owner, s.OwnerTier)
				}
			}
		})
	}
}
