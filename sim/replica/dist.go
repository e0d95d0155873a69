package replica

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
)

// Every draw in this package comes from a PCG generator seeded with the
// replica seed and a 64-bit FNV-1a hash of the seed and the canonical bytes of
// what is being answered (an instance, a request), so a given replica seed
// and input always produce the same output, on any machine.

// hashBytes hashes the seed followed by each part, with a separator so that
// ("ab","c") and ("a","bc") differ.
func hashBytes(seed uint64, parts ...[]byte) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	_, _ = h.Write(b[:])
	for _, p := range parts {
		_, _ = h.Write(p)
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// newRand returns the deterministic generator for a hash.
func newRand(seed, h uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, h))
}
