package trust

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
	"modelplane/db"
)

// ErrOffNode means a replica was reported at an address that is not its
// node's; the replica's report is dropped and counted.
var ErrOffNode = errors.New("replica address is off its node")

// Address is where a node may serve replicas: its host, and the ports its
// replicas may listen on (inclusive). Nodes that share a host, as the
// simulated nodes of `modelplane dev` share 127.0.0.1, get ranges that do
// not overlap, so one cannot claim another's replica port.
type Address struct {
	Host      string
	PortFirst int
	PortLast  int
}

// SetAddress registers node's address. It is the platform's record, set at
// enrollment (or by dev for its nodes), never from a heartbeat; a node
// without one is believed about its replicas' addresses, as before
// enrollment existed (docs/security.md).
func SetAddress(ctx context.Context, q *db.Queries, node string, a Address) error {
	if !ValidNodeName(node) {
		return fmt.Errorf("node name %q: use up to 64 letters, digits, '-' and '_'", node)
	}
	if !ValidHost(a.Host) {
		return fmt.Errorf("node %s: host %q is not a host name or IP address", node, a.Host)
	}
	if a.PortFirst == 0 && a.PortLast == 0 {
		a.PortFirst, a.PortLast = 1, 65535
	}
	if a.PortFirst < 1 || a.PortLast > 65535 || a.PortFirst > a.PortLast {
		return fmt.Errorf("node %s: port range %d-%d is not within 1-65535", node, a.PortFirst, a.PortLast)
	}
	err := q.NodeAddressSet(ctx, db.NodeAddressSetParams{Node: node, Host: a.Host,
		PortFirst: int32(a.PortFirst), PortLast: int32(a.PortLast)})
	if err != nil {
		return fmt.Errorf("set address of node %s: %w", node, err)
	}
	return nil
}

// OnNode returns nil when addr (host:port, as a replica reports it) is on
// the registered address reg, else an error wrapping ErrOffNode.
func OnNode(reg db.NodeAddress, addr string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q is not host:port", ErrOffNode, addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("%w: %q has no port number", ErrOffNode, addr)
	}
	if !sameHost(host, reg.Host) {
		return fmt.Errorf("%w: %s is not on %s", ErrOffNode, addr, reg.Host)
	}
	if port < int(reg.PortFirst) || port > int(reg.PortLast) {
		return fmt.Errorf("%w: port %d of %s is outside the node's ports %d-%d", ErrOffNode, port, addr, reg.PortFirst, reg.PortLast)
	}
	return nil
}

// ValidHost reports whether h may be a node's registered host: a host
// name, an IP address, or, for a cluster agent's pool, the pod network's
// CIDR prefix (replicas are pods, at any IP in it).
func ValidHost(h string) bool {
	if h == "" || strings.Contains(h, " ") {
		return false
	}
	if strings.Contains(h, "/") {
		_, err := netip.ParsePrefix(h)
		return err == nil
	}
	return !strings.Contains(h, ":") || net.ParseIP(h) != nil
}

func sameHost(a, b string) bool {
	if p, err := netip.ParsePrefix(b); err == nil {
		ip, err := netip.ParseAddr(a)
		return err == nil && p.Contains(ip.Unmap())
	}
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// SubjectNode is the node a heartbeat subject names; ok is false for any
// subject but a node's status subject (a consumer delivering elsewhere
// keeps its own subject).
func SubjectNode(subject string) (node string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "mp.node.")
	if !ok {
		return "", false
	}
	node, ok = strings.CutSuffix(rest, ".status")
	if !ok || busapi.NodeStatusSubject(node) != subject || !ValidNodeName(node) {
		return "", false
	}
	return node, true
}

// Reasons a heartbeat is dropped before it is recorded, the reason label
// of Metrics.HeartbeatsDropped.
const (
	DropUndecodable = "undecodable"
	DropSubject     = "bad_subject"
	DropNodeClaim   = "node_mismatch"
	// DropOverAttestation: the heartbeat claims more GPUs, another MIG
	// layout, or more cores or memory than its node's attested inventory
	// (or the node has none where attestation is required).
	DropOverAttestation = "over_attestation"
)

// Metrics count what the control plane refused to believe.
type Metrics struct {
	// HeartbeatsDropped counts heartbeats dropped before they were
	// recorded, by reason (Drop*).
	HeartbeatsDropped *prometheus.CounterVec
	// ReplicasOffNode counts replica reports dropped for an address off
	// their node (OnNode).
	ReplicasOffNode prometheus.Counter
}

// NewMetrics returns the counters, every reason at zero.
func NewMetrics() Metrics {
	m := Metrics{
		HeartbeatsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelplane_fleet_heartbeats_dropped_total",
			Help: "Heartbeats dropped before they were recorded, by reason: undecodable, bad_subject (not a node's status subject), node_mismatch (the payload names another node than its subject), over_attestation (more than the node's attested inventory).",
		}, []string{"reason"}),
		ReplicasOffNode: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelplane_fleet_replica_reports_off_node_total",
			Help: "Replica reports dropped because the replica's address is not on its node's registered address and port range.",
		}),
	}
	for _, r := range []string{DropUndecodable, DropSubject, DropNodeClaim, DropOverAttestation} {
		m.HeartbeatsDropped.WithLabelValues(r)
	}
	return m
}

// Collectors are the counters, for a prometheus.Registerer.
func (m Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.HeartbeatsDropped, m.ReplicasOffNode}
}

// nodeName is what a node may be called (the agent checks the same): it is
// a NATS subject token and a KV key, so no dots, wildcards or spaces.
var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidNodeName reports whether name may name a node.
func ValidNodeName(name string) bool { return nodeName.MatchString(name) }

// serverNameLabel is one label of a DNS name, as RFC 1123 allows it.
var serverNameLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidServerName reports whether name may be the name a replica's
// certificate names (busapi.ReplicaStatus.ServerName): a lower-case DNS
// name of at most 253 characters. A gateway verifies the certificate
// against it, so it is never more than a name: no port, no IP address, no
// wildcard.
func ValidServerName(name string) bool {
	if name == "" || len(name) > 253 || net.ParseIP(name) != nil {
		return false
	}
	for _, l := range strings.Split(name, ".") {
		if !serverNameLabel.MatchString(l) {
			return false
		}
	}
	return true
}
