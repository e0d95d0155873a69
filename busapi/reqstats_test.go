package busapi_test

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
)

// testStats are windows as a gateway sends them: a predict endpoint's with
// its slowest and a failed request, a streaming LLM's with every histogram,
// a graph step's pinned series of a granted caller, and one with odd values.
func testStats() []busapi.ReqStats {
	hist := func(set map[int]uint64) []uint64 {
		h := make([]uint64, busapi.LatencyBuckets)
		for i, c := range set {
			h[i] = c
		}
		return h
	}
	return []busapi.ReqStats{
		{ID: "gw-1/fraud-scoring/v23/1765000000000", WindowStart: 1_765_000_000_000, WindowEnd: 1_765_000_005_000, Gateway: "gw-1",
			Endpoint: "fraud-scoring", Team: "risk", Version: "v23", Count: 310, Errors: busapi.ErrorCounts{Client: 2, Upstream: 1, Canceled: 3},
			Latency: hist(map[int]uint64{20: 200, 21: 100, 60: 10}), LatencySumMS: 1234.5, EndpointID: 7,
			Overhead: hist(map[int]uint64{0: 300, 3: 10}), OverheadSumMS: 33.25,
			Notable: []busapi.NotableRequest{
				{Kind: busapi.NotableSlowest, RequestID: "req-9", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Replica: "fraud-v23-1", Status: 200, EndMS: 1_765_000_004_321, LatencyMS: 95.5, UpstreamMS: 94.25},
				{Kind: busapi.NotableFailed, RequestID: "req-3", Status: 502, EndMS: 1_765_000_001_000, LatencyMS: 3},
			}},
		{ID: "gw-1/chat/v3/1765000000000", WindowStart: 1_765_000_000_000, WindowEnd: 1_765_000_005_000, Gateway: "gw-1",
			Endpoint: "chat", Team: "search", Version: "v3", Count: 4, Latency: hist(map[int]uint64{busapi.LatencyBuckets - 1: 4}), LatencySumMS: 400_000,
			Streams: 4, TTFT: hist(map[int]uint64{50: 4}), TTFTSumMS: 88, TPOT: hist(map[int]uint64{30: 3}), TPOTSumMS: 61.5, Tokens: 1200, EndpointID: 1 << 40},
		{ID: "gw-2/score/v1/1765000000000/p", WindowStart: 1_765_000_000_000, WindowEnd: 1_765_000_005_000, Gateway: "gw-2",
			Endpoint: "score", Team: "risk", Version: "v1", Count: 1, Latency: hist(map[int]uint64{0: 1}), Pinned: true,
			CallerTeam: "search", ViaGraph: "pipeline", ViaGraphVersion: "g2"},
		{ID: strings.Repeat("x", 300), WindowStart: -1, WindowEnd: math.MaxInt64, Endpoint: "ünïcödé", Version: "a\x00b",
			Count: math.MaxUint64, Latency: []uint64{math.MaxUint64}, LatencySumMS: math.Inf(1), TTFTSumMS: -0.5, EndpointID: math.MinInt64,
			Notable: []busapi.NotableRequest{{Status: -1, EndMS: math.MinInt64, UpstreamMS: math.MaxFloat64}}},
	}
}

// normalStats is s with every empty slice nil: the binary form does not
// tell an empty slice from a nil one, nor does anything that reads a window.
func normalStats(s []busapi.ReqStats) []busapi.ReqStats {
	out := make([]busapi.ReqStats, len(s))
	for i, x := range s {
		for _, h := range []*[]uint64{&x.Latency, &x.TTFT, &x.TPOT, &x.Overhead} {
			if len(*h) == 0 {
				*h = nil
			}
		}
		if len(x.Notable) == 0 {
			x.Notable = nil
		}
		out[i] = x
	}
	return out
}

