package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/busapi"
)

// scaled is the contract with every size divided by div, so that a test
// floods it in a few MiB; the per-node cap is set to perNode.
func scaled(div int64, perNode int64) ([]busapi.Bucket, []busapi.Stream) {
	buckets := slices.Clone(busapi.Buckets)
	for i := range buckets {
		buckets[i].MaxBytes /= div
	}
	streams := slices.Clone(busapi.Streams)
	for i := range streams {
		streams[i].MaxBytes /= div
		if streams[i].MaxMsgsPerSubject > 0 {
			streams[i].MaxMsgsPerSubject = perNode
		}
	}
	return buckets, streams
}

// limitedServer starts a server trusting a fresh authority whose account
// may hold disk bytes, and returns its URL and the authority.
func limitedServer(t *testing.T, disk int64) (string, *bus.Authority) {
	t.Helper()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetAccountDiskBytes(disk); err != nil {
		t.Fatal(err)
	}
	o := server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	if err := a.Configure(&o); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL(), a
}

// TestOneNodeCannotFillTheBus is issue 25 finding 5: with the account's
// JetStream limits at NoLimit and streams bounded only by age, one node's
// credential could fill the NATS disk through its own usage subject, after
// which route writes failed for everyone. The contract, sized down 4096
// times with the account's disk the sum of its parts as in production
// (bus.AccountDiskBytes), is flooded by node a: MP_USAGE keeps within its
// MaxBytes, node a within its per-node cap (its own oldest batches go),
// node b's batches stay, and the control plane still writes mp_routes.
// The same flood without the stream limits (the contract before) fills
// the account and a route write is refused, which shows the flood is big
// enough to do harm.
func TestOneNodeCannotFillTheBus(t *testing.T) {
	t.Parallel()
	const div, perNode = 4096, 64
	for _, tc := range []struct {
		name       string
		unbounded  bool
		wantRoutes bool
	}{
		{"contract limits", false, true},
		{"no stream or bucket limits, as before", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			buckets, streams := scaled(div, perNode)
			// The account as production sizes it, headroom scaled too.
			disk := bus.AccountDiskBytes(buckets, streams) - bus.AccountHeadroomBytes + bus.AccountHeadroomBytes/div
			if tc.unbounded {
				for i := range streams {
					streams[i].MaxBytes, streams[i].MaxMsgsPerSubject = 0, 0
				}
				for i := range buckets {
					buckets[i].MaxBytes = 0
				}
			}
			url, a := limitedServer(t, disk)
			connect := func(c bus.Credential, err error) *nats.Conn {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				nc, err := nats.Connect(url, c.Options()...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				return nc
			}
			cp := connect(a.ControlPlane())
			cpjs, err := jetstream.New(cp)
			if err != nil {
				t.Fatal(err)
			}
			if err := bus.EnsureContract(ctx, cpjs, buckets, streams); err != nil {
				t.Fatal(err)
			}
			routes, err := cpjs.KeyValue(ctx, busapi.BucketRoutes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := routes.Put(ctx, "fraud", []byte(`{"endpoint":"fraud","generation":1}`)); err != nil {
				t.Fatalf("route write before the flood: %v", err)
			}
			// Node b's usage, then node a's flood: 8 KiB batches, four
			// times the account's disk, then small ones.
			bjs, err := jetstream.New(connect(a.Agent("b")))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				if _, err := bjs.Publish(ctx, busapi.UsageSubject("b"), fmt.Appendf(nil, `{"id":"b-%d"}`, i)); err != nil {
					t.Fatalf("node b's usage: %v", err)
				}
			}
			ajs, err := jetstream.New(connect(a.Agent("a")))
			if err != nil {
				t.Fatal(err)
			}
			batch := []byte(`{"id":"flood","pad":"` + strings.Repeat("x", 8<<10) + `"}`)
			var refused int
			for range int(4 * disk / int64(len(batch))) {
				if _, err := ajs.Publish(ctx, busapi.UsageSubject("a"), batch); err != nil {
					refused++
				}
			}
			// Then small ones, to take the last bytes a big one left.
			for range 500 {
				if _, err := ajs.Publish(ctx, busapi.UsageSubject("a"), []byte(`{"id":"f"}`)); err != nil {
					refused++
				}
			}
			_, err = routes.Put(ctx, "fraud", []byte(`{"endpoint":"fraud","generation":2}`))
			if tc.wantRoutes && err != nil {
				t.Fatalf("route write after node a's flood: %v; want it written", err)
			}
			if !tc.wantRoutes {
				if err == nil {
					ai, _ := cpjs.AccountInfo(ctx)
					t.Fatalf("route write after a flood of unbounded streams succeeded; the flood is too small to show harm (%d refused, account %+v, disk %d)", refused, ai, disk)
				}
				t.Logf("before the limits: route write refused after the flood (%v); %d of node a's publishes refused", err, refused)
				return
			}
			s, err := cpjs.Stream(ctx, busapi.StreamUsage)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter("mp.usage.>"))
			if err != nil {
				t.Fatal(err)
			}
			if max := busapi.UsageMaxBytes / div; info.State.Bytes > uint64(max) {
				t.Errorf("MP_USAGE holds %d bytes, above its %d", info.State.Bytes, max)
			}
			if got := info.State.Subjects[busapi.UsageSubject("a")]; got > perNode {
				t.Errorf("node a keeps %d batches, above its cap of %d", got, perNode)
			}
			if got := info.State.Subjects[busapi.UsageSubject("b")]; got != 8 {
				t.Errorf("node b keeps %d of its 8 batches after node a's flood", got)
			}
			if refused != 0 {
				t.Errorf("%d of node a's publishes refused; want its oldest dropped instead", refused)
			}
			// Oversized messages are refused outright.
			if _, err := ajs.Publish(ctx, busapi.UsageSubject("a"), make([]byte, busapi.MaxMsgBytes+1)); err == nil {
				t.Error("a usage message above MaxMsgBytes was stored")
			}
		})
	}
}

