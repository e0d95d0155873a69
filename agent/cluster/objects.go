package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	applymetav1 "k8s.io/client-go/applyconfigurations/meta/v1"
	applynetv1 "k8s.io/client-go/applyconfigurations/networking/v1"

	"modelplane/agent/catalog"
	"modelplane/busapi"
)

// objects are what the driver wants in the cluster for one replica.
type objects struct {
	namespace *applycorev1.NamespaceApplyConfiguration
	quota     *applycorev1.ResourceQuotaApplyConfiguration // nil: the team has no quota
	artifacts *applycorev1.SecretApplyConfiguration        // nil: no artifacts to fetch
	tls       *applycorev1.SecretApplyConfiguration        // nil: pods serve plain HTTP
	account   *applycorev1.ServiceAccountApplyConfiguration
	// policy admits gateways alone to the version's pods, and owns them
	// and their tokens: deleting it removes the version (garbage
	// collection by owner reference), and the agent needs no other kind.
	policy *applynetv1.NetworkPolicyApplyConfiguration
	token  *applycorev1.SecretApplyConfiguration
	pod    *applycorev1.PodApplyConfiguration
}

func (d *Driver) labels(spec busapi.ReplicaSpec) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelPool: labelValue(d.cfg.Pool), LabelTeam: labelValue(spec.Team),
		LabelEndpoint: labelValue(spec.Endpoint), LabelVersion: labelValue(spec.Version)}
}

func (d *Driver) teamLabels(team string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelPool: labelValue(d.cfg.Pool), LabelTeam: labelValue(team)}
}

// poolLabel marks a team namespace as used by a pool; several pools (a
// GPU and a CPU cluster agent) share a team's namespace, each owning its
// own label.
func (d *Driver) poolLabel() string { return "pool.modelplane.io/" + dnsLabel(d.cfg.Pool, 63) }

func (d *Driver) artifactSecret() string { return dnsLabel(ArtifactSecret+"-"+d.cfg.Pool, 253) }

// desired builds the objects of r. An error means the replica cannot run
// on this driver (a runtime without an image).
func (d *Driver) desired(r *replica) (objects, error) {
	spec := r.spec
	var o objects
	o.namespace = applycorev1.Namespace(r.ns).WithLabels(map[string]string{LabelManagedBy: ManagedBy, LabelTeam: labelValue(spec.Team), d.poolLabel(): "true"})
	d.mu.Lock()
	hard := d.teamQuota[spec.Team]
	d.mu.Unlock()
	if len(hard) > 0 {
		o.quota = applycorev1.ResourceQuota(dnsLabel("modelplane-"+d.cfg.Pool, 253), r.ns).WithLabels(d.teamLabels(spec.Team)).
			WithSpec(applycorev1.ResourceQuotaSpec().WithHard(hard))
	}
	// The pods' own ServiceAccount, with no token mounted: a runtime
	// never talks to the API server. Made with the namespace, so a pod
	// never waits for the controller's default one.
	o.account = applycorev1.ServiceAccount(ReplicaAccount, r.ns).WithLabels(d.teamLabels(spec.Team)).
		WithAutomountServiceAccountToken(false)
	fetch := spec.Manifest != "" && spec.Runtime != "sim"
	if fetch && d.cfg.ControlPlaneURL != "" && d.cfg.ArtifactToken != nil {
		o.artifacts = applycorev1.Secret(d.artifactSecret(), r.ns).WithLabels(d.teamLabels(spec.Team)).
			WithType(corev1.SecretTypeOpaque).WithData(map[string][]byte{"token": []byte(d.cfg.ArtifactToken())})
	}
	if d.cfg.PodTLS != nil {
		var err error
		if o.tls, err = d.tlsSecretIn(r.ns, d.teamLabels(spec.Team)); err != nil {
			return objects{}, err
		}
	}
	vname := versionName(d.cfg.Pool, spec.Endpoint, spec.Version)
	lbl := d.labels(spec)

	peer := func(sel map[string]string) *applynetv1.NetworkPolicyPeerApplyConfiguration {
		return applynetv1.NetworkPolicyPeer().WithNamespaceSelector(applymetav1.LabelSelector()).
			WithPodSelector(applymetav1.LabelSelector().WithMatchLabels(sel))
	}
	o.policy = applynetv1.NetworkPolicy(vname, r.ns).WithLabels(lbl).WithSpec(applynetv1.NetworkPolicySpec().
		WithPodSelector(applymetav1.LabelSelector().WithMatchLabels(map[string]string{
			LabelManagedBy: ManagedBy, LabelEndpoint: labelValue(spec.Endpoint), LabelVersion: labelValue(spec.Version)})).
		WithPolicyTypes("Ingress").
		WithIngress(applynetv1.NetworkPolicyIngressRule().
			WithFrom(peer(d.cfg.GatewaySelector), peer(d.cfg.AgentSelector)).
			WithPorts(applynetv1.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(int32(d.cfg.Port))))))

	rlbl := d.labels(spec)
	rlbl[LabelReplica] = labelValue(spec.ID)
	o.token = applycorev1.Secret(r.pod, r.ns).WithLabels(rlbl).WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{"token": []byte(spec.Token)})

	pod, err := d.podSpec(r, fetch)
	if err != nil {
		return objects{}, err
	}
	o.pod = applycorev1.Pod(r.pod, r.ns).WithLabels(rlbl).
		WithAnnotations(map[string]string{AnnotationReplica: spec.ID, AnnotationSpec: r.hash}).WithSpec(pod)
	return o, nil
}

