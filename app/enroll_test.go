package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/enrollment"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
	"modelplane/trust"
)

// TestRotationKeepsTheAgentConnected: an agent enrolled through the join
// path rotates its credentials while a replica serves. Its connection moves
// to the new NATS user within the grace, stays up when the sweep revokes
// the old one, keeps heartbeating, and the replica is never restarted; the
// new credentials are kept 0600 in the state directory.
func TestRotationKeepsTheAgentConnected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	ns := natstest.New(t)
	a := natstest.Auth(t)
	cp, err := nats.Connect(ns.ClientURL(), natstest.ControlPlane(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	js, err := jetstream.New(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	snc, err := nats.Connect(ns.ClientURL(), sys.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snc.Close)
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	svc := enrollment.New(pgtest.New(t), a, func(ctx context.Context) error { return a.Push(ctx, snc) }, clock)

	const node = "rot-1"
	creds, err := enrollDevNode(ctx, svc, node, trust.Address{Host: "127.0.0.1", PortFirst: 1, PortLast: 65535})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := saveNodeCreds(dir, creds); err != nil {
		t.Fatal(err)
	}
	sess, err := newNodeSession(localSource{svc}, dir, creds, log)
	if err != nil {
		t.Fatal(err)
	}
	var reconnects atomic.Int32
	closed := make(chan struct{})
	nc, err := nats.Connect(ns.ClientURL(), append(sess.Options(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnects.Add(1) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sess.Attach(nc)

	beats, err := cp.SubscribeSync(busapi.NodeStatusSubject(node))
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	desired, _ := json.Marshal(busapi.Desired{Node: node, Generation: 2, Replicas: []busapi.ReplicaSpec{{
		ID: "r1", Team: "risk", Endpoint: "fraud-scoring", Model: "fraud", Version: "v1", Task: "classification",
		GPUType: "A100-80GB", Profile: busapi.ProfileFull, Slots: []busapi.Slot{{GPU: 0}},
		Sim: json.RawMessage(`{"latency_ms":{"p50":2,"p99":5},"score":{"mean":0.3,"sd":0.1},"class_balance":{"legit":0.9,"fraud":0.1}}`),
	}}})
	if _, err := kv.Put(ctx, node, desired); err != nil {
		t.Fatal(err)
	}
	gpus, err := agent.ParseInventory([]string{"1xA100-80GB"}, "")
	if err != nil {
		t.Fatal(err)
	}
	driver := agent.NewSimDriver(agent.SimDriverConfig{Log: log})
	t.Cleanup(func() { driver.Close(context.Background()) })
	ag, err := agent.New(agent.Config{Node: node, GPUs: gpus, StateDir: filepath.Join(dir, "agent"), Driver: driver,
		Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond}, nc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ag.Stop)
	ready := func(what string) {
		t.Helper()
		wait.Eventually(t, 30*time.Second, func() bool {
			m, err := beats.NextMsg(100 * time.Millisecond)
			if err != nil {
				return false
			}
			var st busapi.NodeStatus
			return json.Unmarshal(m.Data, &st) == nil && st.Generation == 2 && len(st.Replicas) == 1 && st.Replicas[0].State == busapi.StateReady
		}, "no heartbeat with the replica ready %s", what)
	}
	ready("before the rotation")
	running := driver.Running()
	if len(running) != 1 {
		t.Fatalf("%d replicas running, want 1", len(running))
	}
	replica := running[0]

	if err := sess.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return reconnects.Load() >= 1 && nc.IsConnected() },
		"the connection did not come back on the rotated credential")
	after := reconnects.Load()
	if sess.ArtifactToken() == creds.ArtifactToken {
		t.Error("the artifact token did not change")
	}
	kept, ok, err := loadNodeCreds(dir)
	if err != nil || !ok || kept.ArtifactToken != sess.ArtifactToken() {
		t.Errorf("kept credentials %v (ok %v, err %v) are not the rotated ones", kept.Node, ok, err)
	}
	if st, err := os.Stat(filepath.Join(dir, nodeCredsFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v (err %v), want 0600", st.Mode().Perm(), err)
	}

	// The grace ends: the old user is revoked; this connection is not it.
	clock.Advance(enrollment.DefaultRotationGrace)
	if n, err := svc.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep revoked %d (err %v), want 1", n, err)
	}
	old, err := bus.ParseCredential([]byte(creds.NATSCreds))
	if err != nil {
		t.Fatal(err)
	}
	if oc, err := nats.Connect(ns.ClientURL(), append(old.Options(), nats.NoReconnect())...); err == nil {
		oc.Close()
		t.Error("the pre-rotation credential still connects after the sweep")
	}
	for range 3 { // drain what was sent before the sweep
		_, _ = beats.NextMsg(10 * time.Millisecond)
	}
	ready("after the sweep")
	select {
	case <-closed:
		t.Fatal("the agent's connection closed")
	default:
	}
	if got := reconnects.Load(); got != after || !nc.IsConnected() {
		t.Errorf("reconnects %d after the sweep (was %d), connected %v: the revocation hit the live connection", got, after, nc.IsConnected())
	}
	if running := driver.Running(); len(running) != 1 || running[0] != replica {
		t.Errorf("replicas after the rotation %v; want the same one, never restarted", running)
	}
}

// TestEnrolledAgentNeedsNoCredsFile: an agent with a join token, or with
// credentials a join kept in its state directory, starts without
// MP_NATS_CREDS or MP_AGENT_TOKEN; a join token needs the control plane's
// URL to be exchanged at.
func TestEnrolledAgentNeedsNoCredsFile(t *testing.T) {
	t.Parallel()
	base := func() AgentConfig {
		return AgentConfig{NATS: bus.ClientConfig{URL: "nats://127.0.0.1:4222"}, Driver: "sim", Node: "n1", GPUs: []string{"1xA100-80GB"},
			StateDir: t.TempDir(), Lease: 15 * time.Second, Heartbeat: 5 * time.Second, LogLevel: "info", CacheBytes: 1 << 30}
	}
	c := base()
	if _, err := c.agentConfig(); err == nil || !strings.Contains(err.Error(), "MP_NATS_CREDS") {
		t.Errorf("no credential at all: err %v, want MP_NATS_CREDS named", err)
	}
	c = base()
	c.Join = "mpj_x"
	if _, err := c.agentConfig(); err == nil || !strings.Contains(err.Error(), "--control-plane") || strings.Contains(err.Error(), "MP_NATS_CREDS") {
		t.Errorf("--join without --control-plane: err %v", err)
	}
	c.ControlPlaneURL = "http://control-plane.example:8080"
	if _, err := c.agentConfig(); err != nil {
		t.Errorf("--join with --control-plane: %v", err)
	}
	c = base()
	c.ControlPlaneURL = "http://control-plane.example:8080"
	if err := saveNodeCreds(c.StateDir, enrollment.Credentials{Node: "n1", NATSCreds: "x", ArtifactToken: "mpn_x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.agentConfig(); err != nil {
		t.Errorf("kept credentials: %v", err)
	}
}

// TestAgentJoinsOnceThenStartsFromItsState: `agent --join` exchanges the
// token at the control plane's HTTP API once and keeps the credentials;
// the next start needs no token; a used, expired or revoked token is
// refused with what happened and what to do.
func TestAgentJoinsOnceThenStartsFromItsState(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	cp, err := controlplane.New(controlplane.Stores{Pool: pgtest.New(t)}, controlplane.Config{ArtifactDir: t.TempDir(),
		Authority: natstest.Auth(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(NewHTTP(cp, HTTPOptions{}).Handler())
	t.Cleanup(ts.Close)
	log := slog.New(slog.DiscardHandler)
	token := func(node string) string {
		tok, _, err := cp.Enrollment.CreateJoinToken(ctx, system, enrollment.JoinRequest{Node: node, Host: "127.0.0.1", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	join := token("cpu-7")
	c := AgentConfig{StateDir: filepath.Join(t.TempDir(), "state"), ControlPlaneURL: ts.URL, Join: Secret(join)}
	sess, err := c.enroll(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Node() != "cpu-7" || !strings.HasPrefix(sess.ArtifactToken(), "mpn_") {
		t.Fatalf("enrolled as %q", sess.Node())
	}
	if st, err := os.Stat(filepath.Join(c.StateDir, nodeCredsFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file: %v (err %v), want 0600", st.Mode().Perm(), err)
	}
	if st, err := os.Stat(c.StateDir); err != nil || st.Mode().Perm() != 0o711 {
		t.Errorf("state directory: %v (err %v), want 0711", st.Mode().Perm(), err)
	}
	again := AgentConfig{StateDir: t.TempDir(), ControlPlaneURL: ts.URL, Join: Secret(join)}
	if _, err := again.enroll(ctx, log); err == nil || !strings.Contains(err.Error(), "already used") || !strings.Contains(err.Error(), "new join token") {
		t.Errorf("a used token: err %v, want it to say used and what to do", err)
	}
	c.Join = ""
	restarted, err := c.enroll(ctx, log)
	if err != nil || restarted == nil || restarted.ArtifactToken() != sess.ArtifactToken() {
		t.Fatalf("restart without a token: %v (err %v), want the kept credentials", restarted, err)
	}

	revoked := token("cpu-8")
	list, err := cp.Enrollment.JoinTokens(ctx, system)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Enrollment.RevokeJoinToken(ctx, system, list[0].ID); err != nil {
		t.Fatal(err)
	}
	expired := token("cpu-9")
	clock.Advance(time.Hour)
	for want, tok := range map[string]string{"revoked": revoked, "expired": expired, "invalid": "mpj_made-up"} {
		c := AgentConfig{StateDir: t.TempDir(), ControlPlaneURL: ts.URL, Join: Secret(tok)}
		if _, err := c.enroll(ctx, log); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a %s token: err %v", want, err)
		}
	}
	if none, err := (&AgentConfig{StateDir: t.TempDir()}).enroll(ctx, log); none != nil || err != nil {
		t.Errorf("no token, nothing kept: %v, %v; want not enrolled", none, err)
	}
}
