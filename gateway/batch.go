package gateway

import (
	"encoding/json"

	"modelplane/busapi"
)

// batchHead is room for a batch message's fields before its items.
const batchHead = 512

// batchBody gathers encoded JSON values, the items of one batch message
// (busapi.PredictionBatch, busapi.ReqStatsBatch), up to
// busapi.BatchMaxBytes.
type batchBody struct {
	items []byte // comma separated
	n     int
}

// fits reports whether data can join the items without the message
// growing past busapi.BatchMaxBytes; the first item always fits.
func (b *batchBody) fits(data []byte) bool {
	return b.n == 0 || batchHead+len(b.items)+1+len(data) <= busapi.BatchMaxBytes
}

func (b *batchBody) add(data []byte) {
	if b.n > 0 {
		b.items = append(b.items, ',')
	}
	b.items, b.n = append(b.items, data...), b.n+1
}

// message returns the message of head, a batch whose last field is its
// nil slice of items, holding the items, and empties b.
func (b *batchBody) message(head any) []byte {
	h, _ := json.Marshal(head) // a batch of strings always encodes
	data := make([]byte, 0, len(h)+len(b.items)+8)
	data = append(data, h[:len(h)-len(`null}`)]...)
	data = append(append(append(data, '['), b.items...), "]}"...)
	b.items, b.n = b.items[:0], 0
	return data
}
