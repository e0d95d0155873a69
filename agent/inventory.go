package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"modelplane/busapi"
)

// MaxGPUs bounds the GPUs of one node; no machine has more, and the bound
// keeps a typo such as "800xA100-80GB" from building a huge inventory.
const MaxGPUs = 64

// A MIG-capable 80 GB GPU has 7 compute slices and 8 memory slices; every
// partition takes some of each. The budgets are those of NVIDIA's A100 and
// H100 80 GB profiles.
const (
	migComputeSlices = 7
	migMemorySlices  = 8
	// migGPUMemoryMB is the only GPU size the MIG profiles below describe.
	migGPUMemoryMB = 80 * 1024
)

// migProfile is one MIG partition shape of an 80 GB GPU.
type migProfile struct {
	name     string // as NVIDIA writes it: "1g.10gb"
	compute  int    // sevenths of the GPU's compute
	memory   int    // eighths of the GPU's memory
	memoryMB int
}

// lookupMIG returns the partition shape named p ("1g.10gb", any case, with
// or without the "mig-" prefix), from the contract's table.
func lookupMIG(p string) (migProfile, bool) {
	p = strings.TrimPrefix(strings.ToLower(p), busapi.MIGPrefix)
	m, ok := busapi.MIG(busapi.MIGPrefix + p)
	if !ok {
		return migProfile{}, false
	}
	return migProfile{p, m.Compute, m.MemorySlices, m.MemoryMB}, true
}

const migNames = "1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb or 7g.80gb"

// ParseInventory builds a node's GPUs from the agent's --gpus and --mig
// settings. Each gpus element is a comma-separated list of "[Nx]TYPE" items
// ("8xA100-80GB", "4xa100-80gb,4xH100-80GB"); GPUs are indexed in the order
// written and types are upper-cased. mig is a comma-separated list of
// "GPU:LAYOUT" items, LAYOUT being "+"-joined partitions, each optionally
// repeated with "Nx" ("0:7x1g.10gb,1:3g.40gb+4g.40gb"). A GPU without a
// layout is one "full" slice; a MIG GPU's slices are its partitions in the
// order written, profiles "mig-<name>". The error names the item at fault.
func ParseInventory(gpus []string, mig string) ([]busapi.GPU, error) {
	var out []busapi.GPU
	for _, spec := range gpus {
		for item := range strings.SplitSeq(spec, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			n, typ, err := parseGPUItem(item)
			if err != nil {
				return nil, fmt.Errorf("gpus %q: %w", item, err)
			}
			if len(out)+n > MaxGPUs {
				return nil, fmt.Errorf("gpus: more than %d GPUs on one node", MaxGPUs)
			}
			mem, _ := gpuMemoryMB(typ)
			for range n {
				out = append(out, busapi.GPU{
					Index:    len(out),
					Type:     typ,
					MemoryMB: mem,
					Slices:   []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}},
				})
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("gpus: at least one GPU is required, as in 8xA100-80GB")
	}
	seen := make(map[int]bool)
	for item := range strings.SplitSeq(mig, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		idx, slices, err := parseMIGItem(item)
		if err != nil {
			return nil, fmt.Errorf("mig %q: %w", item, err)
		}
		if idx >= len(out) {
			return nil, fmt.Errorf("mig %q: gpu %d does not exist, the node has gpus 0 to %d", item, idx, len(out)-1)
		}
		if seen[idx] {
			return nil, fmt.Errorf("mig %q: gpu %d has two layouts", item, idx)
		}
		seen[idx] = true
		if out[idx].MemoryMB != migGPUMemoryMB {
			return nil, fmt.Errorf("mig %q: gpu %d is a %s; the MIG profiles %s are those of 80 GB GPUs", item, idx, out[idx].Type, migNames)
		}
		out[idx].MIG = true
		out[idx].Slices = slices
	}
	return out, nil
}

// parseGPUItem reads "[Nx]TYPE".
func parseGPUItem(item string) (int, string, error) {
	n, rest, err := parseCount(item)
	if err != nil {
		return 0, "", err
	}
	if n < 1 || n > MaxGPUs {
		return 0, "", fmt.Errorf("count %d: want 1 to %d", n, MaxGPUs)
	}
	typ := strings.ToUpper(strings.TrimSpace(rest))
	if _, ok := gpuMemoryMB(typ); !ok {
		return 0, "", fmt.Errorf("gpu type %q: want a model and its memory, as in A100-80GB or H100-80GB", rest)
	}
	return n, typ, nil
}