// entry is the catalogue entry that runs spec.
func (d *Driver) entry(spec busapi.ReplicaSpec) (catalog.Entry, error) {
	rt := spec.Runtime
	if rt == "" {
		rt = catalog.Builtin
	}
	name, err := catalog.Name(rt, len(spec.Slots) > 0)
	if err != nil {
		return catalog.Entry{}, err
	}
	e, ok := d.cfg.Catalog[name]
	if !ok {
		return catalog.Entry{}, fmt.Errorf("%w %q (runtime %q)", catalog.ErrUnknown, name, rt)
	}
	if d.image(e) == "" {
		return catalog.Entry{}, fmt.Errorf("catalogue entry %s has no image: set one with --kube-runtime-image %s=IMAGE", name, name)
	}
	return e, nil
}

func (d *Driver) podSpec(r *replica, fetch bool) (*applycorev1.PodSpecApplyConfiguration, error) {
	spec := r.spec
	e, err := d.entry(spec)
	if err != nil {
		return nil, err
	}
	triton := e.Name == catalog.Triton
	if triton && !fetch {
		return nil, fmt.Errorf("runtime %s needs the version's files: its model repository is laid out by the init container", e.Name)
	}
	modelDir := ModelsPath + "/model"
	// A runtime that does not check the replica token listens on the
	// pod's loopback behind the guard sidecar, which holds the service
	// port (and serves Triton's metrics from their own loopback port).
	g := guarded(e, spec)
	tlsOn := d.cfg.PodTLS != nil
	if tlsOn && !g && !e.ChecksToken {
		return nil, fmt.Errorf("runtime %s serves TLS only behind the guard, which needs the replica's token", e.Name)
	}
	host, port, metricsPort := "0.0.0.0", d.cfg.Port, 0
	if g {
		host, port = "127.0.0.1", d.cfg.InnerPort
		if e.MetricsPort {
			metricsPort = TritonMetricsPort
		}
	}
	// Triton's model repository is the init container's, in the volume
	// (ModelsPath/repository), with the arguments the process driver gives.
	argv, err := e.Argv(catalog.Vars{Self: "modelplane", ModelDir: modelDir, Host: host, Port: port, MetricsPort: metricsPort,
		Threads: max(1, spec.CPUCores), Model: spec.Model, Replica: spec.ID, Endpoint: spec.Endpoint, WorkDir: ModelsPath}, spec.Settings, len(spec.Slots))
	if err != nil {
		return nil, err
	}
	var command []string
	if argv[0] == "modelplane" {
		argv = argv[1:] // the image's entrypoint is modelplane
	} else {
		// vLLM, llama-server, or an entry's own program: the argv names it.
		command, argv = argv[:1], argv[1:]
	}
	env := []*applycorev1.EnvVarApplyConfiguration{
		applycorev1.EnvVar().WithName("MP_RUNTIME_HOST").WithValue(host),
		applycorev1.EnvVar().WithName("MP_REPLICA_ID").WithValue(spec.ID),
	}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, applycorev1.EnvVar().WithName(k).WithValue(v))
	}
	token := func() *applycorev1.EnvVarApplyConfiguration {
		return applycorev1.EnvVar().WithName("MP_REPLICA_TOKEN").WithValueFrom(applycorev1.EnvVarSource().
			WithSecretKeyRef(applycorev1.SecretKeySelector().WithName(r.pod).WithKey("token")))
	}
	if spec.Token != "" && !g {
		env = append(env, token())
	}
	// The serving container reads the pool's certificate from the
	// Secret's volume, read again by tlscert when the kubelet updates it.
	tlsMount := applycorev1.VolumeMount().WithName("tls").WithMountPath(TLSPath).WithReadOnly(true)
	if tlsOn && !g {
		env = append(env, applycorev1.EnvVar().WithName("MP_TLS_CERT").WithValue(TLSPath+"/"+corev1.TLSCertKey),
			applycorev1.EnvVar().WithName("MP_TLS_KEY").WithValue(TLSPath+"/"+corev1.TLSPrivateKeyKey))
	}
	res := corev1.ResourceList{}
	if len(spec.Slots) > 0 {
		res[resourceOf(spec.Profile)] = quantity(int64(len(spec.Slots)))
	}
	if spec.CPUCores > 0 {
		res[corev1.ResourceCPU] = quantity(int64(spec.CPUCores))
	}
	if spec.MemoryMB > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(int64(spec.MemoryMB)<<20, resource.BinarySI)
	}
	var gres corev1.ResourceList
	if g {
		res, gres = guardShare(res)
	}
	// Probes reach the runtime on its named port; behind a guard they go
	// through the guard's port (a named port is looked up in the probed
	// container's own ports), the probe paths passing without the token.
	probePort := intstr.FromString("http")
	if g {
		probePort = intstr.FromInt32(int32(d.cfg.Port))
	}
	// Over TLS the probes are https (the kubelet does not verify). Plain
	// probes leave the scheme to the API server's default, as pods made
	// before TLS have it: a pod's probes cannot change.
	probe := func(path string) *applycorev1.ProbeApplyConfiguration {
		get := applycorev1.HTTPGetAction().WithPath(path).WithPort(probePort)
		if tlsOn {
			get.WithScheme(corev1.URISchemeHTTPS)
		}
		return applycorev1.Probe().WithHTTPGet(get)
	}
	servicePort := applycorev1.ContainerPort().WithName("http").WithContainerPort(int32(d.cfg.Port)).WithProtocol(corev1.ProtocolTCP)
	runtime := applycorev1.Container().WithName("runtime").WithImage(d.image(e)).WithArgs(argv...).WithEnv(env...).
		WithResources(applycorev1.ResourceRequirements().WithRequests(res).WithLimits(res)).
		WithVolumeMounts(applycorev1.VolumeMount().WithName("models").WithMountPath(ModelsPath).WithReadOnly(true)).
		WithSecurityContext(secure())
	if !g {
		runtime.WithPorts(servicePort)
		if tlsOn {
			runtime.WithVolumeMounts(tlsMount)
		}
	}
	if command != nil {
		runtime.WithCommand(command...)
	}
	if e.Ready != "" {
		runtime.WithReadinessProbe(probe(e.ReadyPath(spec.Model)).WithPeriodSeconds(2).WithFailureThreshold(1))
	}
	if e.Health != "" {
		// Loading a large model takes minutes: the startup probe holds the
		// liveness probe off until the runtime first answers.
		runtime.WithStartupProbe(probe(e.Health).WithPeriodSeconds(5).WithFailureThreshold(120)).
			WithLivenessProbe(probe(e.Health).WithPeriodSeconds(10).WithFailureThreshold(3))
	}
	ps := applycorev1.PodSpec().WithRestartPolicy(corev1.RestartPolicyAlways).WithServiceAccountName(ReplicaAccount).
		WithAutomountServiceAccountToken(false).WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(int64(math.Ceil(d.cfg.Grace.Seconds()))).
		WithVolumes(applycorev1.Volume().WithName("models").WithEmptyDir(applycorev1.EmptyDirVolumeSource())).
		WithContainers(runtime)
	if tlsOn {
		ps.WithVolumes(applycorev1.Volume().WithName("tls").WithSecret(applycorev1.SecretVolumeSource().WithSecretName(d.tlsSecret())))
	}
	if g {
		args := []string{"guard", "--listen", ":" + strconv.Itoa(d.cfg.Port),
			"--upstream", "127.0.0.1:" + strconv.Itoa(d.cfg.InnerPort), "--open", strings.Join(e.Probes(spec.Model), ","),
			"--drain-timeout", d.cfg.Grace.String()}
		if metricsPort != 0 {
			args = append(args, "--metrics-path", e.Metrics, "--metrics-upstream", "127.0.0.1:"+strconv.Itoa(metricsPort))
		}
		if tlsOn {
			args = append(args, "--tls-cert", TLSPath+"/"+corev1.TLSCertKey, "--tls-key", TLSPath+"/"+corev1.TLSPrivateKeyKey)
		}
		guard := applycorev1.Container().WithName("guard").WithImage(d.cfg.Image).WithArgs(args...).
			WithEnv(token()).WithPorts(servicePort).WithSecurityContext(secure())
		if tlsOn {
			guard.WithVolumeMounts(tlsMount)
		}
		if len(gres) > 0 {
			// None at all when empty: the API server keeps no empty
			// lists, and a pass would find them missing and write again.
			guard.WithResources(applycorev1.ResourceRequirements().WithRequests(gres).WithLimits(gres))
		}
		ps.WithContainers(guard)
	}
	if fetch {
		fenv := []*applycorev1.EnvVarApplyConfiguration{
			applycorev1.EnvVar().WithName("MP_CONTROL_PLANE_URL").WithValue(d.cfg.ControlPlaneURL),
		}
		if d.cfg.ArtifactToken != nil {
			fenv = append(fenv, applycorev1.EnvVar().WithName("MP_AGENT_TOKEN").WithValueFrom(applycorev1.EnvVarSource().
				WithSecretKeyRef(applycorev1.SecretKeySelector().WithName(d.artifactSecret()).WithKey("token"))))
		}
		args := []string{"fetch", "--manifest", spec.Manifest, "--replica", spec.ID, "--dir", ModelsPath}
		if len(spec.Settings) > 0 {
			args = append(args, "--settings", string(spec.Settings))
		}
		if triton {
			args = append(args, "--triton-model", spec.Model, "--gpus", strconv.Itoa(len(spec.Slots)))
		}
		// A namespace quota on cores and memory needs every container to
		// say what it takes; the fetch is light, and a pod's request is
		// the larger of its init containers' and its containers' sum.
		fres := corev1.ResourceList{corev1.ResourceCPU: quantity(1), corev1.ResourceMemory: *resource.NewQuantity(256<<20, resource.BinarySI)}
		ps.WithInitContainers(applycorev1.Container().WithName("fetch").WithImage(d.cfg.Image).WithArgs(args...).WithEnv(fenv...).
			WithResources(applycorev1.ResourceRequirements().WithRequests(fres).WithLimits(fres)).
			WithVolumeMounts(applycorev1.VolumeMount().WithName("models").WithMountPath(ModelsPath)).
			WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
			WithSecurityContext(secure()))
	}
	ps.WithAffinity(applycorev1.Affinity().WithNodeAffinity(applycorev1.NodeAffinity().
		WithRequiredDuringSchedulingIgnoredDuringExecution(applycorev1.NodeSelector().WithNodeSelectorTerms(d.nodeTerm(spec, r.products)))))
	return ps, nil
}

