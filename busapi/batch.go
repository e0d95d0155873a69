package busapi

import "encoding/json"

// batchHead is room for a batch message's fields before its items.
const batchHead = 512

// BatchBody gathers encoded JSON values, the items of one batch message
// (ReqStatsBatch; a PredictionBatch goes in binary, SampleBody), up to
// BatchMaxBytes: a gateway builds its messages with it, and `modelplane
// bench ingest` the messages it publishes as gateways would.
type BatchBody struct {
	items []byte // comma separated
	n     int
}

// Len is the number of items gathered.
func (b *BatchBody) Len() int { return b.n }

// Fits reports whether data can join the items without the message
// growing past BatchMaxBytes; the first item always fits.
func (b *BatchBody) Fits(data []byte) bool {
	return b.n == 0 || batchHead+len(b.items)+1+len(data) <= BatchMaxBytes
}

// Add appends data, one encoded item.
func (b *BatchBody) Add(data []byte) {
	if b.n > 0 {
		b.items = append(b.items, ',')
	}
	b.items, b.n = append(b.items, data...), b.n+1
}

// Message returns the message of head, a batch whose last field is its
// nil slice of items, holding the items, and empties b.
func (b *BatchBody) Message(head any) []byte {
	h, _ := json.Marshal(head) // a batch of strings always encodes
	data := make([]byte, 0, len(h)+len(b.items)+8)
	data = append(data, h[:len(h)-len(`null}`)]...)
	data = append(append(append(data, '['), b.items...), "]}"...)
	b.items, b.n = b.items[:0], 0
	return data
}
