package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
)

// Defaults of Config.
const (
	DefaultFieldManager    = "modelplane"
	DefaultNamespacePrefix = "mp-"
	DefaultPort            = 8000
	// DefaultInnerPort is the runtime's loopback port in a pod whose
	// runtime does not check the replica token: the guard sidecar holds
	// Port and forwards to it.
	DefaultInnerPort = 8001
	// TritonMetricsPort is Triton's own metrics port, on the pod's
	// loopback behind a guard, which serves it on the runtime's metrics
	// path.
	TritonMetricsPort = 8002
	DefaultResync     = 30 * time.Second
	DefaultGrace      = 30 * time.Second
	// ArtifactSecret is the Secret in each team namespace that holds the
	// pool's artifact token for the init containers.
	ArtifactSecret = "modelplane-artifacts"
	// ModelsPath is where a pod's model volume is mounted; the init
	// container prepares the version's files under it and links
	// ModelsPath/model to them.
	ModelsPath = "/models"
	// ReplicaAccount is the ServiceAccount of the replicas' pods in each
	// team namespace: no token, no role.
	ReplicaAccount = "modelplane-replica"
)

// Config configures a Driver.
type Config struct {
	// Client talks to the cluster's API server with the agent's
	// ServiceAccount (or kubeconfig) identity.
	Client kubernetes.Interface
	// Pool is the pool's name: the agent's node name in modelplane, and
	// the value of LabelPool on everything the driver writes.
	Pool string
	// Kind is KindGPU or KindCPU.
	Kind string
	// Inventory is the pool's capacity at start (ReadInventory); the
	// driver then follows the nodes (PoolInventory), and reads the GPU
	// types' product labels for node affinity from what it follows.
	Inventory Inventory
	// FieldManager is the server-side apply field manager; "" is
	// DefaultFieldManager-<pool>.
	FieldManager string
	// NamespacePrefix starts each team's namespace name.
	NamespacePrefix string
	// Image is modelplane's own image: the init container that fetches
	// and verifies a version's files, and the built-in runtime.
	Image string
	// Images replaces catalogue entries' images by entry name.
	Images map[string]string
	// Catalog is the runtime catalogue; nil is catalog.Default().
	Catalog map[string]catalog.Entry
	// ControlPlaneURL is where init containers fetch artifacts from, as the
	// pods reach it; ArtifactToken the pool's artifact credential, asked at
	// every resync (an enrolled agent's rotates).
	ControlPlaneURL string
	ArtifactToken   func() string
	// GatewaySelector are the labels of gateway pods, which alone the
	// pods' NetworkPolicy admits (with the agent's, AgentSelector).
	GatewaySelector map[string]string
	AgentSelector   map[string]string
	// NodeSelector keeps the pool's pods on nodes with these labels (and
	// the driver counts only those nodes); nil is every node.
	NodeSelector map[string]string
	// Port is the pod's service port: the runtime's, or the guard
	// sidecar's in front of a runtime that does not check the replica
	// token (catalog.Entry.ChecksToken), which then listens on 127.0.0.1
	// at InnerPort.
	Port      int
	InnerPort int
	// Resync is how often every object is compared with what the driver
	// wants and put back when it drifted; changes to the driver's objects
	// also wake it at once.
	Resync time.Duration
	// Grace is a pod's termination grace period: the runtime's drain.
	Grace time.Duration
	// IndexFile keeps the GPUs' indices (which the driver holds while a
	// GPU's node stays) across the agent's restarts, in its state
	// directory: without it a restarted agent numbers the GPUs by node
	// name again, and a node added since moves others. "" keeps them in
	// memory only.
	IndexFile string
	// PodTLS, when set, makes the pods serve HTTPS with the pool's
	// certificate (tls.go); nil is plain HTTP.
	PodTLS *PodTLS
	// HTTP reads runtimes' metrics; nil is a client with a short timeout
	// (verifying PodTLS's server name with PodTLS).
	HTTP  *http.Client
	Clock quartz.Clock
	Log   *slog.Logger
}