// TestAccountLimitsHoldTheContract: the account's limits leave room for
// every bucket and stream of the contract at its full size, so Ensure
// succeeds on a server with the production account, and they are bounded.
func TestAccountLimitsHoldTheContract(t *testing.T) {
	t.Parallel()
	url, a := limitedServer(t, bus.AccountDiskBytes(busapi.Buckets, busapi.Streams))
	c, err := a.ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, c.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a control plane's start, then the next one's
		if err := bus.Ensure(t.Context(), js); err != nil {
			t.Fatalf("ensure the contract under the account's limits: %v", err)
		}
	}
	s, err := js.Stream(t.Context(), "KV_"+busapi.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if si.Config.MaxConsumers != busapi.DesiredMaxConsumers {
		t.Errorf("mp_desired's consumer cap after two starts: %d, want %d", si.Config.MaxConsumers, busapi.DesiredMaxConsumers)
	}
	ai, err := js.AccountInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l := ai.Limits; l.MaxStore != bus.AccountDiskBytes(busapi.Buckets, busapi.Streams) || l.MaxConsumers != bus.AccountMaxConsumers || l.MaxStreams != bus.AccountMaxStreams || l.MaxMemory <= 0 {
		t.Errorf("account limits %+v; want every one bounded", l)
	}
}

// TestOneNodeCannotTakeEveryConsumer: a node may create consumers of its
// own mp_desired key (that is its watch), and nothing else bounds how
// many; mp_desired's consumer cap keeps them below the account's, so the
// control plane still watches mp_routes. Sized down to a cap of 4.
func TestOneNodeCannotTakeEveryConsumer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const capDesired = 4
	buckets, streams := scaled(1, busapi.UsageMaxMsgsPerNode)
	for i := range buckets {
		if buckets[i].Name == busapi.BucketDesired {
			buckets[i].MaxConsumers = capDesired
		}
	}
	url, a := limitedServer(t, bus.AccountDiskBytes(buckets, streams))
	connect := func(c bus.Credential, err error) jetstream.JetStream {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, c.Options()...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	cpjs := connect(a.ControlPlane())
	if err := bus.EnsureContract(ctx, cpjs, buckets, streams); err != nil {
		t.Fatal(err)
	}
	ajs := connect(a.Agent("a"))
	made := 0
	for i := range 3 * capDesired {
		_, err := ajs.CreateConsumer(ctx, "KV_"+busapi.BucketDesired, jetstream.ConsumerConfig{
			Name: fmt.Sprintf("hog-%d", i), FilterSubject: "$KV." + busapi.BucketDesired + ".a", AckPolicy: jetstream.AckNonePolicy,
			InactiveThreshold: time.Hour})
		if err == nil {
			made++
		}
	}
	t.Logf("node a made %d consumers of mp_desired before it was refused", made)
	if made == 0 || made > capDesired {
		t.Errorf("node a made %d consumers of mp_desired; want between 1 and the cap of %d", made, capDesired)
	}
	routes, err := cpjs.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := routes.WatchAll(ctx)
	if err != nil {
		t.Fatalf("watch mp_routes after node a's consumers: %v", err)
	}
	defer w.Stop()
	if _, err := routes.Put(ctx, "fraud", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for e := range w.Updates() {
		if e != nil && e.Key() == "fraud" {
			return
		}
	}
	t.Error("the route watch ended without the route")
}
