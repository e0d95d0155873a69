package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"modelplane/internal/freeport"
)

// Version is the Kubernetes release scripts/kube-tools.sh builds and the
// directory of the cache it builds into.
const Version = "v1.37.2"

// Programs are the control-plane programs a cluster runs, by file name.
var Programs = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}

// ErrNoBinaries is returned by Start when the programs are not built.
var ErrNoBinaries = errors.New("kubetest: the Kubernetes control plane is not built: run scripts/kube-tools.sh (make test does, through scripts/install-deps.sh test)")

// BinDir is where the programs are looked for: $MP_KUBE_BIN, or the cache
// scripts/kube-tools.sh builds into,
// ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/kube-<Version>/bin.
func BinDir() string {
	if d := os.Getenv("MP_KUBE_BIN"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "modelplane", "kube-"+Version, "bin")
}

// Cluster is a running control plane: etcd, kube-apiserver, kube-scheduler
// and kube-controller-manager as child processes on loopback, with no
// kubelet (the test plays it: see AddNode and MarkRunning).
type Cluster struct {
	// Dir holds the certificates, kubeconfigs, etcd's data, the audit log
	// and each program's log (name.log).
	Dir string
	// URL is the API server's https address on 127.0.0.1.
	URL string

	pki         *pki
	admin       *rest.Config
	client      kubernetes.Interface
	auditPath   string
	procs       []*proc // in start order; stopped in reverse
	stopKubelet context.CancelFunc
	kubeletDone chan struct{}

	ipSeq   atomic.Int64
	nameSeq atomic.Int64
	stopped sync.Once
}

