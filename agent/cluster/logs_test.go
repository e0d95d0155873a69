package cluster_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/agent"
	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
)

// kubeletLogs plays the part of a kubelet's API that serves container
// logs (GET /containerLogs/NS/POD/CONTAINER), which the API server asks
// for pods/log: the lines a container wrote, with tailLines, sinceTime,
// limitBytes and timestamps as the kubelet reads them; with previous=true
// those of the container's last terminated run.
type kubeletLogs struct {
	mu    sync.Mutex
	lines []stamped // the runtime container's
	// others are other logs' lines by container, with "#previous" for a
	// last terminated run.
	others map[string][]stamped
	asked  []*url.URL
	fail   string // when set, the answer is 400 with this message
}

// writeTo writes a line to another log than the running runtime's.
func (k *kubeletLogs) writeTo(container string, previous bool, at time.Time, text string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.others == nil {
		k.others = map[string][]stamped{}
	}
	key := container
	if previous {
		key += "#previous"
	}
	k.others[key] = append(k.others[key], stamped{at, text})
}

type stamped struct {
	at   time.Time
	text string
}

func (k *kubeletLogs) write(at time.Time, text string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lines = append(k.lines, stamped{at, text})
}

func (k *kubeletLogs) last() *url.URL {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked[len(k.asked)-1]
}

