package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/agent"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// suite is a server with the contract's buckets and streams and a control
// plane connection to it.
type suite struct {
	url string
	cp  *nats.Conn
	js  jetstream.JetStream
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	srv := natstest.New(t)
	s := &suite{url: srv.ClientURL()}
	s.cp = s.connect(t, natstest.ControlPlane(t)).nc
	var err error
	if s.js, err = jetstream.New(s.cp); err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), s.js); err != nil {
		t.Fatal(err)
	}
	return s
}

// client is a connection and the errors the server sent it asynchronously:
// a refused publish or subscription arrives there.
type client struct {
	nc   *nats.Conn
	errs chan error
}

func (s *suite) connect(t *testing.T, opts []nats.Option) *client {
	t.Helper()
	c := &client{errs: make(chan error, 64)}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	return c
}

// refused waits for the server's permissions violation naming subject.
func (c *client) refused(t *testing.T, what, subject string) {
	t.Helper()
	wait.Eventually(t, time.Minute, func() bool {
		for {
			select {
			case err := <-c.errs:
				if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
					return true
				}
			default:
				return false
			}
		}
	}, "%s: the server did not refuse %q", what, subject)
}

func (s *suite) kv(t *testing.T, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := s.js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// absent checks that the control plane finds no entry key in bucket.
func (s *suite) absent(t *testing.T, bucket, key string) {
	t.Helper()
	if e, err := s.kv(t, bucket).Get(t.Context(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("%s/%s: got entry %v (err %v), want none", bucket, key, e, err)
	}
}

// noMessage checks that stream holds no message on subject.
func (s *suite) noMessage(t *testing.T, stream, subject string) {
	t.Helper()
	st, err := s.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(t.Context(), subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("%s: got message %v (err %v), want none", subject, m, err)
	}
}

func TestAnonymousConnectionIsRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("got %v, want an authorization violation", err)
	}
	if !strings.Contains(bus.Hint(err), "MP_NATS_CREDS") {
		t.Errorf("hint %q does not say what to configure", bus.Hint(err))
	}
}

func TestCredentialOfAnotherAuthorityIsRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	other, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := other.ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), cred.Options()...)
	if err == nil {
		nc.Close()
		t.Fatal("a credential signed by another account was accepted")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("got %v, want an authorization violation", err)
	}
}