// TestStatsBodyRoundTrip: a message holds the windows added, with the
// batch's id and gateway, decodes to them exactly, and is a small part of
// the same batch in JSON.
func TestStatsBodyRoundTrip(t *testing.T) {
	var b busapi.StatsBody
	want := testStats()
	for i := range want {
		if !b.Add(&want[i]) {
			t.Fatalf("window %d did not fit", i)
		}
	}
	data := b.Message("gw-1/1765000000000/0", "gw-1")
	if !busapi.IsBinaryReqStats(data) || busapi.IsBinaryUsage(data) || busapi.IsBinarySamples(data) {
		t.Fatal("the message is not told as a binary batch of statistics")
	}
	got, err := busapi.DecodeReqStats(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "gw-1/1765000000000/0" || got.Gateway != "gw-1" || !reflect.DeepEqual(normalStats(got.Stats), normalStats(want)) {
		t.Fatalf("decoded %+v\nwant %+v", got, want)
	}
	if b.Len() != 0 {
		t.Fatalf("Len %d after Message, want 0", b.Len())
	}
	plain := busapi.ReqStatsBatch{ID: got.ID, Gateway: got.Gateway, Stats: want[:3]} // JSON has no +Inf
	for i := range plain.Stats {
		b.Add(&plain.Stats[i])
	}
	bin := b.Message(plain.ID, plain.Gateway)
	if js, err := json.Marshal(plain); err != nil || 5*len(bin) > len(js) {
		t.Fatalf("%d bytes, JSON %d (%v): want a fifth or less", len(bin), len(js), err)
	}
	empty, err := busapi.DecodeReqStats(b.Message("b2", "gw-1"))
	if err != nil || empty.ID != "b2" || len(empty.Stats) != 0 {
		t.Fatalf("an empty batch decoded to %+v, %v", empty, err)
	}
}

// TestStatsBodyCarriesEveryField round-trips windows whose every field,
// nested ones too, is drawn at random: a field added to ReqStats,
// ErrorCounts or NotableRequest that the binary form does not carry fails
// it.
func TestStatsBodyCarriesEveryField(t *testing.T) {
	carriesEveryField(t, func(want busapi.ReqStats) (busapi.ReqStats, error) {
		var b busapi.StatsBody
		b.Add(&want)
		got, err := busapi.DecodeReqStats(b.Message("b", "g"))
		if err != nil || len(got.Stats) != 1 {
			return busapi.ReqStats{}, fmt.Errorf("%d windows decoded: %v", len(got.Stats), err)
		}
		return got.Stats[0], nil
	}, func(s busapi.ReqStats) busapi.ReqStats { return normalStats([]busapi.ReqStats{s})[0] })
}

// TestStatsBodyFull fills a body past BatchMaxBytes: the windows that fit
// make a message within it that decodes to them; the one refused leaves the
// body as it was, and the first always fits.
func TestStatsBodyFull(t *testing.T) {
	s := testStats()[0]
	s.Endpoint = strings.Repeat("e", 10_000)
	fillsToTheBound(t, &busapi.StatsBody{}, s, busapi.ReqStats{ID: strings.Repeat("r", busapi.BatchMaxBytes)},
		func(data []byte) (int, error) { b, err := busapi.DecodeReqStats(data); return len(b.Stats), err })
}

// TestDecodeReqStatsRefuses: each shorter prefix of a message, the message
// with a byte more, a histogram whose buckets the message's size cannot
// account for, a bucket past its histogram and JSON are errors, not a panic
// or a batch.
func TestDecodeReqStatsRefuses(t *testing.T) {
	data, _ := bodyMessage(&busapi.StatsBody{}, "b1", "gw-1", testStats())
	refusesEveryCut(t, data, `{"id":"b1","gateway":"gw-1","stats":[]}`, busapi.DecodeReqStats)
	// One window with empty strings, times and counts, whose latency
	// histogram is size then set buckets then (gap, count) pairs.
	window := func(latency ...byte) []byte {
		w := append([]byte("MPR1\x00\x00\x01"+strings.Repeat("\x00", 1+2+4+6)), latency...)
		w = append(w, make([]byte, 8+1+2*(2+8)+1+1+1+3)...) // sum, streams, TTFT, TPOT, tokens, flags, endpoint id, strings
		return append(w, make([]byte, 2+8+1)...)            // overhead, its sum, no notable
	}
	if got, err := busapi.DecodeReqStats(window(3, 1, 2, 7)); err != nil || !reflect.DeepEqual(got.Stats[0].Latency, []uint64{0, 0, 7}) {
		t.Fatalf("a histogram of 3 with bucket 2 set: %+v, %v", got, err)
	}
	for name, latency := range map[string][]byte{
		"a bucket past the histogram":       {3, 1, 3, 7},
		"more buckets set than it has":      {1, 2, 0, 1, 0, 1},
		"a million buckets in a few bytes":  {0xc0, 0x84, 0x3d, 0},
		"a gap that wraps round the uint64": {3, 2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1},
	} {
		if got, err := busapi.DecodeReqStats(window(latency...)); err == nil {
			t.Errorf("%s decoded to %+v", name, got)
		}
	}
}

// FuzzDecodeReqStats: no input panics, and what decodes encodes back to
// the same batch (fuzzRoundTrip).
func FuzzDecodeReqStats(f *testing.F) {
	fuzzRoundTrip(f, bodySeeds(&busapi.StatsBody{}, testStats(), "MPR1"), busapi.DecodeReqStats,
		func(b busapi.ReqStatsBatch) ([]byte, bool) {
			return bodyMessage(&busapi.StatsBody{}, b.ID, b.Gateway, b.Stats)
		})
}
