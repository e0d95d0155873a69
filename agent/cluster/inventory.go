package cluster

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"modelplane/agent"
	"modelplane/busapi"
)

// Resource names and node labels of the NVIDIA device plugin and GPU
// operator (feature discovery) the driver reads and requests.
const (
	ResourceGPU = corev1.ResourceName("nvidia.com/gpu")
	// ResourceMIGPrefix starts each MIG profile's resource under the
	// operator's mixed strategy, as in nvidia.com/mig-1g.10gb.
	ResourceMIGPrefix = "nvidia.com/mig-"
	LabelGPUProduct   = "nvidia.com/gpu.product"
	LabelGPUMemory    = "nvidia.com/gpu.memory"
	LabelGPUCount     = "nvidia.com/gpu.count"
	// LabelGPUPresent is set on every node with an NVIDIA GPU; CPU
	// replicas stay off such nodes.
	LabelGPUPresent = "nvidia.com/gpu.present"
)

// Kinds of pool: a cluster agent reports its cluster's GPUs or its CPU
// capacity, as a node agent is a GPU node or a CPU node (run two agents,
// two pools, for both).
const (
	KindGPU = "gpu"
	KindCPU = "cpu"
)

// Inventory is a cluster's capacity as a pool: what the agent reports in
// its heartbeats and what placement counts. GPUs lists every GPU the
// nodes' allocatable resources name, grouped by type; a MIG GPU's slices
// are the MIG resources of its node, packed into GPUs of seven compute
// slices. Which physical GPU holds a slice is the device plugin's and the
// scheduler's business: the driver requests a count of a profile, never a
// GPU index, so the slot numbers are the pool's own bookkeeping, kept for
// each GPU while its node stays (renumber) so that its replicas stay too.
type Inventory struct {
	GPUs     []busapi.GPU
	CPUCores int
	MemoryMB int
	// Products are the operator's product labels of each GPU type, for the
	// node affinity of that type's pods.
	Products map[string][]string
	// index is each GPU's index by its place in the cluster (gpuKey), so
	// that the next count keeps every GPU of a node that stays where it
	// was (renumber).
	index map[string]int
}

var productModel = regexp.MustCompile(`([A-Z]+[0-9]+[A-Z]*)`)

// GPUType is modelplane's name of a node's GPU ("A100-80GB") from the
// operator's product and memory labels; "" when it cannot tell.
func GPUType(labels map[string]string) string {
	prod := strings.ToUpper(labels[LabelGPUProduct])
	prod = strings.TrimPrefix(prod, "NVIDIA-")
	m := productModel.FindString(prod)
	if m == "" {
		return ""
	}
	if mib, err := strconv.Atoi(labels[LabelGPUMemory]); err == nil && mib > 0 {
		return fmt.Sprintf("%s-%dGB", m, (mib+1023)/1024)
	}
	if i := strings.LastIndex(prod, "-"); i >= 0 && strings.HasSuffix(prod, "GB") {
		return m + "-" + prod[i+1:]
	}
	return ""
}

// ReadInventory sums the schedulable nodes' allocatable resources into a
// pool of kind KindGPU or KindCPU. A node cordoned or not Ready is left
// out; the driver's watch of the nodes (Driver.PoolInventory) counts it
// again once it is back.
func ReadInventory(nodes []corev1.Node, kind string) (Inventory, error) {
	inv, bad := readInventory(nodes, kind, nil)
	if len(bad) > 0 {
		return Inventory{}, bad[0]
	}
	if kind == KindCPU && inv.CPUCores == 0 {
		return Inventory{}, fmt.Errorf("no schedulable CPU node (one without the %s label) in the cluster", LabelGPUPresent)
	}
	if kind == KindGPU && len(inv.GPUs) == 0 {
		return Inventory{}, fmt.Errorf("no schedulable node with allocatable %s or %s* in the cluster", ResourceGPU, ResourceMIGPrefix)
	}
	return inv, nil
}

// readInventory is ReadInventory's sum, which leaves out each node it
// cannot read (returned as bad) and may be empty: a pool whose last node
// was drained has no capacity until one comes back. The GPUs keep the
// indices prev (the last count's Inventory.index) gave them; nil numbers
// them in the order of their nodes' names.
func readInventory(nodes []corev1.Node, kind string, prev map[string]int) (inv Inventory, bad []error) {
	inv = Inventory{Products: map[string][]string{}}
	var gpuSpecs, migSpecs, keys []string
	gpuIndex := 0
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		alloc := n.Status.Allocatable
		if kind == KindCPU {
			if _, gpu := n.Labels[LabelGPUPresent]; gpu {
				continue
			}
			if q, ok := alloc[corev1.ResourceCPU]; ok {
				inv.CPUCores += int(q.MilliValue() / 1000)
			}
			if q, ok := alloc[corev1.ResourceMemory]; ok {
				inv.MemoryMB += int(q.Value() >> 20)
			}
			continue
		}
		typ := GPUType(n.Labels)
		full := count(alloc, ResourceGPU)
		mig := map[string]int{}
		for r, q := range alloc {
			if p, ok := strings.CutPrefix(string(r), ResourceMIGPrefix); ok && q.Value() > 0 {
				mig[p] = int(q.Value())
			}
		}
		if full == 0 && len(mig) == 0 {
			continue
		}
		if typ == "" {
			bad = append(bad, fmt.Errorf("node %s has GPUs but no GPU type: label it %s (and %s) as the GPU operator does", n.Name, LabelGPUProduct, LabelGPUMemory))
			continue
		}
		if p := n.Labels[LabelGPUProduct]; !slices.Contains(inv.Products[typ], p) {
			inv.Products[typ] = append(inv.Products[typ], p)
		}
		if full > 0 {
			gpuSpecs = append(gpuSpecs, fmt.Sprintf("%dx%s", full, typ))
			gpuIndex += full
			for i := range full {
				keys = append(keys, gpuKey(n.Name, "gpu", i))
			}
		}
		for i, layout := range packMIG(mig) {
			gpuSpecs = append(gpuSpecs, "1x"+typ)
			migSpecs = append(migSpecs, fmt.Sprintf("%d:%s", gpuIndex, layout))
			gpuIndex++
			keys = append(keys, gpuKey(n.Name, "mig", i))
		}
	}
	if kind == KindCPU || len(gpuSpecs) == 0 {
		return inv, bad
	}
	gpus, err := agent.ParseInventory(gpuSpecs, strings.Join(migSpecs, ","))
	if err != nil {
		return Inventory{Products: map[string][]string{}}, append(bad, fmt.Errorf("cluster inventory: %w", err))
	}
	inv.GPUs, inv.index = renumber(gpus, keys, prev)
	for _, ps := range inv.Products {
		slices.Sort(ps)
	}
	return inv, bad
}

