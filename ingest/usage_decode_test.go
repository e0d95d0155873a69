package ingest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"modelplane/busapi"
)

// FuzzDecodeBatch holds the usage decoder to encoding/json: whatever the
// input it does not panic, what encoding/json accepts it decodes to the same
// batch, and checkBatch never panics on what it returns.
func FuzzDecodeBatch(f *testing.F) {
	seed, _ := json.Marshal(busapi.UsageBatch{ID: "gpu-node-07/1764500000/0", Node: "gpu-node-07", Records: []busapi.Usage{
		{Time: 1764500000, Node: "gpu-node-07", GPU: 1, Slice: 3, GPUType: "A100-80GB", Profile: "mig-1g.10gb", Team: "risk", Endpoint: "fraud",
			Model: "fraud-xgb", Version: "v3", Replica: "fraud-v3-1", UtilPct: 61.25, MemoryMB: 9000, Requests: 17},
		{Time: 1764500000, Node: "gpu-node-07", GPU: 2, GPUType: "A100-80GB", Profile: "full"},
	}})
	for _, s := range []string{
		string(seed),
		`{"id":"a","node":"n","records":[]}`,
		`{"id":"a","node":"n","records":null}`,
		` {"records":[{"t":1,"util_pct":1e2,"requests":-0}], "id":"x\u00e9","node":"ñ"} `,
		`{"ID":"a","Node":"n"}`,
		`{"id":"a","records":[{"t":1.5}]}`,
		`{"id":"a","records":[{"t":01}]}`,
		`{"id":"a","records":[{"gpu":99999999999999999999}]}`,
		`{"id":"a","records":[{"team":"\xff"}]}`,
		`{"id":"a","id":"b","records":[{"t":1}],"records":[{"t":2},{"t":3}]}`,
		`{"id":"a"} x`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, std busapi.UsageBatch
		fastErr := decodeBatch(data, &fast)
		if json.Unmarshal(data, &std) == nil {
			if fastErr != nil {
				t.Fatalf("decodeBatch refused what encoding/json accepts: %v", fastErr)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("decodeBatch = %+v\nencoding/json = %+v", fast, std)
			}
		}
		if fastErr == nil {
			_ = checkBatch(busapi.UsageSubject(fast.Node), &fast)
		}
	})
}