// TestAgentMaySpeakOnlyForItsNode is the adversarial suite of a node's
// credential: everything that is not its own desired key, heartbeat or
// usage is refused by the server and leaves no trace.
func TestAgentMaySpeakOnlyForItsNode(t *testing.T) {
	t.Parallel()
	s := newSuite(t)
	// The control plane listens to every heartbeat, and node b has a
	// desired state that node a must not read.
	beats, err := s.cp.SubscribeSync(busapi.NodeStatusWildcard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv(t, busapi.BucketDesired).Put(t.Context(), "b", []byte(`{"node":"b","generation":1}`)); err != nil {
		t.Fatal(err)
	}
	a := s.connect(t, natstest.Agent(t, "a"))

	publishes := []struct {
		name, subject string
		// bucket and key name the KV entry the publish would write;
		// stream names the stream it would land in.
		bucket, key, stream string
	}{
		{name: "heartbeat as node b", subject: busapi.NodeStatusSubject("b")},
		{name: "usage of node b", subject: busapi.UsageSubject("b"), stream: busapi.StreamUsage},
		{name: "write an API key", subject: busapi.KVSubject(busapi.BucketKeys, "mpk_000000000000"), bucket: busapi.BucketKeys, key: "mpk_000000000000"},
		{name: "write a route", subject: busapi.KVSubject(busapi.BucketRoutes, "fraud-scoring"), bucket: busapi.BucketRoutes, key: "fraud-scoring"},
		{name: "write an identity", subject: busapi.KVSubject(busapi.BucketIdentity, busapi.IdentityOIDCKey), bucket: busapi.BucketIdentity, key: busapi.IdentityOIDCKey},
		{name: "write its own desired state", subject: busapi.KVSubject(busapi.BucketDesired, "a"), bucket: busapi.BucketDesired, key: "a"},
		{name: "write node b's desired state", subject: busapi.KVSubject(busapi.BucketDesired, "c"), bucket: busapi.BucketDesired, key: "c"},
		{name: "request statistics", subject: busapi.ReqStatsSubject("fraud-scoring"), stream: busapi.StreamReqStats},
		{name: "a batch of request statistics", subject: busapi.ReqStatsBatchSubject, stream: busapi.StreamReqStats},
		{name: "prediction samples", subject: busapi.PredictionSubject("fraud-scoring"), stream: busapi.StreamPredictions},
		{name: "a batch of prediction samples", subject: busapi.PredictionBatchSubject, stream: busapi.StreamPredictions},
		{name: "a wake", subject: busapi.WakeSubject("fraud-scoring")},
		{name: "an event", subject: busapi.EventsSubject("risk"), stream: busapi.StreamEvents},
		{name: "purge a bucket", subject: "$JS.API.STREAM.PURGE.KV_" + busapi.BucketRoutes},
		{name: "delete a stream", subject: "$JS.API.STREAM.DELETE." + busapi.StreamUsage},
		{name: "direct get of node b's key", subject: "$JS.API.DIRECT.GET.KV_mp_desired.$KV.mp_desired.b"},
		{name: "message get on mp_desired", subject: "$JS.API.STREAM.MSG.GET.KV_mp_desired"},
		{name: "consumer on node b's key", subject: "$JS.API.CONSUMER.CREATE.KV_mp_desired.x.$KV.mp_desired.b"},
		{name: "unfiltered consumer on mp_desired", subject: "$JS.API.CONSUMER.CREATE.KV_mp_desired"},
		{name: "list consumers", subject: "$JS.API.CONSUMER.NAMES.KV_mp_desired"},
		{name: "list consumers with their filters", subject: "$JS.API.CONSUMER.LIST.KV_mp_desired"},
		{name: "read a consumer", subject: "$JS.API.CONSUMER.INFO.KV_mp_desired.x"},
		{name: "watch routes", subject: "$JS.API.CONSUMER.CREATE.KV_mp_routes.x.$KV.mp_routes.>"},
	}
	for _, p := range publishes {
		if err := a.nc.Publish(p.subject, []byte(`{"node":"b","lease_seconds":15}`)); err != nil {
			t.Fatal(err)
		}
		a.refused(t, p.name, p.subject)
	}
	// What a may say lands, after everything above: had any heartbeat of
	// b passed, it would have arrived first.
	if err := a.nc.Publish(busapi.NodeStatusSubject("a"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	m, err := beats.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != busapi.NodeStatusSubject("a") {
		t.Errorf("control plane heard %s first, want only node a's heartbeat", m.Subject)
	}
	for _, p := range publishes {
		if p.bucket != "" {
			s.absent(t, p.bucket, p.key)
		}
		if p.stream != "" {
			s.noMessage(t, p.stream, p.subject)
		}
	}

	subscriptions := []struct{ name, subject string }{
		{"node b's desired key", busapi.KVSubject(busapi.BucketDesired, "b")},
		{"every heartbeat", busapi.NodeStatusWildcard},
		{"node b's inbox", bus.AgentInbox("b") + ".>"},
		{"the default inbox", "_INBOX.>"},
		{"everything", ">"},
		{"API keys", busapi.KVSubject(busapi.BucketKeys, ">")},
		{"identity", busapi.KVSubject(busapi.BucketIdentity, ">")},
	}
	for _, sub := range subscriptions {
		if _, err := a.nc.SubscribeSync(sub.subject); err != nil {
			t.Fatal(err)
		}
		a.refused(t, "subscribe to "+sub.name, sub.subject)
	}

	// The consumer it may create is its own key's: asking for node b's key
	// (or every key) in the body of its own subject is refused by
	// JetStream itself.
	for _, filter := range []string{busapi.KVSubject(busapi.BucketDesired, "b"), busapi.KVSubject(busapi.BucketDesired, ">")} {
		req, _ := json.Marshal(map[string]any{"stream_name": "KV_mp_desired", "config": map[string]any{
			"name": "x", "filter_subject": filter, "deliver_policy": "last_per_subject", "ack_policy": "none",
		}})
		resp, err := a.nc.Request("$JS.API.CONSUMER.CREATE.KV_mp_desired.x.$KV.mp_desired.a", req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil || r.Error == nil {
			t.Errorf("consumer filtered to %s through node a's subject: got %s, want an error", filter, resp.Data)
		}
	}

	// The client library's watch of node b's key fails too.
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), busapi.BucketDesired)
	if err != nil {
		t.Fatalf("node a may look up mp_desired: %v", err)
	}
	// A refused request gets no answer: each waits out its timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if w, err := kv.Watch(ctx, "b"); err == nil {
		w.Stop()
		t.Error("node a watches node b's desired state")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := js.KeyValue(ctx, busapi.BucketRoutes); err == nil {
		t.Error("node a may look up mp_routes")
	}
}

// TestGatewayCannotWriteKV: a gateway reads buckets but writes none, and
// speaks for no node.
func TestGatewayCannotWriteKV(t *testing.T) {
	t.Parallel()
	s := newSuite(t)
	g := s.connect(t, natstest.Gateway(t, "gw1"))
	for _, p := range []struct{ bucket, key string }{
		{busapi.BucketRoutes, "fraud-scoring"},
		{busapi.BucketKeys, "mpk_000000000000"},
		{busapi.BucketIdentity, busapi.IdentityOIDCKey},
		{busapi.BucketDesired, "a"},
	} {
		subject := busapi.KVSubject(p.bucket, p.key)
		if err := g.nc.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		g.refused(t, "write "+p.bucket, subject)
		s.absent(t, p.bucket, p.key)
	}
	for _, subject := range []string{
		busapi.NodeStatusSubject("a"),
		busapi.UsageSubject("a"),
		busapi.EventsSubject("risk"),
		"$JS.API.STREAM.PURGE.KV_" + busapi.BucketRoutes,
		"$JS.API.CONSUMER.CREATE.KV_mp_desired.x.$KV.mp_desired.a",
	} {
		if err := g.nc.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		g.refused(t, "publish", subject)
	}
	s.noMessage(t, busapi.StreamUsage, busapi.UsageSubject("a"))
	for _, subject := range []string{busapi.NodeStatusWildcard, bus.GatewayInbox("gw2") + ".>", "_INBOX.>"} {
		if _, err := g.nc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		g.refused(t, "subscribe", subject)
	}
}

// TestLegitimateFlowsWork runs the real agent and gateway with their own
// credentials: the agent applies its desired state and heartbeats it back
// and publishes usage; the gateway syncs every bucket it reads and
// publishes what it may.
func TestLegitimateFlowsWork(t *testing.T) {
	t.Parallel()
	s := newSuite(t)
	log := slog.New(slog.DiscardHandler)

	beats, err := s.cp.SubscribeSync(busapi.NodeStatusSubject("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Flush(); err != nil {
		t.Fatal(err)
	}
	const sim = `{"latency_ms":{"p50":2,"p99":5},"score":{"mean":0.3,"sd":0.1},"class_balance":{"legit":0.9,"fraud":0.1}}`
	desired, _ := json.Marshal(busapi.Desired{Node: "a", Generation: 3, Replicas: []busapi.ReplicaSpec{{
		ID: "r1", Team: "risk", Endpoint: "fraud-scoring", Model: "fraud", Version: "v1", Task: "classification",
		GPUType: "A100-80GB", Profile: busapi.ProfileFull, Slots: []busapi.Slot{{GPU: 0}}, Sim: json.RawMessage(sim),
	}}})
	if _, err := s.kv(t, busapi.BucketDesired).Put(t.Context(), "a", desired); err != nil {
		t.Fatal(err)
	}
	an := s.connect(t, natstest.Agent(t, "a"))
	gpus, err := agent.ParseInventory([]string{"1xA100-80GB"}, "")
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Node: "a", GPUs: gpus, StateDir: t.TempDir(), Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond}, an.nc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ag.Stop)
	wait.Eventually(t, 20*time.Second, func() bool {
		m, err := beats.NextMsg(100 * time.Millisecond)
		if err != nil {
			return false
		}
		var st busapi.NodeStatus
		return json.Unmarshal(m.Data, &st) == nil && st.Generation == 3 && len(st.Replicas) == 1 && st.Replicas[0].State == busapi.StateReady
	}, "node a never reported generation 3 with its replica ready")
	usage, err := s.js.Stream(t.Context(), busapi.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 20*time.Second, func() bool {
		_, err := usage.GetLastMsgForSubject(t.Context(), busapi.UsageSubject("a"))
		return err == nil
	}, "node a's usage never reached MP_USAGE")
	select {
	case err := <-an.errs:
		t.Errorf("the agent was refused something: %v", err)
	default:
	}

	gc := s.connect(t, natstest.Gateway(t, "gw1"))
	gw, err := gateway.New(gateway.Config{StateDir: t.TempDir()}, gc.nc, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	wait.Eventually(t, 20*time.Second, gw.Ready, "the gateway never synced its buckets")
	gjs, err := jetstream.New(gc.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{busapi.ReqStatsSubject("fraud-scoring"), busapi.PredictionSubject("fraud-scoring"), busapi.PredictionBatchSubject,
		busapi.ReqStatsBatchSubject} {
		if _, err := gjs.Publish(t.Context(), subject, []byte(`{}`)); err != nil {
			t.Errorf("gateway publish %s: %v", subject, err)
		}
	}
	wakes, err := s.cp.SubscribeSync(busapi.WakeWildcard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := gc.nc.Publish(busapi.WakeSubject("fraud-scoring"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := wakes.NextMsg(10 * time.Second); err != nil {
		t.Errorf("wake: %v", err)
	}
	// The daily quota counters of grants (gateway/grant.go): the one
	// bucket a gateway writes, read and compare-and-set by key.
	quota, err := gjs.KeyValue(t.Context(), busapi.BucketGrantQuota)
	if err != nil {
		t.Fatalf("gateway looks up %s: %v", busapi.BucketGrantQuota, err)
	}
	key := busapi.GrantQuotaKey(7, "search", "20261205")
	if _, err := quota.Get(t.Context(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("gateway reads a counter that does not exist: %v, want not found", err)
	}
	rev, err := quota.Create(t.Context(), key, []byte("10"))
	if err != nil {
		t.Fatalf("gateway creates a counter: %v", err)
	}
	if _, err := quota.Update(t.Context(), key, []byte("20"), rev); err != nil {
		t.Errorf("gateway updates a counter: %v", err)
	}
	if e, err := quota.Get(t.Context(), key); err != nil || string(e.Value()) != "20" {
		t.Errorf("gateway reads the counter: %v %v, want 20", e, err)
	}
	select {
	case err := <-gc.errs:
		t.Errorf("the gateway was refused something: %v", err)
	default:
	}
}

// TestConsumerRedirectCarriesItsOwnSubject covers what the permissions
// cannot: the consumer an agent may create can name any deliver subject.
// Its deliveries keep their stream subject ($KV.mp_desired.a), so a
// subscriber of node b's heartbeats sees node a's own desired entry under
// a subject it does not accept (fleet.Intake drops it), and a deliver
// subject in another bucket writes nothing there.
func TestConsumerRedirectCarriesItsOwnSubject(t *testing.T) {
	t.Parallel()
	s := newSuite(t)
	if _, err := s.kv(t, busapi.BucketDesired).Put(t.Context(), "a", []byte(`{"node":"a","generation":1}`)); err != nil {
		t.Fatal(err)
	}
	beats, err := s.cp.SubscribeSync(busapi.NodeStatusSubject("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Flush(); err != nil {
		t.Fatal(err)
	}
	a := s.connect(t, natstest.Agent(t, "a"))
	for i, deliver := range []string{busapi.KVSubject(busapi.BucketRoutes, "victim"), busapi.NodeStatusSubject("b")} {
		name := fmt.Sprintf("redirect%d", i)
		req, _ := json.Marshal(map[string]any{"stream_name": "KV_mp_desired", "config": map[string]any{
			"name": name, "filter_subject": "$KV.mp_desired.a", "deliver_policy": "last_per_subject",
			"ack_policy": "none", "deliver_subject": deliver,
		}})
		if _, err := a.nc.Request("$JS.API.CONSUMER.CREATE.KV_mp_desired."+name+".$KV.mp_desired.a", req, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	m, err := beats.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != busapi.KVSubject(busapi.BucketDesired, "a") {
		t.Errorf("redirected delivery has subject %s, want its stream subject", m.Subject)
	}
	s.absent(t, busapi.BucketRoutes, "victim")
}
