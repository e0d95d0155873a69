package cli

import (
	"crypto/rand"
	"encoding/hex"
)

// newIdempotencyKey is a random key for one logical request: its retries
// send the same key, so the API runs it once.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "mpcli-" + hex.EncodeToString(b)
}
