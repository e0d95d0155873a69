package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/coder/quartz"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/cluster"
)

// DriverKubernetes is the agent's --driver for a cluster agent.
const DriverKubernetes = "kubernetes"

// KubeConfig configures the agent's kubernetes driver (agent/cluster):
// the cluster it runs a pool's replicas in.
type KubeConfig struct {
	// Kubeconfig is the file to reach the API server with; "" is the
	// in-cluster configuration (the agent's ServiceAccount).
	Kubeconfig string
	// Kind is the pool's kind: gpu (nodes' nvidia.com/gpu and MIG
	// resources) or cpu (nodes without GPUs, by cores and memory).
	Kind string
	// Image is modelplane's image: init containers and the built-in
	// runtime; RuntimeImages replaces catalogue entries' images,
	// "name=image" pairs separated by commas (catalog.SetImages).
	Image         string
	RuntimeImages string
	// NamespacePrefix starts each team's namespace.
	NamespacePrefix string
	// ControlPlaneURL is where pods fetch artifacts, as they reach the
	// control plane; "" is the agent's --control-plane.
	ControlPlaneURL string
	Resync          time.Duration
	// ServerName is the name the pool's certificate (MP_TLS_CERT, which
	// the pods serve) names and gateways verify; "" is
	// <pool>.replicas.modelplane.internal.
	ServerName string

	client    kubernetes.Interface
	inventory cluster.Inventory
}

// Flags registers the settings on fs.
func (k *KubeConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", env("MP_KUBECONFIG", ""), "kubernetes driver: kubeconfig file; empty for the in-cluster ServiceAccount (MP_KUBECONFIG)")
	fs.StringVar(&k.Kind, "kube-pool", env("MP_KUBE_POOL", cluster.KindGPU), "kubernetes driver: the pool's kind, gpu (GPU and MIG resources) or cpu (nodes without GPUs) (MP_KUBE_POOL)")
	fs.StringVar(&k.Image, "kube-image", env("MP_KUBE_IMAGE", catalog.ModelplaneImage), "kubernetes driver: modelplane's image, for init containers and the built-in runtime (MP_KUBE_IMAGE)")
	fs.StringVar(&k.RuntimeImages, "runtime-images", env("MP_AGENT_RUNTIME_IMAGES", ""), "kubernetes driver: catalogue images replaced, as vllm=registry.corp/vllm:v1,triton=… (MP_AGENT_RUNTIME_IMAGES)")
	fs.StringVar(&k.NamespacePrefix, "kube-namespace-prefix", env("MP_KUBE_NAMESPACE_PREFIX", cluster.DefaultNamespacePrefix), "kubernetes driver: start of each team's namespace (MP_KUBE_NAMESPACE_PREFIX)")
	fs.StringVar(&k.ControlPlaneURL, "kube-control-plane", env("MP_KUBE_CONTROL_PLANE_URL", ""), "kubernetes driver: the control plane's URL as pods reach it; empty for --control-plane (MP_KUBE_CONTROL_PLANE_URL)")
	fs.StringVar(&k.ServerName, "kube-server-name", env("MP_KUBE_SERVER_NAME", ""), "kubernetes driver: the name MP_TLS_CERT, which the pods serve, names; empty for <pool>"+cluster.ServerNameSuffix+" (MP_KUBE_SERVER_NAME)")
	fs.DurationVar(&k.Resync, "kube-resync", envDuration("MP_KUBE_RESYNC", cluster.DefaultResync), "kubernetes driver: how often every object is compared and put back (MP_KUBE_RESYNC)")
}

func (k *KubeConfig) validate() []string {
	var errs []string
	if k.Kind != cluster.KindGPU && k.Kind != cluster.KindCPU {
		errs = append(errs, fmt.Sprintf("MP_KUBE_POOL (--kube-pool) %q: want gpu or cpu", k.Kind))
	}
	if k.Image == "" {
		errs = append(errs, "MP_KUBE_IMAGE (--kube-image) is required with --driver kubernetes: init containers and the built-in runtime run it")
	}
	if err := catalog.SetImages(catalog.Default(), k.RuntimeImages); err != nil {
		errs = append(errs, fmt.Sprintf("MP_AGENT_RUNTIME_IMAGES (--runtime-images): %v", err))
	}
	if k.ServerName != "" {
		for _, e := range validation.IsDNS1123Subdomain(k.ServerName) {
			errs = append(errs, fmt.Sprintf("MP_KUBE_SERVER_NAME (--kube-server-name) %q: %s", k.ServerName, e))
		}
	}
	if k.Resync <= 0 {
		errs = append(errs, "MP_KUBE_RESYNC (--kube-resync) must be above 0")
	}
	return errs
}

// connect builds the client and reads the pool's inventory from the
// cluster's nodes.
func (k *KubeConfig) connect(ctx context.Context) error {
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	rc.UserAgent = "modelplane-agent"
	if k.client, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nodes, err := k.client.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	k.inventory, err = cluster.ReadInventory(nodes.Items, k.Kind)
	return err
}

// driver builds the kubernetes driver and starts its watches.
func (k *KubeConfig) driver(ctx context.Context, cfg agent.Config, c AgentConfig, podTLS *cluster.PodTLS, sess *nodeSession, clock quartz.Clock, log *slog.Logger) (*cluster.Driver, error) {
	cat := catalog.Default()
	if err := catalog.SetImages(cat, k.RuntimeImages); err != nil {
		return nil, err
	}
	var token func() string
	switch {
	case sess != nil:
		token = sess.ArtifactToken
	case c.AgentToken != "":
		t := string(c.AgentToken)
		token = func() string { return t }
	}
	url := k.ControlPlaneURL
	if url == "" {
		url = c.ControlPlaneURL
	}
	drv, err := cluster.New(cluster.Config{Client: k.client, Pool: cfg.Node, Kind: k.Kind, Inventory: k.inventory,
		NamespacePrefix: k.NamespacePrefix, Image: k.Image, Catalog: cat, ControlPlaneURL: url, ArtifactToken: token,
		Resync: k.Resync, PodTLS: podTLS, IndexFile: filepath.Join(cfg.StateDir, "kube-gpu-indices.json"), Clock: clock, Log: log})
	if err != nil {
		return nil, err
	}
	if err := drv.Watch(ctx); err != nil {
		return nil, err
	}
	return drv, nil
}
