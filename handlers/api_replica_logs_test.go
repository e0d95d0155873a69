package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/agent/process"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
	"modelplane/replicalog"
)

// TestReplicaLogsOfAPodsOtherRuns: previous and container name another of
// a pool replica's logs (the crash of a crash loop, the fetch init
// container, the guard). Bad values answer 400 before any node is asked;
// good ones reach the replica's node over NATS, here a real agent with the
// process driver, whose replica has one log with every run appended, so
// the API answers 400 with the agent's reason and the log page shows it.
// The endpoint page links a replica whose pod is in CrashLoopBackOff to
// its crash's log (previous=1, with the init container when it is the one
// crashing), and the log page links to a pod's other logs.
func TestReplicaLogsOfAPodsOtherRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, nc := natstest.Connect(t)
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.Set.Logs = replicalog.New(nc, d.Set.Endpoints) }})
	e.seedFleet(t)
	rep := e.replicas(t, "risk-endpoint")[0]
	base := "/endpoints/risk-endpoint/replicas/" + rep.Name + "/logs"
	key := e.Keys["risk-viewer"]

	for _, q := range []string{"previous=2", "container=sidecar", "previous=yes&container=fetch"} {
		r := e.call(t, key, http.MethodGet, base+"?"+q, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s = %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := e.call(t, key, http.MethodGet, base+"?container=sidecar", nil); !strings.Contains(string(r.body), "runtime, fetch, guard") {
		t.Errorf("a bad container = %s, want the containers named", r.body)
	}

	// The replica's node: a real agent, its desired state delivered as the
	// relay would.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(ns.ClientURL(), natstest.Agent(t, rep.Node)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	drv, err := process.New(process.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		drv.Close(ctx)
	})
	a, err := agent.New(agent.Config{Node: rep.Node, CPUCores: 4, MemoryMB: 4096, StateDir: t.TempDir(), Driver: drv}, anc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	desired, _ := json.Marshal(busapi.Desired{Node: rep.Node, Generation: 1, Replicas: []busapi.ReplicaSpec{{ID: rep.Name,
		Endpoint: "risk-endpoint", Version: rep.Version, Runtime: "xgboost", CPUCores: 1, MemoryMB: 256}}})
	if _, err := kv.Put(ctx, rep.Node, desired); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"previous=1", "container=fetch", "container=guard&previous=1"} {
		var r response
		wait.Eventually(t, time.Minute, func() bool {
			r = e.call(t, key, http.MethodGet, base+"?"+q, nil)
			return r.status == http.StatusBadRequest
		}, "%s never answered 400: %v", q, wait.Show(func() any { return []any{r.status, string(r.body)} }))
		if !strings.Contains(string(r.body), "every run of its runtime is appended") {
			t.Errorf("%s = %s, want the node's reason", q, r.body)
		}
	}
	viewer := e.signIn(t, "risk-viewer@example.com")
	page := e.portal(t, viewer, http.MethodGet, "/endpoints/risk-endpoint/replicas/"+rep.Name+"/log?previous=1", nil)
	if page.status != http.StatusOK || !strings.Contains(page.String(), "every run of its runtime is appended") ||
		!strings.Contains(page.String(), `<strong id="replica-log-which">runtime, last terminated run</strong>`) {
		t.Errorf("log page of the previous run = %d:\n%.3000s\nwant the node's reason under the log's name", page.status, page)
	}
	for _, link := range []string{"/log?container=fetch&amp;previous=1", "/log?container=guard", "/log?previous=1&amp;fragment=1"} {
		if !strings.Contains(page.String(), link) {
			t.Errorf("log page lacks the link %s", link)
		}
	}

	for _, tc := range []struct{ reason, link string }{
		{busapi.ContainerReason(false, busapi.LogContainerRuntime, "CrashLoopBackOff (last exit 1, Error): back-off 40s restarting failed container"), "/log?previous=1"},
		{busapi.ContainerReason(true, busapi.LogContainerFetch, "CrashLoopBackOff (last exit 1, Error: model.onnx: sha256 mismatch)"), "/log?container=fetch&amp;previous=1"},
		{busapi.ContainerReason(false, busapi.LogContainerRuntime, "OOMKilled (exit 137)"), ""},
	} {
		e.heartbeat(t, rep.Node, busapi.ReplicaStatus{ID: rep.Name, State: busapi.StateFailed, Reason: tc.reason, Failures: 1})
		page := e.portal(t, viewer, http.MethodGet, "/endpoints/risk-endpoint/replicas", nil).String()
		crash := strings.Contains(page, `class="crash-log"`)
		if tc.link == "" && crash {
			t.Errorf("%s: a link to a crash's log, want none", tc.reason)
		}
		if want := `href="/endpoints/risk-endpoint/replicas/` + rep.Name + tc.link + `"`; tc.link != "" && (!crash || !strings.Contains(page, want)) {
			t.Errorf("%s: replicas section lacks %s:\n%.3000s", tc.reason, want, page)
		}
	}
}