// parseCount splits an optional "Nx" repeat prefix off s; without one the
// count is 1. "x" alone is not a prefix, so a name starting with a digit
// and an x would be misread; none of the GPU or MIG names does.
func parseCount(s string) (int, string, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || (s[i] != 'x' && s[i] != 'X') {
		return 1, s, nil
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || i > 4 {
		return 0, "", fmt.Errorf("count %q is not a small whole number", s[:i])
	}
	return n, s[i+1:], nil
}

// gpuMemoryMB reads the memory out of an upper-cased type "MODEL-<N>GB":
// the model is letters and digits starting with a letter, N is 1 to 1024.
func gpuMemoryMB(typ string) (int, bool) {
	model, size, ok := strings.Cut(typ, "-")
	if !ok || model == "" || !(model[0] >= 'A' && model[0] <= 'Z') {
		return 0, false
	}
	for _, c := range model {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return 0, false
		}
	}
	digits, ok := strings.CutSuffix(size, "GB")
	if !ok || digits == "" || len(digits) > 4 || digits[0] == '0' {
		return 0, false
	}
	gb, err := strconv.Atoi(digits)
	if err != nil || gb > 1024 {
		return 0, false
	}
	return gb * 1024, true
}

// parseMIGItem reads "GPU:LAYOUT" and checks the layout's budgets.
func parseMIGItem(item string) (int, []busapi.Slice, error) {
	gpu, layout, ok := strings.Cut(item, ":")
	if !ok {
		return 0, nil, errors.New("want GPU:LAYOUT, as in 0:7x1g.10gb")
	}
	idx, err := strconv.Atoi(strings.TrimSpace(gpu))
	if err != nil || idx < 0 || idx >= MaxGPUs {
		return 0, nil, fmt.Errorf("gpu index %q: want a whole number from 0", gpu)
	}
	var slices []busapi.Slice
	compute, memory := 0, 0
	for part := range strings.SplitSeq(layout, "+") {
		part = strings.TrimSpace(part)
		if part == "" {
			return 0, nil, errors.New("empty partition in the layout; join partitions with +, as in 3g.40gb+4g.40gb")
		}
		n, name, err := parseCount(part)
		if err != nil {
			return 0, nil, fmt.Errorf("partition %q: %w", part, err)
		}
		p, ok := lookupMIG(strings.TrimSpace(name))
		if !ok {
			return 0, nil, fmt.Errorf("partition %q: unknown MIG profile, want %s", part, migNames)
		}
		if n < 1 || n > migComputeSlices {
			return 0, nil, fmt.Errorf("partition %q: count %d, want 1 to %d", part, n, migComputeSlices)
		}
		for range n {
			compute += p.compute
			memory += p.memory
			slices = append(slices, busapi.Slice{Index: len(slices), Profile: busapi.MIGPrefix + p.name})
		}
		if compute > migComputeSlices {
			return 0, nil, fmt.Errorf("layout %q needs more than the %d compute slices of a GPU", layout, migComputeSlices)
		}
		if memory > migMemorySlices {
			return 0, nil, fmt.Errorf("layout %q needs more than the %d memory slices of a GPU", layout, migMemorySlices)
		}
	}
	return idx, slices, nil
}

// sliceMemoryMB is the memory of one allocatable unit: the whole GPU for
// "full", the partition's for a MIG profile.
func sliceMemoryMB(gpuMemoryMB int, profile string) int {
	if profile == busapi.ProfileFull {
		return gpuMemoryMB
	}
	if p, ok := lookupMIG(profile); ok {
		return p.memoryMB
	}
	return 0
}

// sliceComputeShare is the share of its GPU's compute one unit has, to
// weigh slice utilisation into the GPU's.
func sliceComputeShare(profile string) float64 {
	if profile == busapi.ProfileFull {
		return 1
	}
	if p, ok := lookupMIG(profile); ok {
		return float64(p.compute) / migComputeSlices
	}
	return 0
}

// ProfileMemoryMB is the memory of one slot of the given allocation
// profile on a GPU of the given type: the GPU's memory for "full", the
// partition's for "mig-…". ok is false for an unknown type or profile.
func ProfileMemoryMB(gpuType, profile string) (int, bool) {
	mem, ok := gpuMemoryMB(strings.ToUpper(gpuType))
	if !ok {
		return 0, false
	}
	if profile == busapi.ProfileFull {
		return mem, true
	}
	if !strings.HasPrefix(profile, busapi.MIGPrefix) || mem != migGPUMemoryMB {
		return 0, false
	}
	p, ok := lookupMIG(profile)
	return p.memoryMB, ok
}
