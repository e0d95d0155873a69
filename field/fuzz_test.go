package field

import (
	"testing"
	"unicode/utf8"
)

// nameRule is the rule Name documents, written without a regular expression:
// 1-63 lower-case ASCII letters, digits or '-', starting with a letter and not
// ending with '-'.
func nameRule(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return s[0] >= 'a' && s[0] <= 'z' && s[len(s)-1] != '-'
}

// FuzzName checks Name never panics and accepts exactly the documented rule,
// reporting at most one error, on the given field.
func FuzzName(f *testing.F) {
	for _, s := range []string{"a", "risk", "fraud-scorer", "", "-", "a-", "1a", "A", "a\n", "café", "a--b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var errs Errors
		Name(&errs, "name", s)
		got, want := len(errs) == 0, nameRule(s)
		if got != want {
			t.Fatalf("Name(%q) accepted = %v, want %v (utf8 %v)", s, got, want, utf8.ValidString(s))
		}
		if !got && (len(errs) != 1 || errs[0].Field != "name") {
			t.Fatalf("Name(%q) errors = %+v, want one error for field name", s, errs)
		}
	})
}
