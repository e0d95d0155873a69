package kubetest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// Resource names the NVIDIA device plugin advertises: whole GPUs, and under
// the "mixed" MIG strategy one resource per slice profile.
const (
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// MIGPrefix followed by a profile such as "1g.10gb" names a MIG slice
	// resource: nvidia.com/mig-1g.10gb.
	MIGPrefix = "nvidia.com/mig-"
)

// Labels that the GPU operator's feature discovery puts on a GPU node.
const (
	LabelGPUPresent    = "nvidia.com/gpu.present"
	LabelGPUProduct    = "nvidia.com/gpu.product"
	LabelGPUCount      = "nvidia.com/gpu.count"
	LabelGPUMemory     = "nvidia.com/gpu.memory" // MiB of one GPU
	LabelMIGStrategy   = "nvidia.com/mig.strategy"
	LabelMIGCapable    = "nvidia.com/mig.capable"
	labelKubetestNode  = "kubetest.modelplane.dev/node"
	defaultNodeCPU     = "16"
	defaultNodeMemory  = "64Gi"
	defaultNodeMaxPods = 110
)

// Node describes a machine to register: what it can run (its allocatable
// resources) and the labels the GPU operator would give it. Zero fields
// take the defaults noted.
type Node struct {
	// Name defaults to node-N, unique in the cluster.
	Name string
	// CPU and Memory are quantities ("16", "64Gi"); they default to 16
	// cores and 64Gi.
	CPU, Memory string
	// Pods is the most pods the node takes; it defaults to 110.
	Pods int
	// GPUs is the node's allocatable nvidia.com/gpu.
	GPUs int
	// GPUProduct is the nvidia.com/gpu.product label, such as
	// "NVIDIA-A100-SXM4-80GB"; GPUMemoryMiB is nvidia.com/gpu.memory.
	GPUProduct   string
	GPUMemoryMiB int
	// MIG is the allocatable count per MIG profile ("1g.10gb": 7 becomes
	// nvidia.com/mig-1g.10gb: 7, with the mixed strategy's labels).
	MIG map[string]int
	// Labels and Taints are added as given.
	Labels map[string]string
	Taints []corev1.Taint
	// KubeletPort is the port of the node's kubelet on 127.0.0.1 (its
	// daemon endpoint): a test that plays the kubelet's API (an HTTPS
	// server serving /containerLogs/…, which the API server asks for
	// pods/log) sets it. Zero is none.
	KubeletPort int32
}

// NodeObject is the Node object n describes, as a kubelet with the NVIDIA
// device plugin and GPU feature discovery would register it: ready, its
// capacity equal to its allocatable, on 127.0.0.1.
func (n Node) NodeObject() *corev1.Node {
	cpu, mem, pods := n.CPU, n.Memory, n.Pods
	if cpu == "" {
		cpu = defaultNodeCPU
	}
	if mem == "" {
		mem = defaultNodeMemory
	}
	if pods == 0 {
		pods = defaultNodeMaxPods
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(cpu),
		corev1.ResourceMemory:           resource.MustParse(mem),
		corev1.ResourcePods:             *resource.NewQuantity(int64(pods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
	}
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		labelKubetestNode:        "true",
	}
	if n.GPUs > 0 || len(n.MIG) > 0 {
		labels[LabelGPUPresent] = "true"
		if n.GPUProduct != "" {
			labels[LabelGPUProduct] = n.GPUProduct
		}
		if n.GPUMemoryMiB > 0 {
			labels[LabelGPUMemory] = strconv.Itoa(n.GPUMemoryMiB)
		}
	}
	if n.GPUs > 0 {
		res[ResourceGPU] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
		labels[LabelGPUCount] = strconv.Itoa(n.GPUs)
	}
	if len(n.MIG) > 0 {
		labels[LabelMIGStrategy] = "mixed"
		labels[LabelMIGCapable] = "true"
		for profile, count := range n.MIG {
			res[corev1.ResourceName(MIGPrefix+profile)] = *resource.NewQuantity(int64(count), resource.DecimalSI)
			labels[MIGPrefix+profile+".count"] = strconv.Itoa(count)
		}
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: n.Taints},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message:            "kubetest plays this node's kubelet",
				LastHeartbeatTime:  metav1.Now(),
				LastTransitionTime: metav1.Now(),
			}},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: n.Name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: n.KubeletPort}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux", Architecture: "amd64",
				KubeletVersion: Version, ContainerRuntimeVersion: "kubetest://" + Version,
			},
		},
	}
}

// AddNode registers n as a kubelet would and deletes it when the test
// ends. It returns the Node as stored.
func (c *Cluster) AddNode(t testing.TB, n Node) *corev1.Node {
	t.Helper()
	if n.Name == "" {
		n.Name = fmt.Sprintf("node-%d", c.nameSeq.Add(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := n.NodeObject()
	got, err := c.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: register node %s: %v", n.Name, err)
	}
	t.Cleanup(func() {
		err := c.client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("kubetest: delete node %s: %v", n.Name, err)
		}
	})
	// A kubelet posts its status separately; create may keep it, but the
	// status subresource is the kubelet's path, so write it there when it
	// was not kept (a controller may have written the node meanwhile).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(cur.Status.Allocatable, want.Status.Allocatable) && len(cur.Status.Conditions) > 0 {
			got = cur
			return nil
		}
		cur.Status = want.Status
		got, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("kubetest: node %s status: %v", n.Name, err)
	}
	return got
}
