package tlscert_test

import (
	"testing"

	"modelplane/internal/tlstest"
	"modelplane/tlscert"
)

func TestParseServiceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want tlscert.ServiceID
		ok   bool
	}{
		{"spiffe://example.org/team/risk/sa/scorer", tlscert.ServiceID{TrustDomain: "example.org", Team: "risk", Name: "scorer"}, true},
		{"spiffe://prod.mp-1/team/search/sa/batch-job", tlscert.ServiceID{TrustDomain: "prod.mp-1", Team: "search", Name: "batch-job"}, true},
		{"https://example.org/team/risk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://Example.org/team/risk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://example.org:8443/team/risk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://user@example.org/team/risk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://example.org/team/risk/sa/scorer?x=1", tlscert.ServiceID{}, false},
		{"spiffe://example.org/team/risk/sa/scorer/extra", tlscert.ServiceID{}, false},
		{"spiffe://example.org/ns/risk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://example.org/team//sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://example.org/team/../sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe://example.org/team/ri%2Fsk/sa/scorer", tlscert.ServiceID{}, false},
		{"spiffe:///team/risk/sa/scorer", tlscert.ServiceID{}, false},
	} {
		got, err := tlscert.ParseServiceID(tc.raw)
		if tc.ok && (err != nil || got != tc.want) || !tc.ok && err == nil {
			t.Errorf("ParseServiceID(%q) = %+v, %v; want %+v ok=%v", tc.raw, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.raw {
			t.Errorf("String() = %q, want %q", got.String(), tc.raw)
		}
	}
}

func TestServiceOfNeedsExactlyOneSPIFFEURI(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	if _, err := tlscert.ServiceOf(ca.Client(t).Cert); err != tlscert.ErrNoServiceID {
		t.Fatalf("no URI: %v, want ErrNoServiceID", err)
	}
	if _, err := tlscert.ServiceOf(ca.Client(t, "spiffe://a/team/x/sa/y", "spiffe://a/team/z/sa/y").Cert); err == nil {
		t.Fatal("two SPIFFE URIs accepted")
	}
	got, err := tlscert.ServiceOf(ca.Client(t, "https://example.org/other", "spiffe://a/team/x/sa/y").Cert)
	if err != nil || got != (tlscert.ServiceID{TrustDomain: "a", Team: "x", Name: "y"}) {
		t.Fatalf("ServiceOf = %+v, %v", got, err)
	}
}