// Start starts a cluster with its files under dir, which must exist, and
// returns once the API server is ready, the scheduler and controller
// manager hold their leases and the default ServiceAccount exists. It
// returns ErrNoBinaries when the programs are missing from BinDir.
func Start(ctx context.Context, dir string) (c *Cluster, err error) {
	bin := BinDir()
	for _, p := range Programs {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return nil, fmt.Errorf("%w (looked in %s)", ErrNoBinaries, bin)
		}
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, auditPath: filepath.Join(dir, "audit.log")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.pki, err = newPKI(dir); err != nil {
		return nil, err
	}
	if err := c.pki.serviceAccountKey(); err != nil {
		return nil, err
	}
	if _, _, err := c.pki.issue("apiserver", "kube-apiserver", nil, true); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}

	// etcd, on two free loopback ports, without fsync: its data lives as
	// long as the test process, and a shared CI machine's disk is slow.
	etcdClient, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	etcdPeer, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := startProc(dir, "etcd", filepath.Join(bin, "etcd"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn")
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, etcd)
	if err := waitFor(ctx, time.Minute, c.procs, "etcd /health", func() bool {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return nil, err
	}

	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	apiserver, err := startProc(dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+clientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+c.pki.path("apiserver.crt"),
		"--tls-private-key-file="+c.pki.path("apiserver.key"),
		"--client-ca-file="+c.pki.path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.path("sa.pub"),
		"--service-account-signing-key-file="+c.pki.path("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// Without this the API server keeps the kubernetes Service's
		// endpoints pointing at its advertise address, which on loopback
		// is refused.
		"--endpoint-reconciler-type=none",
		// Nodes are all on 127.0.0.1 (their InternalIP); their host names
		// resolve nowhere. pods/log goes to a node's kubelet port there,
		// without verifying its certificate (no kubelet CA is given).
		"--kubelet-preferred-address-types=InternalIP",
		// The admission plugin taints every new node not-ready until the
		// node lifecycle controller, which is off (see below), sees it
		// ready; AddNode registers nodes ready.
		"--disable-admission-plugins=TaintNodesByCondition",
		"--audit-policy-file="+filepath.Join(dir, "audit-policy.yaml"),
		"--audit-log-path="+c.auditPath,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--profiling=false")
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, apiserver)

	adminKubeconfig, err := c.writeKubeconfig("admin", "kubetest-admin", []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	if c.admin, err = clientcmd.BuildConfigFromFlags("", adminKubeconfig); err != nil {
		return nil, err
	}
	c.admin.QPS, c.admin.Burst = 200, 400
	if c.client, err = kubernetes.NewForConfig(c.admin); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 2*time.Minute, c.procs, "kube-apiserver /readyz", func() bool {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	}); err != nil {
		return nil, err
	}

	// The scheduler and controller manager each act as the user their
	// bootstrap RBAC role is bound to, and hold a leader lease, which is
	// how Start knows they have started. The lease is renewed seldom so
	// that the audit log is not filled with renewals.
	lease := []string{"--leader-elect=true", "--leader-elect-lease-duration=60s",
		"--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s"}
	schedKubeconfig, err := c.writeKubeconfig("kube-scheduler", "system:kube-scheduler", nil)
	if err != nil {
		return nil, err
	}
	sched, err := startProc(dir, "kube-scheduler", filepath.Join(bin, "kube-scheduler"), append([]string{
		"--kubeconfig=" + schedKubeconfig,
		"--authentication-kubeconfig=" + schedKubeconfig,
		"--authorization-kubeconfig=" + schedKubeconfig,
		"--secure-port=0",
	}, lease...)...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, sched)

	cmKubeconfig, err := c.writeKubeconfig("kube-controller-manager", "system:kube-controller-manager", nil)
	if err != nil {
		return nil, err
	}
	cm, err := startProc(dir, "kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), append([]string{
		"--kubeconfig=" + cmKubeconfig,
		"--authentication-kubeconfig=" + cmKubeconfig,
		"--authorization-kubeconfig=" + cmKubeconfig,
		"--secure-port=0",
		// Each controller acts as a ServiceAccount of its own, as in a
		// kubeadm cluster; the bootstrap roles are written for that.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki.path("sa.key"),
		"--root-ca-file=" + c.pki.path("ca.crt"),
		// There is no kubelet to post heartbeats: the node lifecycle
		// controller would mark every node NotReady after its grace
		// period, taint it and evict its pods. A test removes a node or
		// deletes a pod itself to stand for a lost machine.
		"--controllers=*,-node-lifecycle-controller",
	}, lease...)...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, cm)

	if err := waitFor(ctx, 2*time.Minute, c.procs, "the scheduler's and controller manager's leases and the default ServiceAccount", func() bool {
		for _, name := range []string{"kube-scheduler", "kube-controller-manager"} {
			l, err := c.client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil || !held(l) {
				return false
			}
		}
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return nil, err
	}

	kctx, cancel := context.WithCancel(context.Background())
	c.stopKubelet, c.kubeletDone = cancel, make(chan struct{})
	go func() {
		defer close(c.kubeletDone)
		c.finalizeDeletedPods(kctx)
	}()
	return c, nil
}

func held(l *coordinationv1.Lease) bool {
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
}

// waitFor polls cond until it holds, one of procs exits (the error then
// carries the end of its log), ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, procs []*proc, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, p := range procs {
			if !p.running() {
				return fmt.Errorf("waiting for %s: %w", what, p.failure())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: %s not ready within %v (logs in %s)", what, timeout, filepath.Dir(procs[0].logPath))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// writeKubeconfig issues a client certificate for user in groups and
// writes a kubeconfig for it, name.kubeconfig, returning its path.
func (c *Cluster) writeKubeconfig(name, user string, groups []string) (string, error) {
	cert, key, err := c.pki.issue(name, user, groups, false)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, writeKubeconfigFile(path, c.URL, c.pki.caPEM, &clientcmdapi.AuthInfo{
		ClientCertificateData: cert, ClientKeyData: key})
}

func writeKubeconfigFile(path, server string, ca []byte, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["kubetest"] = auth
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// Config is a client configuration for an administrator (a client
// certificate in system:masters, which RBAC lets do anything). Each call
// returns a copy the caller may change.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.admin) }

// Client is a clientset acting as the administrator.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// AdminKubeconfig is the path of the administrator's kubeconfig file, for
// a program that takes --kubeconfig.
func (c *Cluster) AdminKubeconfig() string { return filepath.Join(c.Dir, "admin.kubeconfig") }

// Stop stops the programs in reverse order and waits for them to exit; the
// caller removes Dir. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopped.Do(func() {
		if c.stopKubelet != nil {
			c.stopKubelet()
			<-c.kubeletDone
		}
		for i := len(c.procs) - 1; i >= 0; i-- {
			c.procs[i].stop()
		}
	})
}
