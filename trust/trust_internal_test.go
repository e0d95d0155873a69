package trust

import (
	"strings"
	"testing"

	"modelplane/db"
)

// TestSubjectNode: only a node's status subject names a node; a delivery a
// node's consumer redirected onto another subject keeps its stream subject
// ($KV.mp_desired.a) and names none.
func TestSubjectNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subject, node string
		ok            bool
	}{
		{"mp.node.gpu-node-01.status", "gpu-node-01", true},
		{"mp.node.a_b.status", "a_b", true},
		{"$KV.mp_desired.a", "", false},
		{"mp.node.a.b.status", "", false},
		{"mp.node..status", "", false},
		{"mp.node.a.status.x", "", false},
		{"mp.usage.a", "", false},
	} {
		node, ok := SubjectNode(tc.subject)
		if node != tc.node || ok != tc.ok {
			t.Errorf("SubjectNode(%q) = %q, %v; want %q, %v", tc.subject, node, ok, tc.node, tc.ok)
		}
	}
}

// TestOnNode: a replica address is on its node when the host is the
// registered one (IP addresses compared as addresses) and the port is in
// the node's range.
func TestOnNode(t *testing.T) {
	t.Parallel()
	v4 := nodeAddress("127.0.0.1", 31000, 31099)
	v6 := nodeAddress("::1", 1, 65535)
	name := nodeAddress("gpu-7.example.com", 1, 65535)
	pods := nodeAddress("10.244.0.0/16", 8000, 8000)
	for _, tc := range []struct {
		name string
		reg  func() (string, int32, int32)
		addr string
		ok   bool
	}{
		{"in range", v4, "127.0.0.1:31000", true},
		{"last port", v4, "127.0.0.1:31099", true},
		{"below range", v4, "127.0.0.1:30999", false},
		{"above range", v4, "127.0.0.1:31100", false},
		{"other host", v4, "10.0.0.1:31000", false},
		{"no port", v4, "127.0.0.1", false},
		{"ipv6 spelled differently", v6, "[0:0::1]:8000", true},
		{"host name any case", name, "GPU-7.example.com.:8000", true},
		{"other host name", name, "gpu-8.example.com:8000", false},
		{"pod of the pool's network", pods, "10.244.3.7:8000", true},
		{"pod outside the pool's network", pods, "10.245.0.1:8000", false},
		{"pod on another port", pods, "10.244.3.7:9000", false},
	} {
		host, first, last := tc.reg()
		err := OnNode(dbAddress(host, first, last), tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("%s: OnNode(%s) = %v, want ok %v", tc.name, tc.addr, err, tc.ok)
		}
	}
}

func nodeAddress(host string, first, last int32) func() (string, int32, int32) {
	return func() (string, int32, int32) { return host, first, last }
}

func dbAddress(host string, first, last int32) db.NodeAddress {
	return db.NodeAddress{Host: host, PortFirst: first, PortLast: last}
}

// TestValidServerName: a replica's server name is a lower-case DNS name a
// certificate can name, nothing else a gateway would pass to its TLS
// verification.
func TestValidServerName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"kubernetes.replicas.modelplane.internal", true},
		{"pool-1.replicas.example.com", true},
		{"localhost", true},
		{long + "." + long + "." + long + "." + long[:61], true},
		{long + "." + long + "." + long + "." + long[:62], false}, // 254 characters
		{long + "a.example.com", false},                           // a 64-character label
		{"", false},
		{"Pool.example.com", false},
		{"*.replicas.modelplane.internal", false},
		{"pool.example.com:443", false},
		{"10.0.0.7", false},
		{"::1", false},
		{"-pool.example.com", false},
		{"pool..example.com", false},
		{"pool.example.com.", false},
		{"pool example.com", false},
	} {
		if got := ValidServerName(tc.name); got != tc.ok {
			t.Errorf("ValidServerName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
