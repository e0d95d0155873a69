package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
)

// replica is one replica as a pod.
type replica struct {
	d    *Driver
	spec busapi.ReplicaSpec
	hash string
	ns   string
	pod  string
	// products are the GPU product labels its pod's node affinity names:
	// the pool's of its type when the pod was made.
	products []string

	mu sync.Mutex
	// gone is set once the pod was deleted or ended (evicted): the
	// replica is lost from then on, and no resync makes the pod again.
	gone bool
	// rates turns the runtime's counters into the heartbeat's rates.
	rates catalog.Rates

	// writing is held while the driver writes the replica's objects, so
	// a resync (whose list of replicas may predate Stop) and Stop never
	// interleave; stopped is set by Stop, after which nothing writes
	// them again.
	writing sync.Mutex
	stopped bool
}

func (r *replica) Spec() busapi.ReplicaSpec { return r.spec }

func (r *replica) isGone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// Addr is the pod's IP and the runtime's port; "" until the pod has an IP.
func (r *replica) Addr() string {
	p, err := r.d.pods.Pods(r.ns).Get(r.pod)
	if err != nil || p.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(r.d.cfg.Port))
}

// terminal reports whether the pod has ended for good: evicted, or a
// phase no restart leaves.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

// waitingFailures are the container waiting reasons that mean the replica
// fails rather than starts.
var waitingFailures = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// Observe maps the pod's status: Ready is the pod's Ready condition (the
// runtime's readiness probe), Unschedulable and the failing waiting
// reasons are failures with their reason, and a deleted or evicted pod is
// gone (agent.ErrNotRunning), which the agent counts as lost and replaces.
func (r *replica) Observe(ctx context.Context) (agent.Observation, error) {
	p, err := r.d.pods.Pods(r.ns).Get(r.pod)
	if apierrors.IsNotFound(err) {
		// Not in the watch's cache: new, or gone. The API server says which.
		p, err = r.d.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, r.pod, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		r.mu.Lock()
		r.gone = true
		r.mu.Unlock()
		return agent.Observation{}, fmt.Errorf("pod %s/%s is gone: %w", r.ns, r.pod, agent.ErrNotRunning)
	}
	if err != nil {
		return agent.Observation{}, err
	}
	if p.DeletionTimestamp != nil || terminal(p) {
		r.mu.Lock()
		r.gone = true
		r.mu.Unlock()
		why := strings.TrimSpace(p.Status.Reason + " " + p.Status.Message)
		if p.DeletionTimestamp != nil {
			why = "deleted"
		}
		return agent.Observation{}, fmt.Errorf("pod %s/%s ended (%s): %w", r.ns, r.pod, why, agent.ErrNotRunning)
	}
	e, _ := r.d.entry(r.spec)
	o := agent.Observation{Runtime: e.Name, Absent: slices.Clone(busapi.Metrics), Unallocated: p.Spec.NodeName == ""}
	if r.d.cfg.PodTLS != nil {
		// Gateways verify the pool's name at the pod's IP.
		o.ServerName = r.d.cfg.PodTLS.ServerName
	}
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			o.Failures, o.Reason = 1, strings.TrimSpace(c.Reason+": "+c.Message)
		case c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue:
			o.Ready = true
		}
	}
	check := func(initContainer bool, cs []corev1.ContainerStatus) {
		for _, s := range cs {
			o.Restarts += int(s.RestartCount)
			if t := s.State.Terminated; t != nil && (t.ExitCode != 0 || t.Reason == "OOMKilled") && !initContainer {
				// Ended and about to restart: OOMKilled, or a crash.
				o.Failures = max(o.Failures, 1, int(s.RestartCount))
				o.Reason = busapi.ContainerReason(false, s.Name, fmt.Sprintf("%s (exit %d)", t.Reason, t.ExitCode))
				if msg := strings.TrimSpace(t.Message); msg != "" {
					o.Reason += ": " + msg
				}
				continue
			}
			w := s.State.Waiting
			if w == nil || !slices.Contains(waitingFailures, w.Reason) {
				continue
			}
			why := w.Reason
			if t := s.LastTerminationState.Terminated; t != nil {
				why += fmt.Sprintf(" (last exit %d, %s", t.ExitCode, t.Reason)
				if msg := strings.TrimSpace(t.Message); msg != "" {
					why += ": " + msg
				}
				why += ")"
			}
			if w.Message != "" {
				why += ": " + w.Message
			}
			o.Failures = max(o.Failures, 1, int(s.RestartCount))
			o.Reason = busapi.ContainerReason(initContainer, s.Name, why)
		}
	}
	check(true, p.Status.InitContainerStatuses)
	check(false, p.Status.ContainerStatuses)
	if o.Ready {
		o.Failures, o.Reason = 0, ""
		// Behind a guard a runtime's metrics are on the pod's port (Triton's
		// moved there from their own): the NetworkPolicy admits the agent.
		if e.Metrics != "" && (!e.MetricsPort || guarded(e, r.spec)) {
			r.metrics(ctx, e, p, &o)
		}
	}
	return o, nil
}

