package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Labels and annotations on every object the driver writes. ManagedBy and
// Pool select what one cluster agent made: list them with
// `kubectl get all,cm,secret,netpol,quota -A -l modelplane.io/pool=POOL`.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "modelplane"
	LabelPool      = "modelplane.io/pool"
	LabelTeam      = "modelplane.io/team"
	LabelEndpoint  = "modelplane.io/endpoint"
	LabelVersion   = "modelplane.io/version"
	LabelReplica   = "modelplane.io/replica"
	// LabelComponent marks modelplane's own pods (the chart's label): the
	// NetworkPolicy of a version admits pods labelled gateway (and the
	// cluster agent, which reads the runtimes' metrics) and nothing else.
	LabelComponent = "app.kubernetes.io/component"
	// AnnotationReplica is the replica's id as the control plane wrote it
	// (a label value may have been shortened); AnnotationSpec the hash of
	// the spec the pod was made for.
	AnnotationReplica = "modelplane.io/replica-id"
	AnnotationSpec    = "modelplane.io/spec-hash"
)

// dnsLabel is s as an RFC 1123 label of at most n characters: lower case
// letters, digits and '-', starting and ending with a letter or digit. A
// name that had to change keeps a hash of the original, so two names that
// differ never meet in one.
func dnsLabel(s string, n int) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == s && len(out) <= n && out != "" {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:8]
	if len(out) > n-9 {
		out = strings.TrimRight(out[:n-9], "-")
	}
	if out == "" {
		return "x" + h
	}
	return out + "-" + h
}

// labelValue is s as a label value (63 characters of letters, digits,
// '-', '_' and '.', starting and ending alphanumeric), hashed as dnsLabel
// when it had to change.
func labelValue(s string) string {
	ok := len(s) <= 63 && s != ""
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			ok = false
		}
	}
	if ok {
		return s
	}
	return dnsLabel(s, 63)
}

// Namespace is the namespace of a team's replicas: prefix and the team.
func Namespace(prefix, team string) string { return dnsLabel(prefix+team, 63) }

// versionName names a pool's NetworkPolicy of a version, the owner of the
// pool's pods of it, in the team's namespace. Pools share a team's
// namespace under the same prefix, so the name is the pool's: one pool
// removing its last replica of a version must not take the policy, and
// with it every pod it owns, from another pool serving the same version.
func versionName(pool, endpoint, version string) string {
	return dnsLabel(pool+"-"+endpoint+"-"+version, 63)
}
