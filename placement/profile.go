package placement

import (
	"slices"

	"modelplane/busapi"
)

// Profile ranks, smallest first; the order is the size order MinProfile uses.
const (
	p1g = iota
	p2g
	p3g
	p4g
	p7g
	pFull
	numProfiles
)

var profileNames = [numProfiles]string{"mig-1g.10gb", "mig-2g.20gb", "mig-3g.40gb", "mig-4g.40gb", "mig-7g.80gb", busapi.ProfileFull}

var compute = [numProfiles]int{1, 2, 3, 4, 7, 7}

// Sizing bands, in MB of GPU memory.
const (
	band1g     = 10 * 1024
	band2g     = 20 * 1024
	band3g     = 40 * 1024
	maxSliceMB = 80 * 1024
)

// Candidate profiles per band, best first.
var (
	sized1g   = []int{p1g, p2g, p3g, p4g, p7g, pFull}
	sized2g   = []int{p2g, p3g, p4g, p7g, pFull}
	sized3g   = []int{p3g, p4g, p7g, pFull}
	sizedBig  = []int{pFull, p7g}
	sizedFull = []int{pFull}
)

// candidates returns the profiles a replica needing memoryMB on one GPU may
// get, best first, none smaller than least. memoryMB is at most maxSliceMB.
func candidates(memoryMB, least int) []int {
	var c []int
	switch {
	case memoryMB == 0:
		c = sizedFull
	case memoryMB <= band1g:
		c = sized1g
	case memoryMB <= band2g:
		c = sized2g
	case memoryMB <= band3g:
		c = sized3g
	default:
		c = sizedBig
	}
	if least == 0 {
		return c
	}
	var out []int
	for _, p := range c {
		if p >= least {
			out = append(out, p)
		}
	}
	return out
}

func profileRank(name string) (int, bool) {
	i := slices.Index(profileNames[:], name)
	return i, i >= 0
}

// Profiles returns the allocation profiles Plan gives out, smallest first:
// the MIG profiles, then "full" for a whole GPU. The order is the one
// Request.MinProfile is compared in.
func Profiles() []string {
	return slices.Clone(profileNames[:])
}

// Compute returns the share of a GPU's compute an allocation profile uses,
// in sevenths: 1 for mig-1g.10gb up to 7 for mig-7g.80gb and for a whole
// GPU; 0 for a profile Plan does not know.
func Compute(profile string) int {
	if p, ok := profileRank(profile); ok {
		return compute[p]
	}
	return 0
}