func (c *Config) defaults() {
	if c.FieldManager == "" {
		// One manager per pool: pools share a team's namespace, and each
		// owns its own label there.
		c.FieldManager = DefaultFieldManager + "-" + dnsLabel(c.Pool, 100)
	}
	if c.NamespacePrefix == "" {
		c.NamespacePrefix = DefaultNamespacePrefix
	}
	if c.Kind == "" {
		c.Kind = KindGPU
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.InnerPort == 0 {
		c.InnerPort = DefaultInnerPort
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Catalog == nil {
		c.Catalog = catalog.Default()
	}
	if c.GatewaySelector == nil {
		c.GatewaySelector = map[string]string{LabelComponent: "gateway"}
	}
	if c.AgentSelector == nil {
		c.AgentSelector = map[string]string{LabelComponent: "agent"}
	}
	if c.PodTLS != nil && c.PodTLS.ServerName == "" {
		t := *c.PodTLS
		t.ServerName = ServerName(c.Pool)
		c.PodTLS = &t
	}
	if c.HTTP == nil && c.PodTLS != nil {
		c.HTTP = metricsClient(c.PodTLS)
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 2 * time.Second}
	}
	if c.Clock == nil {
		c.Clock = quartz.NewReal()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Driver runs a pool's replicas as pods in one cluster (agent.Driver).
// Build it with New, run its watches and resync loop with Watch, end
// them with Close.
type Driver struct {
	cfg Config
	log *slog.Logger

	factory informers.SharedInformerFactory
	// nsFactory watches the team namespaces this pool uses, which carry
	// the pool's own label (namespaces are shared between pools).
	nsFactory informers.SharedInformerFactory
	// nodeFactory watches the pool's nodes (NodeSelector) for its
	// inventory.
	nodeFactory informers.SharedInformerFactory
	nodes       corelisters.NodeLister
	pods        corelisters.PodLister
	secrets     corelisters.SecretLister
	accounts    corelisters.ServiceAccountLister
	ns          corelisters.NamespaceLister
	quotas      corelisters.ResourceQuotaLister
	policies    netlisters.NetworkPolicyLister
	synced      []cache.InformerSynced

	wake chan struct{}

	mu       sync.Mutex
	replicas map[string]*replica
	// inv is the pool's inventory, recomputed at each change of a node.
	inv Inventory
	// following serializes follow's list and store, so that an older
	// list never overwrites a newer one.
	following sync.Mutex
	// quotas are the teams' quotas as ResourceQuota hard limits, by team.
	teamQuota map[string]corev1.ResourceList

	// want is the agent's desired set by replica id (SetDesired), nil
	// until the first: the sweep removes nothing before it.
	want map[string]wanted
	// starting are the replicas Start is making, by namespace/pod: their
	// objects exist before the driver runs them, and the sweep keeps them.
	starting map[string]*replica
	// versions is held while a replica is registered as starting and
	// while the last replica of a version deletes its objects, so a
	// version's policy is never deleted under a replica being made.
	versions sync.Mutex

	writes    int64 // applies and deletes since New, for tests
	swept     int64 // objects the sweep removed since New
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ agent.Driver = (*Driver)(nil)

// New checks cfg and builds the driver; it starts nothing.
func New(cfg Config) (*Driver, error) {
	cfg.defaults()
	if cfg.Client == nil {
		return nil, errors.New("cluster driver: a Kubernetes client is required")
	}
	if cfg.Pool == "" {
		return nil, errors.New("cluster driver: a pool name is required")
	}
	if cfg.Kind != KindGPU && cfg.Kind != KindCPU {
		return nil, fmt.Errorf("cluster driver: kind %q: want %s or %s", cfg.Kind, KindGPU, KindCPU)
	}
	if cfg.InnerPort == cfg.Port || cfg.InnerPort == TritonMetricsPort || cfg.Port == TritonMetricsPort {
		return nil, fmt.Errorf("cluster driver: port %d and the runtime's loopback port %d must differ, and from Triton's metrics port %d", cfg.Port, cfg.InnerPort, TritonMetricsPort)
	}
	if cfg.Image == "" {
		return nil, errors.New("cluster driver: modelplane's image is required (the init container and the built-in runtime run it)")
	}
	if cfg.PodTLS != nil {
		if err := cfg.PodTLS.check(); err != nil {
			return nil, err
		}
	}
	d := &Driver{cfg: cfg, log: cfg.Log.With(slog.String("pool", cfg.Pool)), wake: make(chan struct{}, 1),
		replicas: map[string]*replica{}, starting: map[string]*replica{}, teamQuota: map[string]corev1.ResourceList{}, inv: cfg.Inventory}
	if cfg.IndexFile != "" {
		// One that cannot be read must not keep the agent down: the GPUs
		// are numbered by node name, as on a first start.
		index, err := loadIndex(cfg.IndexFile)
		if err != nil {
			d.log.Error("GPU indices unreadable; numbering the GPUs by node name", slog.String("error", err.Error()))
		}
		if index != nil {
			// The last run's numbering; the first count (Watch) follows it.
			d.inv.index = index
		}
	}
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelPool: labelValue(cfg.Pool)}).String()
	d.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	d.nsFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = d.poolLabel() + "=true" }))
	core := d.factory.Core().V1()
	d.pods, d.secrets = core.Pods().Lister(), core.Secrets().Lister()
	d.accounts = core.ServiceAccounts().Lister()
	nsInformer := d.nsFactory.Core().V1().Namespaces()
	d.ns, d.quotas = nsInformer.Lister(), core.ResourceQuotas().Lister()
	d.policies = d.factory.Networking().V1().NetworkPolicies().Lister()
	poke := cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { d.poke() },
		DeleteFunc: func(any) { d.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{core.Pods().Informer(), core.Secrets().Informer(),
		core.ServiceAccounts().Informer(),
		nsInformer.Informer(), core.ResourceQuotas().Informer(), d.factory.Networking().V1().NetworkPolicies().Informer()} {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, fmt.Errorf("cluster driver: %w", err)
		}
		d.synced = append(d.synced, inf.HasSynced)
	}
	d.nodeFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(cfg.NodeSelector).String()
		}))
	nodeInformer := d.nodeFactory.Core().V1().Nodes()
	d.nodes = nodeInformer.Lister()
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.follow() },
		UpdateFunc: func(_, _ any) { d.follow() },
		DeleteFunc: func(any) { d.follow() },
	}); err != nil {
		return nil, fmt.Errorf("cluster driver: %w", err)
	}
	d.synced = append(d.synced, nodeInformer.Informer().HasSynced)
	return d, nil
}

