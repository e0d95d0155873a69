package busapi_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
)

// testUsage is a node's second as an agent sends it (two replicas, a GPU in
// MIG slices, a CPU replica's cores), and a record with odd values.
func testUsage() busapi.UsageBatch {
	rec := func(gpu, slice int, typ, profile, team, endpoint, model, version, replica string, util float64, mem, req int64) busapi.Usage {
		return busapi.Usage{Time: 1_765_000_000, Node: "gpu-node-07", GPU: gpu, Slice: slice, GPUType: typ, Profile: profile, Team: team,
			Endpoint: endpoint, Model: model, Version: version, Replica: replica, UtilPct: util, MemoryMB: mem, Requests: req}
	}
	b := busapi.UsageBatch{ID: "gpu-node-07/1765000000/0", Node: "gpu-node-07", Records: []busapi.Usage{
		rec(0, 0, "A100-80GB", "full", "search", "chat", "llama", "v3", "chat-v3-1", 87.5, 61_440, 12),
		rec(1, 0, "A100-80GB", "mig-3g.40gb", "risk", "fraud-scoring", "fraud-xgb", "v23", "fraud-v23-2", 40, 9000, 310),
		rec(1, 1, "A100-80GB", "mig-3g.40gb", "risk", "fraud-scoring", "fraud-xgb", "v23", "fraud-v23-2", 40, 9000, 0),
		rec(0, 3, "cpu", "cpu", "risk", "churn", "churn-lgbm", "v1", "churn-v1-1", 12.25, 0, 4),
	}}
	odd := rec(math.MaxUint16, 0, "", "ünïcödé", "a\x00b", strings.Repeat("e", 300), "", "", "r", -0.5, math.MaxInt64, math.MinInt64)
	odd.Time, odd.GPU = math.MinInt64, -1
	odd.UtilPct = math.Inf(1)
	b.Records = append(b.Records, odd)
	return b
}

// TestUsageBatchRoundTrip: a batch decodes to itself, and its strings take
// the table's bytes once however many records name them.
func TestUsageBatchRoundTrip(t *testing.T) {
	want := testUsage()
	data := busapi.AppendUsageBatch([]byte("x"), &want)[1:]
	if !busapi.IsBinaryUsage(data) || busapi.IsBinarySamples(data) {
		t.Fatal("the message is not told as a binary usage batch")
	}
	got, err := busapi.DecodeUsage(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v\nwant %+v", got, want)
	}
	if n := strings.Count(string(data), "fraud-scoring"); n != 1 {
		t.Fatalf("fraud-scoring written %d times, want once", n)
	}
	plain := busapi.UsageBatch{ID: want.ID, Node: want.Node, Records: want.Records[:4]} // JSON has no +Inf
	bin := busapi.AppendUsageBatch(nil, &plain)
	if js, err := json.Marshal(plain); err != nil || len(bin)*3 > len(js) {
		t.Fatalf("%d bytes, JSON %d (%v): want a third or less", len(bin), len(js), err)
	}
	empty, err := busapi.DecodeUsage(busapi.AppendUsageBatch(nil, &busapi.UsageBatch{ID: "b", Node: "n"}))
	if err != nil || !reflect.DeepEqual(empty, busapi.UsageBatch{ID: "b", Node: "n"}) {
		t.Fatalf("an empty batch decoded to %+v, %v", empty, err)
	}
}

// TestUsageBatchCarriesEveryField round-trips batches whose every field is
// drawn at random: a field added to Usage or UsageBatch that the binary form
// does not carry fails it.
func TestUsageBatchCarriesEveryField(t *testing.T) {
	carriesEveryField(t, func(want busapi.UsageBatch) (busapi.UsageBatch, error) {
		return busapi.DecodeUsage(busapi.AppendUsageBatch(nil, &want))
	}, func(b busapi.UsageBatch) busapi.UsageBatch {
		if len(b.Records) == 0 {
			b.Records = nil
		}
		return b
	})
}

// TestDecodeUsageRefusesEveryCut: each shorter prefix of a message, the
// message with a byte more, a record naming a string past the table and
// JSON are errors, not a panic or a batch.
func TestDecodeUsageRefusesEveryCut(t *testing.T) {
	b := testUsage()
	refusesEveryCut(t, busapi.AppendUsageBatch(nil, &b), `{"id":"b","node":"n","records":[]}`, busapi.DecodeUsage)
	// One string in the table, a record whose node is string 1.
	bad := []byte("MPU1\x01b\x01n\x01\x01n\x01\x02\x00\x00\x01" + strings.Repeat("\x00", 7+8+2))
	if _, err := busapi.DecodeUsage(bad); err == nil || !strings.Contains(err.Error(), "string 1 of a table of 1") {
		t.Fatalf("a record naming a string past the table: %v", err)
	}
	bad[15] = 0 // the node is string 0: the batch is whole
	if got, err := busapi.DecodeUsage(bad); err != nil || len(got.Records) != 1 || got.Records[0].Node != "n" {
		t.Fatalf("the mended batch decoded to %+v, %v", got, err)
	}
}

// FuzzDecodeUsage: no input panics, and what decodes encodes back to the
// same batch (fuzzRoundTrip).
func FuzzDecodeUsage(f *testing.F) {
	b := testUsage()
	fuzzRoundTrip(f, [][]byte{busapi.AppendUsageBatch(nil, &b), busapi.AppendUsageBatch(nil, &busapi.UsageBatch{ID: "b"}), []byte("MPU1\x00\x00\x05")},
		busapi.DecodeUsage, func(b busapi.UsageBatch) ([]byte, bool) { return busapi.AppendUsageBatch(nil, &b), true })
}
