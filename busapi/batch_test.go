package busapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"modelplane/busapi"
)

// TestBatchBody fills a batch past BatchMaxBytes: the items that fit make
// a message within it that decodes to them, the first item always fits,
// and Message empties the body.
func TestBatchBody(t *testing.T) {
	var b busapi.BatchBody
	item, _ := json.Marshal(busapi.PredictionSample{ID: "r", Version: strings.Repeat("v", 10_000)})
	n := 0
	for b.Fits(item) {
		b.Add(item)
		n++
	}
	data := b.Message(busapi.PredictionBatch{ID: "b1", Gateway: "gw-1"})
	var got busapi.PredictionBatch
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v: %.200s", err, data)
	}
	if len(data) > busapi.BatchMaxBytes || got.ID != "b1" || got.Gateway != "gw-1" || len(got.Samples) != n || n < 2 {
		t.Fatalf("a message of %d bytes with %d of %d samples, id %q gateway %q", len(data), len(got.Samples), n, got.ID, got.Gateway)
	}
	if b.Len() != 0 {
		t.Fatalf("Len %d after Message, want 0", b.Len())
	}
	big := make([]byte, busapi.BatchMaxBytes+1)
	if !b.Fits(big) {
		t.Fatal("the first item does not fit")
	}
}