// Watch runs the watches and the resync loop until ctx ends or Close; it
// returns once the watches have listed what exists. (Start is
// agent.Driver's: it starts a replica.)
func (d *Driver) Watch(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	d.factory.Start(rctx.Done())
	d.nsFactory.Start(rctx.Done())
	d.nodeFactory.Start(rctx.Done())
	if !cache.WaitForCacheSync(rctx.Done(), d.synced...) {
		cancel()
		return errors.New("cluster driver: watches did not sync")
	}
	d.follow()
	d.done = make(chan struct{})
	go d.loop(rctx)
	return nil
}

// Close ends the watches and the resync loop. Pods keep running: the next
// agent adopts them.
func (d *Driver) Close() {
	d.closeOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
			<-d.done
		}
		d.factory.Shutdown()
		d.nsFactory.Shutdown()
		d.nodeFactory.Shutdown()
	})
}

func (d *Driver) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop resyncs every Resync and whenever an object of the driver changed,
// so a hand edit is put back at once, and at the latest within a resync.
func (d *Driver) loop(ctx context.Context) {
	defer close(d.done)
	t := d.cfg.Clock.NewTicker(d.cfg.Resync, "cluster", "resync")
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
		if _, err := d.Sync(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("resync", slog.String("error", err.Error()))
		}
	}
}

// follow recomputes the pool's inventory from the watched nodes: a node
// added or back counts, one cordoned, not Ready or removed no longer
// does, a MIG relayout counts as its new slices. The agent reports it at
// its next heartbeat (PoolInventory). A node the driver cannot read (a
// GPU node without the operator's labels) is left out and logged.
func (d *Driver) follow() {
	d.following.Lock()
	defer d.following.Unlock()
	list, err := d.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	nodes := make([]corev1.Node, len(list))
	for i, n := range list {
		nodes[i] = *n
	}
	// The last count's numbering is kept: a GPU stays at its index while
	// its node stays in the pool.
	prev := d.current().index
	inv, bad := readInventory(nodes, d.cfg.Kind, prev)
	for _, err := range bad {
		d.log.Warn("node left out of the pool", slog.String("error", err.Error()))
	}
	d.mu.Lock()
	d.inv = inv
	d.mu.Unlock()
	if d.cfg.IndexFile != "" && !maps.Equal(prev, inv.index) {
		if err := saveIndex(d.cfg.IndexFile, inv.index); err != nil {
			d.log.Warn("GPU indices not saved; a restart may number them by node name", slog.String("error", err.Error()))
		}
	}
}

// current is the pool's inventory as last followed.
func (d *Driver) current() Inventory {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inv
}

