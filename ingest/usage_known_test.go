package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"modelplane/busapi"
)

// TestLedgerMemoryNeverMissesAStoredRow drives a run's memory with live
// seconds, late and replayed ones, repeats within a set, redeliveries and
// slot churn past its bound, against a plain set of every slot-second
// seen: a row the set holds, or that an earlier row of its set names, must
// always be looked up (the one-bill rule rests on it), and a live row, the
// next second of its slot, must never be, forgetting included.
func TestLedgerMemoryNeverMissesAStoredRow(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 7, 1 << 10} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			t.Parallel()
			const base = 1_000
			m := ledgerMemory{loaded: true, base: base, limit: limit, nodes: map[string]*nodeMemory{
				"n-0": {floor: base + 50, top: map[replicaSlot]*int64{}},
			}}
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
				h := &heldBatch{batch: busapi.UsageBatch{Node: node}, redelivered: rng.IntN(10) == 0}
				for g := range 4 {
					h.batch.Records = append(h.batch.Records, busapi.Usage{
						Node: node, Replica: fmt.Sprintf("%s-r%d-%d", node, g, (step/300+g)%5), GPU: g, Time: next[node],
					})
				}
				next[node]++
				late := rng.IntN(4) == 0
				if late {
					// A replay or a spooled second: any second of the node.
					for i := range h.batch.Records {
						h.batch.Records[i].Time = base - 100 + rng.Int64N(next[node]-base+100)
					}
				}
				repeat := rng.IntN(8) == 0
				if repeat {
					// A second billed twice within one set.
					h.batch.Records = append(h.batch.Records, h.batch.Records[rng.IntN(4)])
				}
				// As the consumer does: every row of a set classified at
				// once, the set split into two batches of one node.
				split := rng.IntN(len(h.batch.Records) + 1)
				second := &heldBatch{batch: busapi.UsageBatch{Node: node, Records: h.batch.Records[split:]}, redelivered: h.redelivered}
				first := &heldBatch{batch: busapi.UsageBatch{Node: node, Records: h.batch.Records[:split]}, redelivered: h.redelivered}
				secs, n := m.classify([]*heldBatch{first, second})
				got := map[int64]int{}
				for _, ts := range secs[node] {
					got[ts]++
				}
				if len(secs[node]) != n || len(secs) > 1 {
					t.Fatalf("step %d: %d seconds looked up in %v, n %d", step, len(secs[node]), secs, n)
				}
				// Every row that must be looked up is among the seconds.
				must, seen := map[int64]int{}, map[slotSecond]bool{}
				for i := range h.batch.Records {
					s := slotOf(&h.batch.Records[i])
					if all[s] || seen[s] || h.redelivered {
						must[s.ts]++
					}
					seen[s] = true
				}
				for ts, k := range must {
					if got[ts] < k {
						t.Fatalf("step %d: %d rows of second %d are stored or repeated, %d looked up", step, k, ts, got[ts])
					}
				}
				if h.redelivered && n != len(h.batch.Records) {
					t.Fatalf("step %d: %d of a redelivered message's %d rows looked up", step, n, len(h.batch.Records))
				}
				if !late && !repeat && !h.redelivered {
					live += len(h.batch.Records)
					lookedUp += n
				}
				for s := range seen {
					all[s] = true
				}
				held := 0
				for _, nm := range m.nodes {
					held += len(nm.top)
				}
				if held != m.slots || m.slots > limit {
					t.Fatalf("step %d: %d slots remembered, %d counted, limit %d", step, held, m.slots, limit)
				}
			}
			if lookedUp != 0 {
				t.Errorf("%d of %d live rows looked up; want none", lookedUp, live)
			}
		})
	}
}
