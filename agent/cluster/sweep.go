package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"modelplane/busapi"
)

// wanted is what the sweep needs of a desired replica: its spec's hash
// (a live pod made for it may still be taken over) and its version's
// NetworkPolicy, namespace/name.
type wanted struct {
	hash   string
	policy string
}

// SetDesired is the agent's desired set (agent.DesiredSetter). From the
// first call on, every pass (Sync) removes the pods, token Secrets and
// NetworkPolicies of this pool that no replica desired or running owns:
// those of an agent whose state directory was lost, or of a replica whose
// record was lost between its pod and the agent's save. Before it the
// driver removes nothing, since an agent starting up has yet to adopt.
func (d *Driver) SetDesired(specs []busapi.ReplicaSpec) {
	want := make(map[string]wanted, len(specs))
	for _, s := range specs {
		want[s.ID] = wanted{hash: specHash(s), policy: Namespace(d.cfg.NamespacePrefix, s.Team) + "/" + versionName(d.cfg.Pool, s.Endpoint, s.Version)}
	}
	d.mu.Lock()
	d.want = want
	d.mu.Unlock()
	d.poke()
}

// Swept counts the objects the sweep removed since New.
func (d *Driver) Swept() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.swept
}

// sweep removes what the driver made in the pool's team namespaces that
// no replica owns, once the agent has set the desired replicas:
//   - a pod that is not the pod of a replica the driver runs or is
//     starting, unless it is a live pod made for the spec of a desired
//     replica the driver does not run yet (Start takes it over);
//   - a replica's token Secret whose pod is not kept;
//   - a version's NetworkPolicy that no replica desired, running or
//     starting, and no kept pod, belongs to.
//
// It reads the watches' caches, which hold only objects with the
// driver's own managed-by and pool labels, and touches nothing outside
// the namespaces of its prefix or without a replica's annotation or
// label. Each removal is logged and counted (Swept).
func (d *Driver) sweep(ctx context.Context) error {
	// The caches first, then the driver's own state: an object in the
	// cache was made after its replica was registered as starting, so it
	// is seen below as starting or running (or as neither, when Start
	// failed or Stop ran, and then it goes).
	pods, err := d.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	secrets, err := d.secrets.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	policies, err := d.policies.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	d.mu.Lock()
	if d.want == nil {
		d.mu.Unlock()
		return nil
	}
	want := d.want
	keep := map[string]bool{}     // namespace/pod
	running := map[string]bool{}  // replica id
	versions := map[string]bool{} // namespace/policy
	for _, r := range d.replicas {
		keep[r.ns+"/"+r.pod], running[r.spec.ID] = true, true
		versions[r.ns+"/"+versionName(d.cfg.Pool, r.spec.Endpoint, r.spec.Version)] = true
	}
	for key, r := range d.starting {
		keep[key] = true
		versions[r.ns+"/"+versionName(d.cfg.Pool, r.spec.Endpoint, r.spec.Version)] = true
	}
	d.mu.Unlock()
	for _, w := range want {
		versions[w.policy] = true
	}
	mine := func(ns string) bool { return strings.HasPrefix(ns, d.cfg.NamespacePrefix) }

	var errs []error
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		id := p.Annotations[AnnotationReplica]
		if !mine(p.Namespace) || id == "" {
			keep[key] = true // not the sweep's to judge: its token stays too
			continue
		}
		if keep[key] {
			continue
		}
		if w, ok := want[id]; ok && !running[id] && adoptable(p, id, w.hash) {
			keep[key] = true // its version is desired: its policy stays
			continue
		}
		if p.DeletionTimestamp != nil {
			continue // going already
		}
		errs = append(errs, d.remove("pod", p.Namespace, p.Name, id, func() error {
			return d.cfg.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: as(&p.ObjectMeta)})
		}))
	}
	for _, s := range secrets {
		key := s.Namespace + "/" + s.Name
		// A token Secret is named after its pod and carries the replica's
		// label; the pool's per-namespace Secrets carry none.
		id, ok := s.Labels[LabelReplica]
		if !mine(s.Namespace) || !ok || keep[key] || s.DeletionTimestamp != nil {
			continue
		}
		errs = append(errs, d.remove("token secret", s.Namespace, s.Name, id, func() error {
			return d.cfg.Client.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: as(&s.ObjectMeta)})
		}))
	}
	for _, p := range policies {
		key := p.Namespace + "/" + p.Name
		if !mine(p.Namespace) || versions[key] || p.DeletionTimestamp != nil {
			continue
		}
		bg := metav1.DeletePropagationBackground
		errs = append(errs, d.remove("network policy", p.Namespace, p.Name, "", func() error {
			return d.cfg.Client.NetworkingV1().NetworkPolicies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: as(&p.ObjectMeta)})
		}))
	}
	return errors.Join(errs...)
}

// as makes a delete apply to the object as the sweep judged it: one
// that changed since (a pod already being deleted, whose
// resourceVersion moved on) is left to the next pass.
func as(m *metav1.ObjectMeta) *metav1.Preconditions {
	uid, rv := m.UID, m.ResourceVersion
	return &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
}

// remove deletes one object with del, logs and counts it; an object gone
// or changed since the sweep read it is no error.
func (d *Driver) remove(kind, ns, name, replica string, del func() error) error {
	d.wrote()
	err := del()
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep %s %s/%s: %w", kind, ns, name, err)
	}
	d.mu.Lock()
	d.swept++
	d.mu.Unlock()
	attrs := []any{slog.String("kind", kind), slog.String("namespace", ns), slog.String("name", name)}
	if replica != "" {
		attrs = append(attrs, slog.String("replica", replica))
	}
	d.log.Info("removed an object no desired or running replica owns", attrs...)
	return nil
}