// metrics reads the runtime's metrics on the pod, as the process driver
// does on a node, for the heartbeat's load fields.
func (r *replica) metrics(ctx context.Context, e catalog.Entry, p *corev1.Pod, o *agent.Observation) {
	if p.Status.PodIP == "" {
		return
	}
	url := r.d.scheme() + "://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(r.d.cfg.Port)) + e.Metrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := r.d.cfg.HTTP.Do(req)
	if err != nil {
		r.d.log.Debug("metrics not read", slog.String("pod", r.pod), slog.String("error", err.Error()))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	m, err := catalog.Parse(e.Adapter, resp.Body)
	if err != nil {
		return
	}
	o.QueueDepth, o.InFlight, o.Requests, o.BatchSize, o.KVUsedPct = m.QueueDepth, m.InFlight, m.Requests, m.BatchSize, m.KVUsedPct
	o.GPUUtil = m.GPUUtil
	o.LoadMS, o.WarmupMS = int64(math.Ceil(m.LoadSeconds*1000)), int64(math.Ceil(m.WarmupSeconds*1000))
	o.Absent = m.Absent()
	o.Tokens, o.PromptTokens = m.TokenCounters()
	// The rates from this reading and the last, as the process driver
	// makes them.
	r.mu.Lock()
	rr := r.rates.Update(r.d.cfg.Clock.Now(), m)
	r.mu.Unlock()
	o.TokensPerSecond, o.TTFTMS, o.BatchQueueMS = rr.TokensPerSecond, rr.TTFTMS, rr.BatchQueueMS
}

// Stop deletes the pod, whose runtime gets the grace period to drain
// (the agent has taken it out of the routes already), and its token; the
// version's last replica takes the version's objects with it.
func (r *replica) Stop(ctx context.Context) error {
	r.writing.Lock()
	defer r.writing.Unlock()
	if r.stopped {
		return nil
	}
	r.stopped = true
	core := r.d.cfg.Client.CoreV1()
	var err error
	r.d.wrote()
	if e := core.Pods(r.ns).Delete(ctx, r.pod, metav1.DeleteOptions{}); e != nil && !apierrors.IsNotFound(e) {
		err = fmt.Errorf("delete pod %s/%s: %w", r.ns, r.pod, e)
	}
	r.d.wrote()
	if e := core.Secrets(r.ns).Delete(ctx, r.pod, metav1.DeleteOptions{}); e != nil && !apierrors.IsNotFound(e) && err == nil {
		err = fmt.Errorf("delete token %s/%s: %w", r.ns, r.pod, e)
	}
	if e := r.d.forget(ctx, r); e != nil && err == nil {
		err = e
	}
	return err
}
