package auth

import (
	"strings"
	"testing"
)

// FuzzSplitKey: only strings of the exact key shape yield a prefix, and the
// prefix is the key's own start; nothing panics.
func FuzzSplitKey(f *testing.F) {
	key, _, _ := NewKey()
	for _, s := range []string{"", "mpk_", key, key + "x", strings.Repeat("a", 60), "mpk_0123456789ab_" + strings.Repeat("A", 43)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix, ok := splitKey(s)
		if !ok {
			return
		}
		if len(s) != len(KeyPrefix)+lookupLen+1+43 || !strings.HasPrefix(s, prefix) || !strings.HasPrefix(prefix, KeyPrefix) {
			t.Fatalf("splitKey(%q) = %q, accepted a malformed key", s, prefix)
		}
	})
}

func TestNewKeyShape(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		key, prefix, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := splitKey(key)
		if !ok || got != prefix {
			t.Fatalf("splitKey(NewKey()) = %q, %v; want %q, true", got, ok, prefix)
		}
		if seen[key] {
			t.Fatal("NewKey repeated a key")
		}
		seen[key] = true
	}
}