func (k *kubeletLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked = append(k.asked, r.URL)
	if !strings.HasPrefix(r.URL.Path, "/containerLogs/") {
		http.NotFound(w, r)
		return
	}
	if k.fail != "" {
		http.Error(w, k.fail, http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	lines := k.lines
	key := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	if q.Get("previous") == "true" {
		key += "#previous"
	}
	if key != "runtime" {
		lines = k.others[key]
	}
	if v := q.Get("sinceTime"); v != "" {
		since, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var kept []stamped
		for _, l := range lines {
			if !l.at.Before(since) {
				kept = append(kept, l)
			}
		}
		lines = kept
	}
	if v := q.Get("tailLines"); v != "" {
		n, _ := strconv.Atoi(v)
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if q.Get("timestamps") == "true" {
			b.WriteString(l.at.UTC().Format(time.RFC3339Nano) + " ")
		}
		b.WriteString(l.text + "\n")
	}
	out := b.String()
	if v := q.Get("limitBytes"); v != "" {
		n, _ := strconv.Atoi(v)
		out = out[:min(n, len(out))]
	}
	_, _ = w.Write([]byte(out))
}

// TestReplicaLogReadFromThePodThroughTheAPIServer: a pool's replica log
// is its pod's runtime container log, read through the real API server
// (pods/log, the agent's one extra right), which asks the node's kubelet,
// played here by an HTTPS server on the node's daemon port. The last
// lines come with tailLines; a follower asking from the chunk's Next gets
// each later line once (sinceTime in whole seconds, the lines up to the
// position dropped), at most max bytes in whole lines; previous and the
// container reach the kubelet (a crash loop's crash, the fetch init
// container), a container the pod does not have is the API server's
// refusal; a kubelet's refusal comes back as the error with its reason.
func TestReplicaLogReadFromThePodThroughTheAPIServer(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	logs := &kubeletLogs{}
	kubelet := httptest.NewTLSServer(logs)
	t.Cleanup(kubelet.Close)
	port, err := strconv.Atoi(kubelet.URL[strings.LastIndex(kubelet.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	d, _ := pool(t, c, cluster.KindCPU, kubetest.Node{CPU: "8", Memory: "16Gi", KubeletPort: int32(port)})
	spec := cpuSpec("scoring-v1-r1", 1, 512)
	if _, err := d.Start(t.Context(), spec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := c.WaitScheduled(t, cluster.Namespace(d.NamespacePrefix(), "risk"), podOf(t, c, spec, d).Name)

	t0 := time.Date(2026, 12, 5, 4, 0, 0, 100, time.UTC)
	logs.write(t0, "loading model")
	logs.write(t0.Add(time.Millisecond), "warming up")
	logs.write(t0.Add(1500*time.Millisecond), "ready on :8000")

	read := func(offset int64, tail, max int) busapi.LogChunk {
		t.Helper()
		ch, err := d.ReadLog(busapi.LogRequest{Replica: spec.ID, Offset: offset, Tail: tail}, max)
		if err != nil {
			t.Fatalf("read log (offset %d, tail %d): %v", offset, tail, err)
		}
		return ch
	}
	ch := read(-1, 2, busapi.MaxLogChunk)
	if ch.Data != "warming up\nready on :8000\n" || ch.Next != t0.Add(1500*time.Millisecond).UnixNano() {
		t.Errorf("last 2 lines = %q next %d, want the last two and the last line's position", ch.Data, ch.Next)
	}
	u := logs.last()
	if want := "/containerLogs/" + pod.Namespace + "/" + pod.Name + "/runtime"; u.Path != want ||
		u.Query().Get("tailLines") != "2" || u.Query().Get("timestamps") != "true" {
		t.Errorf("the kubelet was asked %s, want %s?tailLines=2&timestamps=true", u, want)
	}

	// Following: nothing new, then two lines, one in the same second as
	// the position (sinceTime has whole seconds), each given once.
	next := ch.Next
	if ch = read(next, 0, busapi.MaxLogChunk); ch.Data != "" || ch.Next != next {
		t.Errorf("nothing new = %q next %d, want none and the same position", ch.Data, ch.Next)
	}
	q := logs.last().Query()
	if q.Get("sinceTime") != "2026-12-05T04:00:01Z" || q.Get("limitBytes") != strconv.Itoa(2*busapi.MaxLogChunk) {
		t.Errorf("follow asked the kubelet %v, want sinceTime the position's second and limitBytes twice a chunk", q)
	}
	logs.write(t0.Add(1700*time.Millisecond), "request 1")
	logs.write(t0.Add(3*time.Second), "request 2")
	ch = read(next, 0, busapi.MaxLogChunk)
	if ch.Data != "request 1\nrequest 2\n" || ch.Next != t0.Add(3*time.Second).UnixNano() {
		t.Errorf("new lines = %q next %d, want each new line once", ch.Data, ch.Next)
	}

	// From the start, a chunk at most max bytes of whole lines; the rest
	// follows from its Next.
	ch = read(0, 0, 25)
	if ch.Data != "loading model\nwarming up\n" {
		t.Errorf("first 25 bytes = %q, want the two whole lines that fit", ch.Data)
	}
	if ch = read(ch.Next, 0, busapi.MaxLogChunk); ch.Data != "ready on :8000\nrequest 1\nrequest 2\n" {
		t.Errorf("the rest = %q", ch.Data)
	}
	if ch = read(-1, 0, busapi.MaxLogChunk); ch.Data != "" || ch.Next != t0.Add(3*time.Second).UnixNano() {
		t.Errorf("tail 0 = %q next %d, want no line and the end's position", ch.Data, ch.Next)
	}

	// A crash loop's crash and the pod's other containers, as `kubectl
	// logs --previous -c` asks: the container in the path, previous=true.
	logs.writeTo("runtime", true, t0, "panic: out of memory")
	logs.writeTo("fetch", false, t0, "model.onnx: sha256 mismatch")
	logs.writeTo("fetch", true, t0, "model.onnx: connection refused")
	for _, tc := range []struct {
		container string
		previous  bool
		want      string
	}{
		{"", true, "panic: out of memory\n"},
		{busapi.LogContainerRuntime, true, "panic: out of memory\n"},
		{busapi.LogContainerFetch, false, "model.onnx: sha256 mismatch\n"},
		{busapi.LogContainerFetch, true, "model.onnx: connection refused\n"},
	} {
		ch, err := d.ReadLog(busapi.LogRequest{Replica: spec.ID, Offset: -1, Tail: 10, Previous: tc.previous, Container: tc.container}, busapi.MaxLogChunk)
		if err != nil || ch.Data != tc.want {
			t.Errorf("container %q previous %v = %q, %v; want %q", tc.container, tc.previous, ch.Data, err, tc.want)
		}
		u, container := logs.last(), tc.container
		if container == "" {
			container = busapi.LogContainerRuntime
		}
		if want := "/containerLogs/" + pod.Namespace + "/" + pod.Name + "/" + container; u.Path != want ||
			(u.Query().Get("previous") == "true") != tc.previous || u.Query().Get("tailLines") != "10" {
			t.Errorf("container %q previous %v: the kubelet was asked %s, want %s?previous=%v&tailLines=10", tc.container, tc.previous, u, want, tc.previous)
		}
	}
	count := func() int { logs.mu.Lock(); defer logs.mu.Unlock(); return len(logs.asked) }
	asked := count()
	if _, err := d.ReadLog(busapi.LogRequest{Replica: spec.ID, Offset: -1, Tail: 10, Container: "sidecar"}, busapi.MaxLogChunk); !errors.Is(err, agent.ErrLogUnsupported) {
		t.Errorf("a container the pod cannot have = %v, want agent.ErrLogUnsupported", err)
	}
	if count() != asked {
		t.Error("a container the pod cannot have was asked of the kubelet")
	}
	// The built-in runtime checks the token itself: its pod has no guard,
	// and the API server says so without asking the kubelet.
	if _, err := d.ReadLog(busapi.LogRequest{Replica: spec.ID, Offset: -1, Tail: 10, Container: busapi.LogContainerGuard}, busapi.MaxLogChunk); err == nil ||
		!strings.Contains(err.Error(), "container guard is not valid") {
		t.Errorf("the guard of a pod without one = %v, want the API server's refusal", err)
	}
	if count() != asked {
		t.Error("a container the pod does not have was asked of the kubelet")
	}

	logs.mu.Lock()
	logs.fail = `container "runtime" in pod is waiting to start: ContainerCreating`
	logs.mu.Unlock()
	if _, err := d.ReadLog(busapi.LogRequest{Replica: spec.ID, Offset: -1, Tail: 10}, busapi.MaxLogChunk); err == nil || !strings.Contains(err.Error(), "waiting to start") {
		t.Errorf("a kubelet's refusal = %v, want its reason", err)
	}
	if _, err := d.ReadLog(busapi.LogRequest{Replica: "not-a-replica", Offset: -1, Tail: 10}, busapi.MaxLogChunk); err == nil || !strings.Contains(err.Error(), "no pod") {
		t.Errorf("an unknown replica = %v, want an error naming it", err)
	}
}
