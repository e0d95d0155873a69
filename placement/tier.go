package placement

import (
	"cmp"
	"slices"

	"modelplane/busapi"
)

// TierRank orders tiers by their claim on scarce GPUs: critical (0) before
// standard (1) before batch (2); an unknown tier ranks with standard.
func TierRank(tier string) int {
	switch tier {
	case "critical":
		return 0
	case "batch":
		return 2
	}
	return 1
}

// Sevenths is what an allocation holds of its GPU type, in sevenths of a
// GPU (a GPU equivalent is 7): a MIG slice its compute slices, a whole GPU
// 7, each slot counted.
func Sevenths(profile string, slots int) int {
	return Compute(profile) * slots
}

// Yield says which replicas may give way to a higher tier: Group maps a
// replica (a Slice's Owner) to its group (an endpoint version), and Spare
// says how many replicas of each group may still go, those beyond the
// group's minimum. A replica without a group never gives way.
type Yield struct {
	Group map[string]string
	Spare map[string]int
}

// Preempt finds the replicas of lower tiers whose removal lets r be placed:
// the holders of one GPU, every one of a tier below r's and of a group with
// spare replicas, so a group never goes below its minimum and the freed GPU,
// empty, takes r's tier alone (tiers still never share a GPU). Of the GPUs
// that would do, it takes the one with the fewest replicas to remove, then
// the least compute freed, then by node name and GPU index. It returns the
// replicas to remove and where r goes once they are gone; ok is false when
// no such GPU exists. Tensor-parallel requests (several GPUs) never
// preempt. Preempt changes neither nodes nor y.
func Preempt(nodes []Node, r Request, y Yield) (victims []string, res Result, ok bool) {
	if r.GPUCount > 1 || r.CPU() {
		return nil, Result{}, false
	}
	rank := TierRank(r.Tier)
	type cand struct {
		node    int
		gpu     int
		owners  []string
		compute int
	}
	var best *cand
	for ni := range nodes {
		nd := &nodes[ni]
		if r.Runtime != "" && !busapi.RunsRuntime(nd.Runtimes, r.Runtime) {
			continue // freeing a GPU there would not let r run
		}
		byGPU := map[int][]Slice{}
		for _, s := range nd.Slices {
			byGPU[s.GPU] = append(byGPU[s.GPU], s)
		}
	gpus:
		for gpu, ss := range byGPU {
			if r.GPUType != "" && ss[0].GPUType != r.GPUType {
				continue
			}
			var owners []string
			need := map[string]int{}
			comp := 0
			for _, s := range ss {
				if s.Owner == "" || slices.Contains(owners, s.Owner) {
					continue
				}
				g, known := y.Group[s.Owner]
				if !known || TierRank(s.OwnerTier) <= rank {
					continue gpus
				}
				need[g]++
				owners = append(owners, s.Owner)
				comp += Compute(s.Profile)
			}
			if len(owners) == 0 {
				continue
			}
			for g, n := range need {
				if y.Spare[g] < n {
					continue gpus
				}
			}
			c := cand{node: ni, gpu: gpu, owners: owners, compute: comp}
			if best != nil && cmp.Or(cmp.Compare(len(c.owners), len(best.owners)), cmp.Compare(c.compute, best.compute),
				cmp.Compare(nd.Name, nodes[best.node].Name), cmp.Compare(c.gpu, best.gpu)) >= 0 {
				continue
			}
			if _, placed := tryWithout(*nd, owners, r); !placed {
				continue
			}
			best = &c
		}
	}
	if best == nil {
		return nil, Result{}, false
	}
	res, _ = tryWithout(nodes[best.node], best.owners, r)
	slices.Sort(best.owners)
	return best.owners, res, true
}

// tryWithout plans r on node nd as if owners held nothing there.
func tryWithout(nd Node, owners []string, r Request) (Result, bool) {
	trial := Node{Name: nd.Name, Slices: slices.Clone(nd.Slices), Runtimes: nd.Runtimes}
	for k := range trial.Slices {
		if s := &trial.Slices[k]; slices.Contains(owners, s.Owner) {
			s.Owner, s.OwnerEndpoint, s.OwnerTier = "", "", ""
		}
	}
	res := Plan([]Node{trial}, []Request{r})[0]
	return res, res.Err == ""
}