// guarded reports whether a replica's pod runs the guard sidecar: its
// runtime does not check the replica token itself (vLLM, Triton,
// llama-server), and it has one to check. The process driver's rule.
func guarded(e catalog.Entry, spec busapi.ReplicaSpec) bool {
	return !e.ChecksToken && spec.Token != ""
}

// The guard's share of a replica's cores and memory.
var (
	guardCPU    = resource.MustParse("100m")
	guardMemory = resource.MustParse("64Mi")
)

// guardShare splits a replica's cores and memory between the runtime and
// its guard, so that the pod asks for exactly what modelplane placed (a
// namespace quota and the pool's inventory count the pod's sum): the
// guard takes 100m of the cores and 64 MiB (at most half) of the memory.
// A replica without a cores or memory request leaves the guard without
// one too.
func guardShare(res corev1.ResourceList) (runtime, guard corev1.ResourceList) {
	runtime, guard = res.DeepCopy(), corev1.ResourceList{}
	if c, ok := runtime[corev1.ResourceCPU]; ok {
		c.Sub(guardCPU)
		runtime[corev1.ResourceCPU], guard[corev1.ResourceCPU] = c, guardCPU
	}
	if m, ok := runtime[corev1.ResourceMemory]; ok {
		g := guardMemory
		if half := resource.NewQuantity(m.Value()/2, resource.BinarySI); half.Cmp(g) < 0 {
			g = *half
		}
		m.Sub(g)
		runtime[corev1.ResourceMemory], guard[corev1.ResourceMemory] = m, g
	}
	return runtime, guard
}