// PoolInventory is the pool's capacity now (agent.InventorySource): the
// schedulable, Ready nodes' allocatable GPUs and MIG slices, or cores and
// memory, as ReadInventory counts them.
func (d *Driver) PoolInventory() (gpus []busapi.GPU, cpuCores, memoryMB int) {
	inv := d.current()
	gpus = make([]busapi.GPU, len(inv.GPUs))
	for i, g := range inv.GPUs {
		g.Slices = slices.Clone(g.Slices)
		gpus[i] = g
	}
	return gpus, inv.CPUCores, inv.MemoryMB
}

// Writes counts the applies and deletes the driver sent since New.
func (d *Driver) Writes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

func (d *Driver) wrote() {
	d.mu.Lock()
	d.writes++
	d.mu.Unlock()
}

// SetTeamQuotas sets the teams' quotas (by team, resource → amount, as
// package quota keeps them) that each team's namespace ResourceQuota
// carries; a team left out has none. The next resync applies them.
func (d *Driver) SetTeamQuotas(q map[string]map[string]float64) {
	out := map[string]corev1.ResourceList{}
	for team, lim := range q {
		out[team] = d.hardLimits(lim)
	}
	d.mu.Lock()
	d.teamQuota = out
	d.mu.Unlock()
	d.poke()
}

// Running lists the replicas the driver runs.
func (d *Driver) Running() []agent.Replica {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]agent.Replica, 0, len(d.replicas))
	for _, r := range d.replicas {
		out = append(out, r)
	}
	return out
}

// Runtimes lists the catalogue entries the driver can run: every one with
// an image (the built-in runtime's is modelplane's own). Triton's model
// repository is laid out by the init container.
func (d *Driver) Runtimes() []string {
	var out []string
	for name, e := range d.cfg.Catalog {
		if d.image(e) != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (d *Driver) image(e catalog.Entry) string {
	if img := d.cfg.Images[e.Name]; img != "" {
		return img
	}
	if (e.Name == catalog.Builtin || e.Name == catalog.BuiltinLLM) && (e.Image == "" || e.Image == catalog.ModelplaneImage) {
		// The runtime and the init container are one release, unless the
		// installation named another image for the entry.
		return d.cfg.Image
	}
	return e.Image
}

// Start makes the replica's objects and returns at once: the pod may wait
// for the scheduler, its image and its files (Observe says). Starting an
// id the driver runs with the same spec returns the running replica, and
// a live pod made for the same spec by a previous agent whose record of
// it was lost (its state directory, or a crash before it saved) is taken
// over instead of made twice.
func (d *Driver) Start(ctx context.Context, spec busapi.ReplicaSpec, _ agent.StartOptions) (agent.Replica, error) {
	h := specHash(spec)
	d.mu.Lock()
	if r, ok := d.replicas[spec.ID]; ok && r.hash == h {
		d.mu.Unlock()
		return r, nil
	}
	d.mu.Unlock()
	ns := Namespace(d.cfg.NamespacePrefix, spec.Team)
	// From the API server, not the watch's cache: a pod this driver has
	// just deleted may still look alive there.
	list, err := d.cfg.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: d.replicaSelector(spec.ID).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of replica %s: %w", spec.ID, err)
	}
	for i := range list.Items {
		if r := d.take(spec, h, ns, &list.Items[i]); r != nil {
			d.log.Info("took over the replica's pod", slog.String("replica", spec.ID), slog.String("pod", r.pod))
			return r, nil
		}
	}
	r := &replica{d: d, spec: spec, hash: h, ns: ns, pod: dnsLabel(spec.ID, 57) + "-" + randHex(2)}
	if len(spec.Slots) > 0 {
		r.products = slices.Clone(d.current().Products[strings.ToUpper(spec.GPUType)])
	}
	if _, err := d.desired(r); err != nil {
		return nil, err
	}
	key := r.ns + "/" + r.pod
	d.versions.Lock()
	d.mu.Lock()
	d.starting[key] = r
	d.mu.Unlock()
	d.versions.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.starting, key)
		d.mu.Unlock()
	}()
	if err := d.syncReplica(ctx, r, true); err != nil {
		// The agent retries under a new pod name: the token Secret made
		// for this one goes (its version's policy would take it anyway).
		if e := d.cfg.Client.CoreV1().Secrets(r.ns).Delete(ctx, r.pod, metav1.DeleteOptions{}); e == nil {
			d.wrote()
		}
		return nil, err
	}
	d.mu.Lock()
	d.replicas[spec.ID] = r
	d.mu.Unlock()
	return r, nil
}

