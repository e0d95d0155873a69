// Package kubetest runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager as child
// processes on loopback, built from source at the versions tools/kube/go.mod
// pins (scripts/kube-tools.sh, which `make test` runs through
// scripts/install-deps.sh). There is no kubelet and no container runtime:
// the test plays the kubelet, registering Node objects and writing pod
// status through the status subresource. Everything else is the real
// thing: the scheduler binds pods (so Unschedulable is its own verdict),
// the controllers turn Deployments into ReplicaSets and pods, compute
// ResourceQuota usage, collect garbage by owner references and delete
// namespaces, and the API server authorises with RBAC, issues
// ServiceAccount tokens and keeps an audit log of writes.
//
// # The API for tests (stable; the cluster agent's driver tests use it)
//
//	func TestMain(m *testing.M) { kubetest.Main(m) } // stops the shared cluster
//	// or, in a TestMain that stops other harnesses too:
//	code := m.Run(); kubetest.StopShared(code); os.Exit(code)
//
//	c := kubetest.Shared(t)        // the package's one cluster, started on first use
//	ns := c.Namespace(t)           // a namespace of the test's own, deleted at its end
//	c.Client()                     // kubernetes.Interface as an administrator
//	c.Config()                     // *rest.Config as an administrator (a copy)
//	c.AdminKubeconfig()            // a kubeconfig file for the same
//	c.URL                          // https://127.0.0.1:PORT
//
//	// Acting as a ServiceAccount (RBAC decides what it may do):
//	c.ServiceAccountToken(t, ns, name) string
//	c.ServiceAccountConfig(t, ns, name) *rest.Config
//	c.ServiceAccountKubeconfig(t, ns, name) string // a file, for --kubeconfig
//	c.WaitServiceAccount(t, ns, name)
//
//	// Playing the kubelet: nodes.
//	n := c.AddNode(t, kubetest.Node{GPUs: 8, GPUProduct: "NVIDIA-H100-80GB-HBM3",
//		GPUMemoryMiB: 81559, MIG: map[string]int{"1g.10gb": 7}, CPU: "64", Memory: "512Gi",
//		Labels: map[string]string{...}, Taints: nil}) // deleted at the test's end
//	kubetest.ResourceGPU, kubetest.MIGPrefix+"1g.10gb", kubetest.LabelGPUProduct, …
//
//	// Playing the kubelet: pods (each returns the pod as stored).
//	c.WaitScheduled(t, ns, name) *corev1.Pod
//	c.WaitUnschedulable(t, ns, name) corev1.PodCondition // Reason Unschedulable, scheduler's message
//	c.WaitPod(t, ns, name, what, func(*corev1.Pod) bool) *corev1.Pod
//	c.MarkRunning(t, pod, ip)      // Running and Ready on ip ("" = c.NextPodIP(), 127.x.y.z)
//	c.SetReady(t, pod, ready)      // a readiness probe passing or failing
//	c.OOMKilled(t, pod, container) // terminated OOMKilled, exit 137, restarted
//	c.CrashLoopBackOff(t, pod, container)
//	c.ImagePullBackOff(t, pod, container)
//	c.SetContainerState(t, pod, container, state, last, restarted)
//	c.Evict(t, pod)                // Failed, reason Evicted
//	c.UpdatePodStatus(ctx, ns, name, func(*corev1.Pod)) // any other status change
//	c.AutoRun(t, match, onRunning) // mark every bound matching pod running, until the test ends
//
//	// Counting writes (for "a second reconcile makes zero writes"):
//	mark := c.AuditMark(t)
//	events := c.AuditSince(t, mark) // []AuditEvent: Verb, User.Username, ObjectRef, RequestURI, …
//
// A bound pod that is deleted is removed for good at once, as a kubelet
// does once its containers stop (the harness watches for that all the
// time), so namespaces and garbage collection finish. Pods whose node is
// deleted are removed by the pod garbage collector. The node lifecycle
// controller is off: no kubelet posts heartbeats, and it would otherwise
// mark every node NotReady and evict its pods; a test that wants a lost
// machine deletes the node or evicts or deletes the pod itself.
//
// Tests share the cluster, so they keep apart: each works in namespaces
// from Namespace, and a test that schedules pods gives its nodes a GPU
// product (or labels) of its own and selects them, since nodes are
// cluster-wide and the scheduler may use any that fits.
//
// Writes are counted from the API server's audit log (Metadata level, one
// event per completed write; reads are not logged). AuditMark and
// AuditSince find "now" in the log by sending a request with an Audit-ID
// of their own and waiting until it is logged, so a count never depends
// on how long the API server takes to write its log.
//
// # Why a launcher of its own, not controller-runtime's envtest
//
// envtest starts etcd and kube-apiserver only; the scheduler and the
// controller manager, which the tests need (binding, ReplicaSets, quota
// usage, garbage collection, namespace deletion), would have to be
// started beside it anyway, and it would bring controller-runtime into the
// product's go.mod for a few hundred lines of process handling that
// internal/pgproc and internal/chproc already do this way. The launcher
// also chooses every flag itself: client certificates from a CA of its
// own (an administrator in system:masters, and the scheduler and
// controller manager as the users their bootstrap RBAC roles name), the
// ServiceAccount signing key, the audit policy, and
// --endpoint-reconciler-type=none, which loopback needs.
//
// # When the programs are missing
//
// Start returns ErrNoBinaries, and Shared fails the test naming
// scripts/kube-tools.sh, unless MP_KUBETEST_SKIP=1, when it skips it. The
// programs are looked for in $MP_KUBE_BIN, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/kube-v1.37.2/bin.
//
// The package is for tests only: nothing outside _test.go files and test
// harnesses may import it.
package kubetest
