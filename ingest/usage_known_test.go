package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"modelplane/busapi"
)

// TestLedgerMemoryNeverMissesAStoredRow drives a run's memory with live
// seconds, late and replayed ones, repeats and slot churn past its bound,
// against a plain set of every slot-second noted: a row the set holds must
// always be looked up (the one-bill rule rests on it), and a live row, the
// next second of its slot, must never be, forgetting included.
func TestLedgerMemoryNeverMissesAStoredRow(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 7, 1 << 10} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			t.Parallel()
			const base = 1_000
			m := ledgerMemory{loaded: true, base: base, floor: map[string]int64{"n-0": base + 50}, top: map[slotID]int64{}, limit: limit}
			rng := rand.New(rand.NewPCG(1, uint64(limit)))
			all := map[slotSecond]bool{}
			// Rows stored before the run: at or below each node's floor.
			all[slotSecond{node: "n-0", replica: "r-0", ts: base + 50}] = true
			all[slotSecond{node: "n-1", replica: "r-3", ts: base - 20}] = true
			// An agent reports all its slots each second; replicas come
			// and go, so the slots change.
			next := map[string]int64{"n-0": base + 51, "n-1": base + 1, "n-2": base + 1}
			live, lookedUp := 0, 0
			for step := range 3_000 {
				node := fmt.Sprintf("n-%d", rng.IntN(3))
				var rows []slotSecond
				for g := range 4 {
					s := slotSecond{node: node, replica: fmt.Sprintf("%s-r%d-%d", node, g, (step/300+g)%5), gpu: uint16(g), ts: next[node]}
					rows = append(rows, s)
				}
				next[node]++
				late := rng.IntN(4) == 0
				if late {
					// A replay or a spooled second: any second of the node.
					for i := range rows {
						rows[i].ts = base - 100 + rng.Int64N(next[node]-base+100)
					}
				}
				// As the consumer does: decide every row of a store, then
				// note those it inserts.
				noted := map[slotSecond]rowID{}
				for _, s := range rows {
					r := busapi.Usage{Node: s.node, Replica: s.replica, GPU: int(s.gpu), Slice: int(s.slice), Time: s.ts}
					may := m.mayBeStored(&r)
					if all[s] && !may {
						t.Fatalf("step %d: %+v is stored but the memory says it is not", step, s)
					}
					if !late {
						live++
						if may {
							lookedUp++
						}
					}
					noted[s] = rowID{}
				}
				for s := range noted {
					all[s] = true
				}
				m.note(noted)
				if len(m.top) > limit {
					t.Fatalf("step %d: %d slots remembered, limit %d", step, len(m.top), limit)
				}
			}
			if lookedUp != 0 {
				t.Errorf("%d of %d live rows looked up; want none", lookedUp, live)
			}
		})
	}
}