func secure() *applycorev1.SecurityContextApplyConfiguration {
	return applycorev1.SecurityContext().WithAllowPrivilegeEscalation(false).
		WithCapabilities(applycorev1.Capabilities().WithDrop("ALL"))
}

// nodeTerm keeps a GPU replica on nodes of its GPU type (the operator's
// product labels, as the replica's pod was first made with: a pod's
// affinity cannot change) and a CPU replica off GPU nodes.
func (d *Driver) nodeTerm(spec busapi.ReplicaSpec, products []string) *applycorev1.NodeSelectorTermApplyConfiguration {
	t := applycorev1.NodeSelectorTerm()
	keys := make([]string, 0, len(d.cfg.NodeSelector))
	for k := range d.cfg.NodeSelector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.WithMatchExpressions(applycorev1.NodeSelectorRequirement().WithKey(k).WithOperator(corev1.NodeSelectorOpIn).WithValues(d.cfg.NodeSelector[k]))
	}
	if len(spec.Slots) == 0 {
		return t.WithMatchExpressions(applycorev1.NodeSelectorRequirement().WithKey(LabelGPUPresent).WithOperator(corev1.NodeSelectorOpDoesNotExist))
	}
	if len(products) == 0 {
		products = []string{"none"} // no node of that type: the scheduler says so
	}
	return t.WithMatchExpressions(applycorev1.NodeSelectorRequirement().WithKey(LabelGPUProduct).WithOperator(corev1.NodeSelectorOpIn).WithValues(products...))
}

