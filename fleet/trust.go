package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
	"modelplane/db"
)

// The control plane believes an agent only about its own node (DESIGN.md
// section 18). NATS permissions let node N publish only on N's subject; the
// checks here hold even where they are missing: the node of a heartbeat is
// its subject's, and a replica's address must be on the address the
// platform registered for the node, not where the agent says.

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
func (f *Fleet) SetAddress(ctx context.Context, node string, a Address) error {
	if !nodeName.MatchString(node) {
		return fmt.Errorf("node name %q: use up to 64 letters, digits, '-' and '_'", node)
	}
	if a.Host == "" || strings.ContainsAny(a.Host, ":/ ") && net.ParseIP(a.Host) == nil {
		return fmt.Errorf("node %s: host %q is not a host name or IP address", node, a.Host)
	}
	if a.PortFirst == 0 && a.PortLast == 0 {
		a.PortFirst, a.PortLast = 1, 65535
	}
	if a.PortFirst < 1 || a.PortLast > 65535 || a.PortFirst > a.PortLast {
		return fmt.Errorf("node %s: port range %d-%d is not within 1-65535", node, a.PortFirst, a.PortLast)
	}
	err := db.New(f.pool).NodeAddressSet(ctx, db.NodeAddressSetParams{Node: node, Host: a.Host,
		PortFirst: int32(a.PortFirst), PortLast: int32(a.PortLast)})
	if err != nil {
		return fmt.Errorf("set address of node %s: %w", node, err)
	}
	return nil
}

// onNode reports whether addr (host:port, as a replica reports it) is on
// the registered address reg.
func onNode(reg db.NodeAddress, addr string) error {
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

func sameHost(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// subjectNode is the node a heartbeat subject names; ok is false for any
// subject but a node's status subject (a consumer delivering elsewhere
// keeps its own subject).
func subjectNode(subject string) (node string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "mp.node.")
	if !ok {
		return "", false
	}
	node, ok = strings.CutSuffix(rest, ".status")
	if !ok || busapi.NodeStatusSubject(node) != subject || !nodeName.MatchString(node) {
		return "", false
	}
	return node, true
}

// Reasons a heartbeat is dropped before it is recorded.
const (
	dropUndecodable = "undecodable"
	dropSubject     = "bad_subject"
	dropNodeClaim   = "node_mismatch"
)

// trustMetrics count what the control plane refused to believe.
type trustMetrics struct {
	heartbeatsDropped *prometheus.CounterVec
	replicasOffNode   prometheus.Counter
}

func newTrustMetrics() trustMetrics {
	m := trustMetrics{
		heartbeatsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelplane_fleet_heartbeats_dropped_total",
			Help: "Heartbeats dropped before they were recorded, by reason: undecodable, bad_subject (not a node's status subject), node_mismatch (the payload names another node than its subject).",
		}, []string{"reason"}),
		replicasOffNode: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelplane_fleet_replica_reports_off_node_total",
			Help: "Replica reports dropped because the replica's address is not on its node's registered address and port range.",
		}),
	}
	for _, r := range []string{dropUndecodable, dropSubject, dropNodeClaim} {
		m.heartbeatsDropped.WithLabelValues(r)
	}
	return m
}

// Register exports the fleet's counters and its cold-start histogram on reg.
func (f *Fleet) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{f.trust.heartbeatsDropped, f.trust.replicasOffNode, f.coldStart} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// dropHeartbeat counts and logs a heartbeat that is not recorded.
func (in *Intake) dropHeartbeat(reason, subject, detail string) {
	in.fleet.trust.heartbeatsDropped.WithLabelValues(reason).Inc()
	in.log.Warn("heartbeat dropped", slog.String("reason", reason), slog.String("subject", subject), slog.String("detail", detail))
}
