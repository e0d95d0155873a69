package egress_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"modelplane/egress"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	p := &egress.Policy{Hosts: []string{"artifacts.example.com", "idp.example.com"}}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://artifacts.example.com/m/v1.onnx", true},
		{"https://ARTIFACTS.example.com./m/v1.onnx", true},
		{"https://idp.example.com:8443/.well-known/openid-configuration", true},
		{"http://artifacts.example.com/m/v1.onnx", false},
		{"https://evil.example.com/m/v1.onnx", false},
		{"https://artifacts.example.com.evil.example/x", false},
		{"https://user:pw@artifacts.example.com/x", false},
		{"https://169.254.169.254/latest/meta-data/", false},
		{"file:///etc/passwd", false},
	} {
		err := p.CheckURL(tc.url)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, egress.ErrRefused)) {
			t.Errorf("CheckURL(%s) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
	if err := (*egress.Policy)(nil).CheckURL("https://artifacts.example.com/x"); err == nil {
		t.Errorf("a nil policy allowed a URL; it must allow none")
	}
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	p := &egress.Policy{}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"93.184.216.34", true},
		{"10.1.2.3", true}, // a private artifact mirror is the operator's to list
		{"127.0.0.1", false},
		{"::1", false},
		{"::ffff:127.0.0.1", false},
		{"169.254.169.254", false},
		{"fe80::1", false},
		{"fd00:ec2::254", false},
		{"0.0.0.0", false},
		{"224.0.0.1", false},
	} {
		if err := p.CheckAddr(netip.MustParseAddr(tc.addr)); tc.ok != (err == nil) {
			t.Errorf("CheckAddr(%s) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

// TestTransportChecksTheDialledAddress: a host name on the list that
// resolves to a loopback address (as a rebinding name would) is refused
// when dialled, before a byte is sent; the same server is reached when the
// policy allows loopback (dev).
func TestTransportChecksTheDialledAddress(t *testing.T) {
	t.Parallel()
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	url := "http://localhost:" + port + "/"

	refused := (&egress.Policy{Hosts: []string{"localhost"}}).Client(10 * time.Second)
	if _, err := refused.Get(url); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("GET of an allowed name resolving to loopback: err = %v, want ErrRefused", err)
	}
	if hit {
		t.Errorf("the loopback server was reached")
	}
	notListed := (&egress.Policy{AllowLoopback: true}).Client(10 * time.Second)
	if _, err := notListed.Get(url); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("GET of a host not on the list: err = %v, want ErrRefused", err)
	}
	dev := (&egress.Policy{Hosts: []string{"localhost"}, AllowLoopback: true}).Client(10 * time.Second)
	resp, err := dev.Get(url)
	if err != nil {
		t.Fatalf("GET with loopback allowed: %v", err)
	}
	resp.Body.Close()
	if !hit {
		t.Errorf("the server was not reached with loopback allowed")
	}
}
