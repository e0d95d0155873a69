package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"modelplane/internal/wait"
)

// SkipEnv, set to 1, lets Shared skip a test when the programs are not
// built instead of failing it. `make test` builds them and never sets it,
// so there the tests always run; it is for a developer running one
// package's other tests on a machine that has not built them yet.
const SkipEnv = "MP_KUBETEST_SKIP"

var shared struct {
	once sync.Once
	c    *Cluster
	dir  string
	err  error
}

// Shared returns the test process's cluster, starting it on first use: one
// cluster per test package keeps the startups few. Tests keep apart by
// working in namespaces of their own (Namespace) and on nodes of their own
// (AddNode names them uniquely); a package that calls Shared calls Main
// from its TestMain so the cluster stops when the tests end.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "kubetest-")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.c, shared.err = Start(ctx, shared.dir)
	})
	if errors.Is(shared.err, ErrNoBinaries) && os.Getenv(SkipEnv) == "1" {
		t.Skipf("%v; skipped because %s=1", shared.err, SkipEnv)
	}
	if shared.err != nil {
		t.Fatalf("kubetest: %v", shared.err)
	}
	return shared.c
}

// Main runs the package's tests and stops the shared cluster, keeping its
// directory when a test failed so its logs can be read. Call it from
// TestMain: func TestMain(m *testing.M) { kubetest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	StopShared(code)
	os.Exit(code)
}

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for the test, named after it, and deletes
// it when the test ends (the namespace controller then deletes what is in
// it). It returns once the namespace's default ServiceAccount exists, so
// pods can be created in it at once.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 50 {
		base = base[:50]
	}
	name := fmt.Sprintf("%s-%d", base, c.nameSeq.Add(1))
	ctx := context.Background()
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := c.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("kubetest: delete namespace %s: %v", name, err)
		}
	})
	c.WaitServiceAccount(t, name, "default")
	return name
}

// WaitServiceAccount waits until the ServiceAccount exists.
func (c *Cluster) WaitServiceAccount(t testing.TB, namespace, name string) {
	t.Helper()
	wait.Eventually(t, WaitTimeout, func() bool {
		_, err := c.client.CoreV1().ServiceAccounts(namespace).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil
	}, "kubetest: ServiceAccount %s/%s never appeared", namespace, name)
}

// ServiceAccountToken returns a token for the ServiceAccount, issued by the
// API server through the TokenRequest API as the kubelet would mount it
// into a pod, valid for an hour. The ServiceAccount must exist.
func (c *Cluster) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	hour := int64(3600)
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// ServiceAccountConfig is a client configuration that acts as the
// ServiceAccount (user system:serviceaccount:NAMESPACE:NAME), so what it
// may do is exactly what RBAC grants that account.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.ServiceAccountToken(t, namespace, name),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		QPS:             200, Burst: 400,
	}
}

// ServiceAccountKubeconfig writes a kubeconfig acting as the
// ServiceAccount into the test's temporary directory and returns its path,
// for a program that takes --kubeconfig.
func (c *Cluster) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	err := writeKubeconfigFile(path, c.URL, c.pki.caPEM, &clientcmdapi.AuthInfo{Token: c.ServiceAccountToken(t, namespace, name)})
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return path
}
