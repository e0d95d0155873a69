package kubetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"modelplane/internal/wait"
)

// WaitTimeout is how long the Wait helpers wait: long, because the machine
// running the tests may be loaded, and a condition that holds ends the
// wait at once.
const WaitTimeout = 2 * time.Minute

// WaitPod waits until the pod exists and cond holds for it, and returns it.
func (c *Cluster) WaitPod(t testing.TB, namespace, name string, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	var lastErr error
	wait.Eventually(t, WaitTimeout, func() bool {
		p, err := c.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false
		}
		last = p
		return cond(p)
	}, "kubetest: pod %s/%s: %s did not happen (last error %v; last status %v)", namespace, name, what,
		wait.Show(func() any { return lastErr }), wait.Show(func() any { return statusOf(last) }))
	return last
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// WaitScheduled waits until the scheduler has bound the pod to a node.
func (c *Cluster) WaitScheduled(t testing.TB, namespace, name string) *corev1.Pod {
	t.Helper()
	return c.WaitPod(t, namespace, name, "scheduled", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
}

// WaitUnschedulable waits until the scheduler has found no node for the
// pod, and returns its PodScheduled condition (Reason "Unschedulable",
// Message the scheduler's account of why, such as "0/2 nodes are
// available: 2 Insufficient nvidia.com/gpu.").
func (c *Cluster) WaitUnschedulable(t testing.TB, namespace, name string) corev1.PodCondition {
	t.Helper()
	p := c.WaitPod(t, namespace, name, "reported unschedulable", func(p *corev1.Pod) bool {
		cond := podCondition(p, corev1.PodScheduled)
		return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable
	})
	return *podCondition(p, corev1.PodScheduled)
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// UpdatePodStatus applies change to the pod's current status and writes it
// through the status subresource, as the kubelet does, retrying on a
// conflict with another writer.
func (c *Cluster) UpdatePodStatus(ctx context.Context, namespace, name string, change func(*corev1.Pod)) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		out, err = c.client.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kubetest: pod %s/%s status: %w", namespace, name, err)
	}
	return out, nil
}

func (c *Cluster) mustUpdate(t testing.TB, pod *corev1.Pod, change func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.UpdatePodStatus(ctx, pod.Namespace, pod.Name, change)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// NextPodIP returns a loopback address no pod of this cluster has been
// given yet: 127.0.0.2, 127.0.0.3, … then 127.0.1.2 and on. A test that
// runs a server for a pod listens on it (Linux routes all of 127/8 to lo).
func (c *Cluster) NextPodIP() string {
	n := c.ipSeq.Add(1) - 1
	return fmt.Sprintf("127.%d.%d.%d", (n/250/250)%250, (n/250)%250, n%250+2)
}

// MarkRunning plays the kubelet starting a bound pod: init containers have
// completed, every container runs and is ready, the pod is Running and
// Ready with podIP ip (NextPodIP when ip is ""). It returns the pod as
// stored.
func (c *Cluster) MarkRunning(t testing.TB, pod *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	if ip == "" {
		ip = c.NextPodIP()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.markRunning(ctx, pod.Namespace, pod.Name, ip)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *Cluster) markRunning(ctx context.Context, namespace, name, ip string) (*corev1.Pod, error) {
	return c.UpdatePodStatus(ctx, namespace, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.HostIP = "127.0.0.1"
		p.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.InitContainerStatuses = nil
		for _, ic := range p.Spec.InitContainers {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{
				Name: ic.Name, Image: ic.Image, ImageID: ic.Image, Ready: true,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}},
			})
		}
		started := true
		p.Status.ContainerStatuses = nil
		for _, ctr := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true, Started: &started,
				ContainerID: "kubetest://" + string(p.UID) + "/" + ctr.Name,
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		setConditions(p, true, "")
	})
}

// setConditions sets the kubelet's pod conditions for ready or not ready
// (reason says why not).
func setConditions(p *corev1.Pod, ready bool, reason string) {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	now := metav1.Now()
	for _, cond := range []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		{Type: corev1.ContainersReady, Status: status, Reason: reason},
		{Type: corev1.PodReady, Status: status, Reason: reason},
	} {
		if old := podCondition(p, cond.Type); old != nil {
			if old.Status != cond.Status {
				old.LastTransitionTime = now
			}
			old.Status, old.Reason = cond.Status, cond.Reason
			continue
		}
		cond.LastTransitionTime = now
		p.Status.Conditions = append(p.Status.Conditions, cond)
	}
}

// SetReady plays a readiness probe passing or failing: the pod's
// containers and the pod become ready or not, nothing else changes.
func (c *Cluster) SetReady(t testing.TB, pod *corev1.Pod, ready bool) *corev1.Pod {
	t.Helper()
	return c.mustUpdate(t, pod, func(p *corev1.Pod) {
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready
		}
		reason := ""
		if !ready {
			reason = "ContainersNotReady"
		}
		setConditions(p, ready, reason)
	})
}

