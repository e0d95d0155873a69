package placement

import "modelplane/busapi"

// RunsRuntime reports whether a node reporting runtimes can run the
// catalogue entry name: it said nothing (nil), said busapi.AnyRuntime, or listed
// it.
func RunsRuntime(runtimes []string, name string) bool {
	if runtimes == nil {
		return true
	}
	for _, r := range runtimes {
		if r == name || r == busapi.AnyRuntime {
			return true
		}
	}
	return false
}

// MIGShape is a MIG partition of an 80 GB GPU (A100-80GB, H100-80GB).
type MIGShape struct {
	// Profile is the allocation profile, as in "mig-1g.10gb".
	Profile string
	// Compute is the share of the GPU's compute, in sevenths.
	Compute int
	// MemorySlices is the share of the GPU's memory, in eighths.
	MemorySlices int
	MemoryMB     int
}

// MIGShapes are the MIG partitions the platform knows, smallest first.
func MIGShapes() []MIGShape {
	return []MIGShape{
		{"mig-1g.10gb", 1, 1, 10 * 1024},
		{"mig-2g.20gb", 2, 2, 20 * 1024},
		{"mig-3g.40gb", 3, 4, 40 * 1024},
		{"mig-4g.40gb", 4, 4, 40 * 1024},
		{"mig-7g.80gb", 7, 8, 80 * 1024},
	}
}

// MIG returns the shape of a MIG allocation profile ("mig-3g.40gb").
func MIG(profile string) (MIGShape, bool) {
	for _, m := range MIGShapes() {
		if m.Profile == profile {
			return m, true
		}
	}
	return MIGShape{}, false
}
