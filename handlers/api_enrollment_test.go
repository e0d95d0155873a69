package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/enrollment"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// TestNodeEnrollmentAPI: a platform admin makes a join token (shown once,
// never cached); the agent exchanges it once, without a user credential,
// for a NATS credential that reads its own mp_desired key and publishes
// its own status and nothing of another node, and an artifact token that
// reads only the files of versions placed on it. A rotation keeps the
// previous token working; revoking the node cuts NATS and artifacts at
// once.
func TestNodeEnrollmentAPI(t *testing.T) {
	t.Parallel()
	ns := natstest.New(t)
	a := natstest.Auth(t)
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	snc, err := nats.Connect(ns.ClientURL(), sys.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snc.Close)
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, pool *pgxpool.Pool) {
		d.Enrollment = enrollment.New(pool, a, func(ctx context.Context) error { return a.Push(ctx, snc) }, nil).
			Advertise([]string{ns.ClientURL()}, "")
		d.PublicURL = "https://cp.example.com/"
	}})
	e.seedFleet(t) // the risk endpoint's v1 replica is on gpu-mig-01
	const node = "gpu-mig-01"

	body := jsonPayload(map[string]any{"node": node, "host": "127.0.0.1", "ttl_seconds": 600})
	for _, key := range []string{"risk-admin", "finance"} {
		problem(t, key+" creates a join token", e.call(t, e.Keys[key], http.MethodPost, "/join-tokens", body), http.StatusForbidden)
	}
	problem(t, "a join token with a bad host", e.call(t, e.Keys["platform-admin"], http.MethodPost, "/join-tokens",
		jsonPayload(map[string]any{"node": node, "host": "a b"})), http.StatusBadRequest)
	r := e.call(t, e.Keys["platform-admin"], http.MethodPost, "/join-tokens", body)
	if r.status != http.StatusCreated || !strings.Contains(r.header.Get("Cache-Control"), "no-store") {
		t.Fatalf("create join token = %d (Cache-Control %q) %s; want 201, no-store", r.status, r.header.Get("Cache-Control"), r)
	}
	var created struct {
		Token, Command, Node, State string
	}
	if err := json.Unmarshal(r.body, &created); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.Token, "mpj_") || created.Node != node || created.State != "pending" ||
		created.Command != "modelplane agent --join "+created.Token+" --control-plane https://cp.example.com" {
		t.Fatalf("created join token %+v", created)
	}
	list := e.call(t, e.Keys["platform-admin"], http.MethodGet, "/join-tokens", nil)
	if list.status != http.StatusOK || strings.Contains(list.String(), created.Token) || !strings.Contains(list.String(), node) {
		t.Errorf("join tokens = %d %s; want the token listed without its secret", list.status, list)
	}

	// The exchange takes no user credential: the join token is the proof.
	enroll := jsonPayload(map[string]any{"token": created.Token})
	r = e.call(t, "", http.MethodPost, "/nodes/enroll", enroll)
	if r.status != http.StatusOK || !strings.Contains(r.header.Get("Cache-Control"), "no-store") {
		t.Fatalf("enroll = %d %s; want 200, no-store", r.status, r)
	}
	var creds enrollment.Credentials
	if err := json.Unmarshal(r.body, &creds); err != nil {
		t.Fatal(err)
	}
	if creds.Node != node || len(creds.NATSURLs) != 1 || creds.NATSURLs[0] != ns.ClientURL() || !strings.HasPrefix(creds.ArtifactToken, "mpn_") {
		t.Fatalf("credentials for %q at %v", creds.Node, creds.NATSURLs)
	}
	again := e.call(t, "", http.MethodPost, "/nodes/enroll", enroll)
	if doc := problem(t, "second exchange", again, http.StatusUnauthorized); !strings.Contains(doc.Detail, "already used") {
		t.Errorf("second exchange says %q; want it to say the token was used", doc.Detail)
	}

	// NATS: its own key and status, nothing of another node's.
	cp, err := nats.Connect(ns.ClientURL(), natstest.ControlPlane(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	cpjs, err := jetstream.New(cp)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := bus.Ensure(ctx, cpjs); err != nil {
		t.Fatal(err)
	}
	kv, err := cpjs.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{node, "gpu-full-01"} {
		if _, err := kv.Put(ctx, n, []byte(`{"node":"`+n+`","generation":7}`)); err != nil {
			t.Fatal(err)
		}
	}
	beats, err := cp.SubscribeSync("mp.node.*.status")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	cred, err := bus.ParseCredential([]byte(creds.NATSCreds))
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 16)
	closed := make(chan struct{})
	an, err := nats.Connect(creds.NATSURLs[0], append(cred.Options(), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(an.Close)
	ajs, err := jetstream.New(an)
	if err != nil {
		t.Fatal(err)
	}
	akv, err := ajs.KeyValue(ctx, busapi.BucketDesired)
	if err != nil {
		t.Fatalf("the node cannot open mp_desired: %v", err)
	}
	w, err := akv.Watch(ctx, node)
	if err != nil {
		t.Fatalf("the node cannot watch its own key: %v", err)
	}
	select {
	case u := <-w.Updates():
		if u == nil || u.Key() != node || !strings.Contains(string(u.Value()), `"generation":7`) {
			t.Fatalf("the node's watch gave %v", u)
		}
	case <-ctx.Done():
		t.Fatal("the node's watch gave nothing")
	}
	_ = w.Stop()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if w, err := akv.Watch(wctx, "gpu-full-01"); err == nil {
		_ = w.Stop()
		t.Error("the node watches another node's key")
	}
	cancel()
	for len(refused) > 0 { // the refused watch's own errors
		<-refused
	}
	if err := an.Publish("mp.node.gpu-full-01.status", []byte(`{"node":"gpu-full-01"}`)); err != nil {
		t.Fatal(err)
	}
	if err := an.Publish("mp.node."+node+".status", []byte(`{"node":"`+node+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := an.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	m, err := beats.NextMsg(10 * time.Second)
	if err != nil || m.Subject != "mp.node."+node+".status" {
		t.Fatalf("the control plane heard %v (err %v); want only %s's own status", m, err, node)
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		select {
		case err := <-refused:
			return (errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation")) &&
				strings.Contains(err.Error(), "mp.node.gpu-full-01.status")
		default:
			return false
		}
	}, "publishing another node's status was not refused")

	// Artifacts: only what a version placed on the node needs.
	placed, err := e.srv.Registry.Version(ctx, system, "risk-model", "v1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.srv.Registry.Version(ctx, system, "risk-model", "v2")
	if err != nil {
		t.Fatal(err)
	}
	placedFile, otherFile := placed.Manifest["model.safetensors"], other.Manifest["model.safetensors"]
	bearer := "Bearer " + creds.ArtifactToken
	if st, _, b := e.rawGet(t, "/internal/artifacts/"+placedFile, bearer); st != http.StatusOK {
		t.Fatalf("placed file = %d %s; want 200", st, b)
	}
	if st, _, b := e.rawGet(t, "/internal/artifacts/"+otherFile, bearer); st != http.StatusForbidden {
		t.Errorf("a file of a version not placed on the node = %d %s; want 403", st, b)
	}

	// Rotation: new credentials; the previous token works in the grace.
	problem(t, "rotate without a token", e.call(t, "", http.MethodPost, "/nodes/rotate", nil), http.StatusUnauthorized)
	r = e.call(t, creds.ArtifactToken, http.MethodPost, "/nodes/rotate", nil)
	if r.status != http.StatusOK || !strings.Contains(r.header.Get("Cache-Control"), "no-store") {
		t.Fatalf("rotate = %d %s; want 200, no-store", r.status, r)
	}
	var rotated enrollment.Credentials
	if err := json.Unmarshal(r.body, &rotated); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"previous": creds.ArtifactToken, "rotated": rotated.ArtifactToken} {
		if st, _, b := e.rawGet(t, "/internal/artifacts/"+placedFile, "Bearer "+tok); st != http.StatusOK {
			t.Errorf("%s token in the grace = %d %s; want 200", name, st, b)
		}
	}

	// Revocation ends both, in the same request.
	problem(t, "risk admin revokes the node", e.call(t, e.Keys["risk-admin"], http.MethodPost, "/nodes/"+node+"/revoke", nil), http.StatusForbidden)
	if r := e.call(t, e.Keys["platform-admin"], http.MethodPost, "/nodes/"+node+"/revoke", nil); r.status != http.StatusNoContent {
		t.Fatalf("revoke = %d %s; want 204", r.status, r)
	}
	for name, tok := range map[string]string{"previous": creds.ArtifactToken, "rotated": rotated.ArtifactToken} {
		if st, _, b := e.rawGet(t, "/internal/artifacts/"+placedFile, "Bearer "+tok); st != http.StatusUnauthorized {
			t.Errorf("%s token after the revocation = %d %s; want 401", name, st, b)
		}
	}
	wait.Eventually(t, 30*time.Second, func() bool {
		select {
		case <-closed:
			return true
		default:
			return false
		}
	}, "the revoked node's NATS connection stays open")
	for name, c := range map[string]string{"previous": creds.NATSCreds, "rotated": rotated.NATSCreds} {
		cred, err := bus.ParseCredential([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		if nc, err := nats.Connect(ns.ClientURL(), append(cred.Options(), nats.NoReconnect())...); err == nil {
			nc.Close()
			t.Errorf("the %s credential connects after the revocation", name)
		}
	}
	var audit struct {
		Items []struct{ Action string } `json:"items"`
	}
	e.getJSON(t, e.Keys["platform-admin"], "/audit?limit=500", &audit)
	seen := map[string]bool{}
	for _, it := range audit.Items {
		seen[it.Action] = true
	}
	for _, want := range []string{"node.join_token.create", "node.enroll", "node.rotate", "node.revoke"} {
		if !seen[want] {
			t.Errorf("audit log lacks %s", want)
		}
	}
}
