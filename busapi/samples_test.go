package busapi_test

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
)

// testSamples are a predict sample (numeric and string features, two
// instances, pinned), an LLM completion's and one with odd values: what a
// gateway's sampler sends.
func testSamples() []busapi.PredictionSample {
	return []busapi.PredictionSample{
		{ID: "req-1", Time: 1_765_000_000_123, Endpoint: "fraud-scoring", Team: "risk", Version: "v23", LatencyMS: 3.25,
			FeatureNames: []string{"amount", "country", "is_new"}, Pinned: true, EndpointID: 7,
			Instances: []busapi.SampleInstance{
				{Num: []float64{120.5, 0, 1}, Str: []string{"", "DE", ""}, Score: 0.93, Label: "fraud"},
				{Num: []float64{-3e-9, 0, 0}, Str: []string{"", "ünïcödé", ""}, Score: 0.01, Label: "legit"},
			}},
		{ID: "chat-9", Time: 1_765_000_000_999, Endpoint: "chat", Team: "search", Version: "v3", LatencyMS: 1840.5, Tokens: 312, EndpointID: 1 << 40},
		{ID: strings.Repeat("x", 300), Time: -1, Endpoint: "e", Team: "", Version: "v", LatencyMS: math.MaxFloat64, Tokens: -2,
			FeatureNames: []string{""}, Instances: []busapi.SampleInstance{{Num: []float64{math.Inf(-1)}, Str: []string{"a\x00b"}}}},
	}
}

// normal is s with every empty slice nil: the binary form does not tell an
// empty slice from a nil one, nor does anything that reads a sample.
func normal(s []busapi.PredictionSample) []busapi.PredictionSample {
	out := make([]busapi.PredictionSample, len(s))
	for i, x := range s {
		if len(x.FeatureNames) == 0 {
			x.FeatureNames = nil
		}
		if len(x.Instances) == 0 {
			x.Instances = nil
		}
		ins := make([]busapi.SampleInstance, len(x.Instances))
		for k, in := range x.Instances {
			if len(in.Num) == 0 {
				in.Num = nil
			}
			if len(in.Str) == 0 {
				in.Str = nil
			}
			ins[k] = in
		}
		if x.Instances != nil {
			x.Instances = ins
		}
		out[i] = x
	}
	return out
}

// TestSampleBodyRoundTrip: a message holds the samples added, with the
// batch's id and gateway, and decodes to them exactly.
func TestSampleBodyRoundTrip(t *testing.T) {
	var b busapi.SampleBody
	want := testSamples()
	for i := range want {
		if !b.Add(&want[i]) {
			t.Fatalf("sample %d did not fit", i)
		}
	}
	data := b.Message("b1", "gw-1")
	if !busapi.IsBinarySamples(data) {
		t.Fatal("the message is not a binary batch")
	}
	got, err := busapi.DecodeSamples(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "b1" || got.Gateway != "gw-1" || !reflect.DeepEqual(normal(got.Samples), normal(want)) {
		t.Fatalf("decoded %+v, want id b1, gateway gw-1 and %+v", got, want)
	}
	if b.Len() != 0 {
		t.Fatalf("Len %d after Message, want 0", b.Len())
	}
	empty, err := busapi.DecodeSamples(b.Message("b2", "gw-1"))
	if err != nil || empty.ID != "b2" || len(empty.Samples) != 0 {
		t.Fatalf("an empty batch decoded to %+v, %v", empty, err)
	}
}

// TestSampleBodyCarriesEveryField round-trips samples whose every field,
// nested ones too, is drawn at random: a field added to PredictionSample or
// SampleInstance that the binary form does not carry fails it.
func TestSampleBodyCarriesEveryField(t *testing.T) {
	carriesEveryField(t, func(want busapi.PredictionSample) (busapi.PredictionSample, error) {
		var b busapi.SampleBody
		b.Add(&want)
		got, err := busapi.DecodeSamples(b.Message("b", "g"))
		if err != nil || len(got.Samples) != 1 {
			return busapi.PredictionSample{}, fmt.Errorf("%d samples decoded: %v", len(got.Samples), err)
		}
		return got.Samples[0], nil
	}, func(s busapi.PredictionSample) busapi.PredictionSample {
		return normal([]busapi.PredictionSample{s})[0]
	})
}

// TestSampleBodyFull fills a body past BatchMaxBytes: the samples that fit
// make a message within it that decodes to them; the one refused leaves
// the body as it was, and the first always fits.
func TestSampleBodyFull(t *testing.T) {
	fillsToTheBound(t, &busapi.SampleBody{}, busapi.PredictionSample{ID: "r", Endpoint: "e", Version: strings.Repeat("v", 10_000)},
		busapi.PredictionSample{ID: strings.Repeat("r", busapi.BatchMaxBytes)},
		func(data []byte) (int, error) { b, err := busapi.DecodeSamples(data); return len(b.Samples), err })
}

// TestDecodeSamplesRefusesEveryCut: each shorter prefix of a message, and
// the message with a byte more, is an error, not a panic or a batch.
func TestDecodeSamplesRefusesEveryCut(t *testing.T) {
	data, _ := bodyMessage(&busapi.SampleBody{}, "b1", "gw-1", testSamples())
	refusesEveryCut(t, data, `{"id":"b1","samples":[]}`, busapi.DecodeSamples)
}

// FuzzDecodeSamples: no input panics, and what decodes encodes back to the
// same batch (fuzzRoundTrip).
func FuzzDecodeSamples(f *testing.F) {
	fuzzRoundTrip(f, bodySeeds(&busapi.SampleBody{}, testSamples(), "MPS1"), busapi.DecodeSamples,
		func(b busapi.PredictionBatch) ([]byte, bool) {
			return bodyMessage(&busapi.SampleBody{}, b.ID, b.Gateway, b.Samples)
		})
}
