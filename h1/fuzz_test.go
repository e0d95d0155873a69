package h1

import (
	"bytes"
	"testing"
)

// FuzzParseHead holds parseHead to http.ReadRequest: whatever head it
// accepts, net/http's server accepts too and parses into the same request.
// Anything else parseHead must hand over.
func FuzzParseHead(f *testing.F) {
	for _, tc := range headCases {
		f.Add([]byte(tc.head))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !bytes.HasSuffix(b, headEnd) {
			return
		}
		got := parsedByH1(b)
		if got == nil {
			return
		}
		want, err := parsedByNetHTTP(b)
		if err != nil {
			t.Fatalf("parseHead accepts %q, http.ReadRequest: %v", b, err)
		}
		if !netHTTPServes(want) {
			t.Fatalf("parseHead accepts %q, which net/http's server refuses", b)
		}
		for _, d := range requestDiff(got, want) {
			t.Errorf("%q: %s", b, d)
		}
	})
}