// gpuKey names a GPU by its place in the cluster: its node, whether it is
// a whole GPU or a MIG GPU, and which of the node's.
func gpuKey(node, kind string, i int) string { return node + "/" + kind + "/" + strconv.Itoa(i) }

// renumber gives gpus (keys[i] naming gpus[i]) the indices 0..n-1 and
// returns them in that order with the indices by key. A GPU keeps its
// index in prev while the index is below n: a node added never moves
// another's GPUs (of any type), and a node removed moves only the GPUs
// at the top indices into its place, since indices have no holes. The
// rest take the free indices in order. The control plane keeps replicas
// on slots alike at the same index, so a GPU that keeps its index keeps
// its replicas.
func renumber(gpus []busapi.GPU, keys []string, prev map[string]int) ([]busapi.GPU, map[string]int) {
	n := len(gpus)
	at := make([]int, n)
	taken := make([]bool, n)
	for i, k := range keys {
		at[i] = -1
		if j, ok := prev[k]; ok && j < n && !taken[j] {
			at[i], taken[j] = j, true
		}
	}
	free := 0
	for i := range at {
		if at[i] >= 0 {
			continue
		}
		for taken[free] {
			free++
		}
		at[i], taken[free] = free, true
	}
	out := make([]busapi.GPU, n)
	index := make(map[string]int, n)
	for i, g := range gpus {
		g.Index = at[i]
		out[at[i]] = g
		index[keys[i]] = at[i]
	}
	return out, index
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func count(l corev1.ResourceList, r corev1.ResourceName) int {
	q, ok := l[r]
	if !ok {
		return 0
	}
	return int(q.Value())
}

// migCompute are the compute slices of the MIG profiles an 80 GB GPU
// offers, out of seven.
var migCompute = map[string]int{"1g.10gb": 1, "1g.20gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}

// packMIG packs a node's MIG slices, by profile and count, into GPU
// layouts ("3x1g.10gb+3g.40gb"), largest first into the first GPU with
// compute left: the node's true layout is whatever the operator's
// mig.config made, and only the counts matter to the pool.
func packMIG(mig map[string]int) []string {
	type gpu struct {
		free  int
		parts []string
	}
	profiles := make([]string, 0, len(mig))
	for p := range mig {
		profiles = append(profiles, p)
	}
	slices.SortFunc(profiles, func(a, b string) int {
		return cmp.Or(cmp.Compare(migCompute[b], migCompute[a]), cmp.Compare(a, b))
	})
	var gpus []*gpu
	for _, p := range profiles {
		c := max(migCompute[p], 1)
		for range mig[p] {
			var g *gpu
			for _, x := range gpus {
				if x.free >= c && memoryFits(x.parts, p) {
					g = x
					break
				}
			}
			if g == nil {
				g = &gpu{free: 7}
				gpus = append(gpus, g)
			}
			g.free -= c
			g.parts = append(g.parts, p)
		}
	}
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = strings.Join(g.parts, "+")
	}
	return out
}

// memoryFits reports whether profile p joins parts within an 80 GB GPU's
// eight memory slices.
func memoryFits(parts []string, p string) bool {
	mem := func(p string) int {
		_, gb, _ := strings.Cut(p, ".")
		n, _ := strconv.Atoi(strings.TrimSuffix(gb, "gb"))
		return n / 10
	}
	used := mem(p)
	for _, x := range parts {
		used += mem(x)
	}
	return used <= 8
}

// resourceOf is the extended resource a replica's slots are requested as.
func resourceOf(profile string) corev1.ResourceName {
	if p, ok := strings.CutPrefix(profile, busapi.MIGPrefix); ok {
		return corev1.ResourceName(ResourceMIGPrefix + p)
	}
	return ResourceGPU
}

func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

// loadIndex reads the GPUs' indices saveIndex kept; nil when there are
// none yet.
func loadIndex(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu indices: %w", err)
	}
	var index map[string]int
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("gpu indices %s: %w", path, err)
	}
	return index, nil
}

// saveIndex keeps the GPUs' indices in path, replaced whole.
func saveIndex(path string, index map[string]int) error {
	b, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