// SetContainerState sets one container's state as the kubelet reports it
// and marks the pod not ready (or ready again when state is Running and
// every container is ready). last, when not nil, becomes the container's
// last termination state, and restarted adds one to its restart count.
func (c *Cluster) SetContainerState(t testing.TB, pod *corev1.Pod, container string, state corev1.ContainerState, last *corev1.ContainerState, restarted bool) *corev1.Pod {
	t.Helper()
	return c.mustUpdate(t, pod, func(p *corev1.Pod) {
		i := -1
		for j := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[j].Name == container {
				i = j
			}
		}
		if i < 0 {
			image := ""
			for _, ctr := range p.Spec.Containers {
				if ctr.Name == container {
					image = ctr.Image
				}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: container, Image: image})
			i = len(p.Status.ContainerStatuses) - 1
		}
		cs := &p.Status.ContainerStatuses[i]
		cs.State = state
		if last != nil {
			cs.LastTerminationState = *last
		}
		if restarted {
			cs.RestartCount++
		}
		cs.Ready = state.Running != nil
		started := state.Running != nil
		cs.Started = &started
		all := true
		for _, s := range p.Status.ContainerStatuses {
			all = all && s.Ready
		}
		if all {
			setConditions(p, true, "")
		} else {
			setConditions(p, false, "ContainersNotReady")
		}
	})
}

// OOMKilled plays the kernel killing the container for exceeding its
// memory limit: it was terminated with reason OOMKilled and exit code
// 137, which is also its last termination state, and it restarted once.
func (c *Cluster) OOMKilled(t testing.TB, pod *corev1.Pod, container string) *corev1.Pod {
	t.Helper()
	now := metav1.Now()
	term := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "OOMKilled", StartedAt: now, FinishedAt: now}}
	return c.SetContainerState(t, pod, container, term, &term, true)
}

// CrashLoopBackOff plays a container that keeps exiting with code 1: it
// waits with reason CrashLoopBackOff, its last state terminated with
// reason Error.
func (c *Cluster) CrashLoopBackOff(t testing.TB, pod *corev1.Pod, container string) *corev1.Pod {
	t.Helper()
	now := metav1.Now()
	return c.SetContainerState(t, pod, container,
		corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off 40s restarting failed container=%s pod=%s_%s(%s)", container, pod.Name, pod.Namespace, pod.UID)}},
		&corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}},
		true)
}

// ImagePullBackOff plays an image that cannot be pulled: the container
// waits with reason ImagePullBackOff and the pod stays Pending.
func (c *Cluster) ImagePullBackOff(t testing.TB, pod *corev1.Pod, container string) *corev1.Pod {
	t.Helper()
	image := ""
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == container {
			image = ctr.Image
		}
	}
	c.mustUpdate(t, pod, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })
	return c.SetContainerState(t, pod, container,
		corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: fmt.Sprintf("Back-off pulling image %q", image)}},
		nil, false)
}

// Evict plays the kubelet evicting the pod under node pressure: the pod
// fails with reason Evicted and stays until it is deleted (a ReplicaSet
// makes a replacement at once).
func (c *Cluster) Evict(t testing.TB, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	return c.mustUpdate(t, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = "Evicted"
		p.Status.Message = "The node was low on resource: memory."
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
		}
		setConditions(p, false, "PodFailed")
	})
}

// AutoRun plays the kubelet for every bound pod that match accepts (all
// when match is nil) until the test ends: once such a pod is bound and not
// yet running, it is marked Running and Ready on NextPodIP, as MarkRunning
// does. onRunning, when not nil, is called with each pod so marked (from
// another goroutine).
func (c *Cluster) AutoRun(t testing.TB, match func(*corev1.Pod) bool, onRunning func(*corev1.Pod)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	handle := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending ||
			p.Status.PodIP != "" || (match != nil && !match(p)) {
			return
		}
		got, err := c.markRunning(ctx, p.Namespace, p.Name, c.NextPodIP())
		if err != nil {
			if ctx.Err() == nil && !apierrors.IsNotFound(err) {
				t.Errorf("kubetest: AutoRun: %v", err)
			}
			return
		}
		if onRunning != nil {
			onRunning(got)
		}
	}
	go func() {
		defer close(done)
		c.runPodInformer(ctx, fields.Everything(), 0, cache.ResourceEventHandlerFuncs{
			AddFunc:    handle,
			UpdateFunc: func(_, obj any) { handle(obj) },
		})
	}()
}

// finalizeDeletedPods plays the kubelet's last step for every pod: once a
// bound pod is being deleted (its grace period running), it is removed for
// good, as a kubelet does when the containers have stopped. Without it a
// bound pod would stay Terminating, and so would its namespace.
func (c *Cluster) finalizeDeletedPods(ctx context.Context) {
	handle := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
			return
		}
		zero := int64(0)
		uid := p.UID
		_ = c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	// The resync hands every pod to handle again now and then, so a delete
	// the API server failed (a loaded machine) is tried again.
	c.runPodInformer(ctx, fields.OneTermNotEqualSelector("spec.nodeName", ""), 2*time.Second, cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
}

// runPodInformer watches pods matching sel with handler until ctx ends,
// handing it every pod again each resync (0: never).
func (c *Cluster) runPodInformer(ctx context.Context, sel fields.Selector, resync time.Duration, handler cache.ResourceEventHandler) {
	lw := cache.NewListWatchFromClient(c.client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, sel)
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Pod{}, Handler: handler, ResyncPeriod: resync,
	})
	ctrl.Run(ctx.Done())
}