// memoryResource is package quota's name of host memory (MiB), which
// the agent may not import (it reads the database).
const memoryResource = "memory"

// hardLimits turns a team's quota (package quota's resources: a GPU type
// in GPU equivalents, cpu cores, memory MiB) into ResourceQuota hard
// limits of this pool's kind. Kubernetes counts each MIG profile apart and
// cannot add sevenths of a GPU across them, so each resource gets what
// the whole quota would allow of it alone: a backstop under modelplane's
// own placement, which caps the exact sum.
func (d *Driver) hardLimits(lim map[string]float64) corev1.ResourceList {
	out := corev1.ResourceList{}
	if d.cfg.Kind == KindCPU {
		if v, ok := lim[busapi.CPUType]; ok {
			out["requests.cpu"] = quantity(int64(math.Floor(v)))
			out["limits.cpu"] = quantity(int64(math.Floor(v)))
		}
		if v, ok := lim[memoryResource]; ok {
			q := *resource.NewQuantity(int64(v)<<20, resource.BinarySI)
			out["requests.memory"], out["limits.memory"] = q, q
		}
		return out
	}
	gpus := 0.0
	seen := false
	for typ := range d.current().Products {
		for r, v := range lim {
			if strings.EqualFold(r, typ) {
				gpus += v
				seen = true
			}
		}
	}
	if !seen {
		return out
	}
	out[corev1.ResourceName("requests."+string(ResourceGPU))] = quantity(int64(math.Floor(gpus)))
	for p, c := range migCompute {
		out[corev1.ResourceName("requests."+ResourceMIGPrefix+p)] = quantity(int64(math.Floor(gpus * 7 / float64(c))))
	}
	return out
}