// BenchmarkDecodeBatch compares the decoder of JSON batches and of binary
// ones with encoding/json on a node's second (56 allocations).
func BenchmarkDecodeBatch(b *testing.B) {
	batch := busapi.UsageBatch{ID: "gpu-node-007/1764500000/0", Node: "gpu-node-007"}
	for i := range 56 {
		batch.Records = append(batch.Records, busapi.Usage{Time: 1764500000, Node: "gpu-node-007", GPU: i / 7, Slice: i % 7, GPUType: "A100-80GB",
			Profile: "mig-1g.10gb", Team: "team-3", Endpoint: "endpoint-17", Model: "model-17", Version: "v10", Replica: "endpoint-17-r1",
			UtilPct: 42.5, MemoryMB: 4096, Requests: 12})
	}
	data, _ := json.Marshal(batch)
	b.Run("decodeBatch", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v busapi.UsageBatch
			if err := decodeBatch(data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	bin := busapi.AppendUsageBatch(nil, &batch)
	b.Run("binary", func(b *testing.B) {
		b.SetBytes(int64(len(bin)))
		for b.Loop() {
			var v busapi.UsageBatch
			if err := decodeBatch(bin, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v busapi.UsageBatch
			if err := json.Unmarshal(data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeSample holds decodeJSON to encoding/json for prediction
// samples and their batches, as FuzzDecodeBatch does for usage: no panic,
// and what encoding/json accepts decodes to the same sample or batch.
func FuzzDecodeSample(f *testing.F) {
	sample, _ := json.Marshal(busapi.PredictionSample{ID: "req-1", Time: 1_800_000_000_007, Endpoint: "fraud", Team: "risk", Version: "v23",
		LatencyMS: 1.5, FeatureNames: []string{"amount", "country"},
		Instances: []busapi.SampleInstance{{Num: []float64{12.5, 0}, Str: []string{"", "DE"}, Score: 0.1, Label: "legit"}}})
	for _, s := range []string{
		string(sample),
		`{"ID":"a","Endpoint":"e","instances":[{"num":[1e400]}]}`,
		`{"id":"a","instances":[{"num":[1]}],"instances":null}`,
		`{"id":"\ud800","feature_names":["a","a"],"time":9223372036854775808}`,
		`{"id":"a","instances":[{"str":["\xff"]}]}`,
		`{"id":"a","tokens":-1,"latency_ms":"1"}`,
		`null`,
		`{"id":"a"} {}`,
	} {
		f.Add([]byte(s))
	}
	batch, _ := json.Marshal(busapi.PredictionBatch{ID: "b", Gateway: "gw-1", Samples: []busapi.PredictionSample{{ID: "req-1", Version: "v1"}}})
	for _, s := range []string{string(batch), `{"id":"b","samples":[]}`, `{"ID":"b","Samples":[{"ID":"a"}],"id":"c"}`, `{"samples":null,"id":"a"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, std busapi.PredictionSample
		fastErr := decodeJSON(data, &fast)
		if json.Unmarshal(data, &std) == nil {
			if fastErr != nil {
				t.Fatalf("decodeJSON refused a sample encoding/json accepts: %v", fastErr)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("decodeJSON = %+v\nencoding/json = %+v", fast, std)
			}
		}
		if fastErr == nil {
			_ = checkSample(&fast)
		}
		var fastB, stdB busapi.PredictionBatch
		fastErr = decodeJSON(data, &fastB)
		if json.Unmarshal(data, &stdB) == nil {
			if fastErr != nil {
				t.Fatalf("decodeJSON refused a batch encoding/json accepts: %v", fastErr)
			}
			if !reflect.DeepEqual(fastB, stdB) {
				t.Fatalf("decodeJSON = %+v\nencoding/json = %+v", fastB, stdB)
			}
		}
	})
}

// FuzzDecodeReqStats holds decodeExact to encoding/json for request
// statistics and their batches: no panic, the same error or none, and the
// same message.
// goccy/go-json alone decodes an "ID" key differently (it matches this
// struct's keys case-sensitively); the seeds hold such keys.
func FuzzDecodeReqStats(f *testing.F) {
	stats, _ := json.Marshal(busapi.ReqStats{ID: "gw-1/fraud/v23/1", WindowStart: 1_800_000_000_000, WindowEnd: 1_800_000_005_000, Gateway: "gw-1",
		Endpoint: "fraud", Team: "risk", Version: "v23", Count: 3, Errors: busapi.ErrorCounts{Client: 1},
		Latency: make([]uint64, busapi.LatencyBuckets), LatencySumMS: 12.5,
		Notable: []busapi.NotableRequest{{Kind: "slow", RequestID: "r1", Status: 200, LatencyMS: 900}}})
	for _, s := range []string{
		string(stats),
		`{"ID":"a","Window_Start":5,"ENDPOINT":"e","Errors":{"CLIENT":3},"Notable":[{"Kind":"k"}]}`,
		`{"id":"a","count":1,"count":2,"latency":[1],"latency":null}`,
		`{"id":"a","unknown":{"x":[1,2]},"count":1}`,
		`{"id":"\ud800","window_start":9223372036854775808}`,
		`{"id":"a","errors":{"client":-1},"pinned":"true"}`,
		`{"id":"a","notable":[{"status":1.5}]}`,
		`{"id":"\xff"}`,
		`null`,
		`{"id":"a"} {}`,
		`{"id":"a"}  `,
		`{"id":"b","gateway":"gw-1","stats":[` + string(stats) + `]}`,
		`{"id":"b","Stats":[{"ID":"a","Count":2}],"stats":null}`,
		`{"id":"b","stats":[{"id":"a","unknown":1}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, std busapi.ReqStats
		fastErr, stdErr := decodeExact(data, &fast), json.Unmarshal(data, &std)
		if (fastErr == nil) != (stdErr == nil) {
			t.Fatalf("decodeExact error %v, encoding/json error %v", fastErr, stdErr)
		}
		if fastErr == nil && !reflect.DeepEqual(fast, std) {
			t.Fatalf("decodeExact = %+v\nencoding/json = %+v", fast, std)
		}
		var fastB, stdB busapi.ReqStatsBatch
		fastErr, stdErr = decodeExact(data, &fastB), json.Unmarshal(data, &stdB)
		if (fastErr == nil) != (stdErr == nil) {
			t.Fatalf("decodeExact of a batch: error %v, encoding/json error %v", fastErr, stdErr)
		}
		if fastErr == nil && !reflect.DeepEqual(fastB, stdB) {
			t.Fatalf("decodeExact = %+v\nencoding/json = %+v", fastB, stdB)
		}
	})
}

// BenchmarkDecodeReqStats compares the request statistics decoder of JSON
// batches (decodeExact) with the binary one on a gateway's batch of 300
// windows, every other one a streaming endpoint's with all four
// histograms.
func BenchmarkDecodeReqStats(b *testing.B) {
	batch := busapi.ReqStatsBatch{ID: "gw-1/1800000000000/0", Gateway: "gw-1"}
	var body busapi.StatsBody
	hist := func(i int, c uint64) []uint64 {
		h := make([]uint64, busapi.LatencyBuckets)
		h[i%busapi.LatencyBuckets], h[(i+7)%busapi.LatencyBuckets] = c, c/2
		return h
	}
	for i := range 300 {
		s := busapi.ReqStats{ID: fmt.Sprintf("gw-1/endpoint-%d/v10/1800000000000", i), WindowStart: 1_800_000_000_000, WindowEnd: 1_800_000_005_000,
			Gateway: "gw-1", Endpoint: fmt.Sprintf("endpoint-%d", i), Team: "team-3", Version: "v10", Count: 150,
			Errors: busapi.ErrorCounts{Client: 1}, Latency: hist(i, 100), LatencySumMS: 1234.5, Overhead: hist(i/3, 100), OverheadSumMS: 12.5, EndpointID: int64(i)}
		if i%2 == 1 {
			s.Streams, s.Tokens, s.TTFT, s.TTFTSumMS, s.TPOT, s.TPOTSumMS = 150, 9000, hist(i+1, 100), 400, hist(i+2, 100), 30
		}
		batch.Stats = append(batch.Stats, s)
		body.Add(&batch.Stats[i])
	}
	data, _ := json.Marshal(batch)
	bin := body.Message(batch.ID, batch.Gateway)
	for _, c := range []struct {
		name string
		data []byte
	}{{"json", data}, {"binary", bin}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if _, err := decodeStats(busapi.ReqStatsBatchSubject, c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