// Adopt takes over the pod a previous agent made for spec, when it is
// still there and made for this spec.
func (d *Driver) Adopt(_ context.Context, spec busapi.ReplicaSpec, _ string) (agent.Replica, error) {
	ns := Namespace(d.cfg.NamespacePrefix, spec.Team)
	pods, err := d.pods.Pods(ns).List(d.replicaSelector(spec.ID))
	if err != nil {
		return nil, err
	}
	h := specHash(spec)
	for _, p := range pods {
		if r := d.take(spec, h, ns, p); r != nil {
			return r, nil
		}
	}
	return nil, agent.ErrNotRunning
}

// replicaSelector selects the pods of replica id in this pool.
func (d *Driver) replicaSelector(id string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelReplica: labelValue(id), LabelPool: labelValue(d.cfg.Pool)})
}

// take runs spec (hash h) as pod p when p was made for that spec and
// lives; nil when it cannot.
func (d *Driver) take(spec busapi.ReplicaSpec, h, ns string, p *corev1.Pod) *replica {
	if !adoptable(p, spec.ID, h) {
		return nil
	}
	r := &replica{d: d, spec: spec, hash: h, ns: ns, pod: p.Name, products: podProducts(p)}
	d.mu.Lock()
	d.replicas[spec.ID] = r
	d.mu.Unlock()
	d.poke()
	return r
}

// adoptable reports whether pod p can run replica id with the spec of
// hash h: made for it, neither deleted nor ended.
func adoptable(p *corev1.Pod, id, h string) bool {
	return p.Annotations[AnnotationReplica] == id && p.Annotations[AnnotationSpec] == h && p.DeletionTimestamp == nil && !terminal(p)
}

// Sync compares every object of every replica with what the driver wants
// and applies those that differ (drifted by hand, or never written), then,
// once the agent has set the desired replicas, sweeps what no replica
// owns (sweep.go); it returns how many it wrote. A second Sync with
// nothing changed writes nothing.
func (d *Driver) Sync(ctx context.Context) (int, error) {
	before := d.Writes()
	d.mu.Lock()
	reps := make([]*replica, 0, len(d.replicas))
	for _, r := range d.replicas {
		reps = append(reps, r)
	}
	d.mu.Unlock()
	var errs []error
	for _, r := range reps {
		if err := d.syncReplica(ctx, r, false); err != nil {
			errs = append(errs, fmt.Errorf("replica %s: %w", r.spec.ID, err))
		}
	}
	if err := d.sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	return int(d.Writes() - before), errors.Join(errs...)
}

// forget drops r and, when it was its version's last replica and no
// other is starting, the version's NetworkPolicy, whose deletion takes
// anything left over of the version with it (owner references).
func (d *Driver) forget(ctx context.Context, r *replica) error {
	d.versions.Lock()
	defer d.versions.Unlock()
	d.mu.Lock()
	if d.replicas[r.spec.ID] == r {
		delete(d.replicas, r.spec.ID)
	}
	last := true
	for _, set := range []map[string]*replica{d.replicas, d.starting} {
		for _, o := range set {
			if o.ns == r.ns && o.spec.Endpoint == r.spec.Endpoint && o.spec.Version == r.spec.Version {
				last = false
			}
		}
	}
	d.mu.Unlock()
	if !last {
		return nil
	}
	bg := metav1.DeletePropagationBackground
	err := d.cfg.Client.NetworkingV1().NetworkPolicies(r.ns).Delete(ctx, versionName(d.cfg.Pool, r.spec.Endpoint, r.spec.Version), metav1.DeleteOptions{PropagationPolicy: &bg})
	d.wrote()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete version objects: %w", err)
	}
	return nil
}

// podProducts are the GPU product labels pod p's node affinity names.
func podProducts(p *corev1.Pod) []string {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	for _, t := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == LabelGPUProduct {
				return slices.Clone(e.Values)
			}
		}
	}
	return nil
}

func specHash(spec busapi.ReplicaSpec) string {
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// MetersRunningOnly marks the driver as a pool's (agent.PoolDriver): a
// replica is metered only while its pod holds a node's resources.
func (d *Driver) MetersRunningOnly() {}

// NamespacePrefix is the start of the team namespaces' names.
func (d *Driver) NamespacePrefix() string { return d.cfg.NamespacePrefix }