// syncReplica applies each object of r that differs from what the
// cluster holds; once r's pod is gone, it leaves the pod to
// the agent, which replaces the lost replica with a new one.
func (d *Driver) syncReplica(ctx context.Context, r *replica, create bool) error {
	r.writing.Lock()
	defer r.writing.Unlock()
	if r.stopped {
		return nil
	}
	o, err := d.desired(r)
	if err != nil {
		return err
	}
	fm := d.cfg.FieldManager
	opts := metav1.ApplyOptions{FieldManager: fm, Force: true}
	core := d.cfg.Client.CoreV1()
	if live, err := d.ns.Get(r.ns); err != nil || differs(o.namespace, extract(applycorev1.ExtractNamespace(live, fm))) {
		d.wrote()
		if _, err := core.Namespaces().Apply(ctx, o.namespace, opts); err != nil {
			return fmt.Errorf("apply namespace %s: %w", r.ns, err)
		}
	}
	if o.quota != nil {
		if live, err := d.quotas.ResourceQuotas(r.ns).Get(*o.quota.Name); err != nil || differs(o.quota, extract(applycorev1.ExtractResourceQuota(live, fm))) {
			d.wrote()
			if _, err := core.ResourceQuotas(r.ns).Apply(ctx, o.quota, opts); err != nil {
				return fmt.Errorf("apply resource quota: %w", err)
			}
		}
	}
	if live, err := d.accounts.ServiceAccounts(r.ns).Get(ReplicaAccount); err != nil || differs(o.account, extract(applycorev1.ExtractServiceAccount(live, fm))) {
		d.wrote()
		if _, err := core.ServiceAccounts(r.ns).Apply(ctx, o.account, opts); err != nil {
			return fmt.Errorf("apply service account: %w", err)
		}
	}
	if o.artifacts != nil {
		if live, err := d.secrets.Secrets(r.ns).Get(*o.artifacts.Name); err != nil || differs(o.artifacts, extract(applycorev1.ExtractSecret(live, fm))) {
			d.wrote()
			if _, err := core.Secrets(r.ns).Apply(ctx, o.artifacts, opts); err != nil {
				return fmt.Errorf("apply artifact secret: %w", err)
			}
		}
	}
	if o.tls != nil {
		if live, err := d.secrets.Secrets(r.ns).Get(*o.tls.Name); err != nil || differs(o.tls, extract(applycorev1.ExtractSecret(live, fm))) {
			d.wrote()
			if _, err := core.Secrets(r.ns).Apply(ctx, o.tls, opts); err != nil {
				return fmt.Errorf("apply pod tls secret: %w", err)
			}
		}
	}
	// Start reads the policy from the API server: the watch's cache may
	// still hold one the version's last replica has just deleted, whose
	// uid would make the new pod an orphan for the garbage collector.
	var live *netv1.NetworkPolicy
	if create {
		live, err = d.cfg.Client.NetworkingV1().NetworkPolicies(r.ns).Get(ctx, *o.policy.Name, metav1.GetOptions{})
	} else {
		live, err = d.policies.NetworkPolicies(r.ns).Get(*o.policy.Name)
	}
	var uid types.UID
	if err == nil {
		uid = live.UID
	}
	if err != nil || differs(o.policy, extract(applynetv1.ExtractNetworkPolicy(live, fm))) {
		d.wrote()
		pol, err := d.cfg.Client.NetworkingV1().NetworkPolicies(r.ns).Apply(ctx, o.policy, opts)
		if err != nil {
			return fmt.Errorf("apply network policy: %w", err)
		}
		uid = pol.UID
	}
	ref := applymetav1.OwnerReference().WithAPIVersion("networking.k8s.io/v1").WithKind("NetworkPolicy").WithName(*o.policy.Name).
		WithUID(uid).WithBlockOwnerDeletion(true)
	o.token.WithOwnerReferences(ref)
	o.pod.WithOwnerReferences(ref)
	if r.isGone() {
		return nil
	}
	if live, err := d.secrets.Secrets(r.ns).Get(r.pod); err != nil || differs(o.token, extract(applycorev1.ExtractSecret(live, fm))) {
		d.wrote()
		if _, err := core.Secrets(r.ns).Apply(ctx, o.token, opts); err != nil {
			return fmt.Errorf("apply replica token: %w", err)
		}
	}
	livePod, err := d.pods.Pods(r.ns).Get(r.pod)
	if err == nil {
		if livePod.DeletionTimestamp != nil || terminal(livePod) {
			return nil // lost: the agent replaces it
		}
	} else if !create {
		// Only Start makes a pod: one missing from the watch's cache is
		// not seen yet, or gone, which Observe tells the agent.
		return nil
	}
	if err != nil || differs(o.pod, extract(applycorev1.ExtractPod(livePod, fm))) {
		d.wrote()
		if _, err := core.Pods(r.ns).Apply(ctx, o.pod, opts); err != nil {
			if apierrors.IsInvalid(err) && livePod != nil {
				// A field a pod cannot change drifted: the pod is lost
				// and the agent starts a new one.
				d.log.Warn("pod cannot be put back; deleting it", slog.String("pod", r.pod), slog.String("error", err.Error()))
				d.wrote()
				_ = core.Pods(r.ns).Delete(ctx, r.pod, metav1.DeleteOptions{})
				return nil
			}
			return fmt.Errorf("apply pod: %w", err)
		}
	}
	return nil
}

// extract turns an Extract* result into what differs compares; an error
// (no such object) compares as nothing.
func extract[T any](v T, err error) any {
	if err != nil {
		return nil
	}
	return v
}

// differs reports whether the live object's fields owned by the driver
// (an Extract* result) are not what it wants.
func differs(want any, live any) bool {
	if live == nil || reflect.ValueOf(live).IsNil() {
		return true
	}
	a, err1 := json.Marshal(want)
	b, err2 := json.Marshal(live)
	if err1 != nil || err2 != nil {
		return true
	}
	var x, y any
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	return !reflect.DeepEqual(x, y)
}
