package endpoint_test

import (
	"slices"
	"testing"

	"modelplane/endpoint"
)

// TestBatchingSettings: an endpoint created without batching batches with
// the defaults, Update stores new values (0 delay included), and each
// out-of-bounds value is refused naming its field, leaving the stored
// values as they were.
func TestBatchingSettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	e := f.create(t, "batched")
	if !sameBatching(e.Batching, endpoint.DefaultBatching) {
		t.Fatalf("created with %+v, want the defaults %+v", e.Batching, endpoint.DefaultBatching)
	}
	if got, err := f.svc.Get(ctx, f.riskEng, "batched"); err != nil || !sameBatching(got.Batching, endpoint.DefaultBatching) {
		t.Fatalf("stored %+v (%v), want the defaults", got.Batching, err)
	}
	good := endpoint.Batching{MaxBatchSize: 128, MaxQueueDelayUS: 0, PreferredBatchSizes: []int32{16, 64, 128}, QueueTimeoutMS: 60_000}
	set := settings
	set.Batching = good
	if _, err := f.svc.Update(ctx, f.riskEng, "batched", set); err != nil {
		t.Fatal(err)
	}
	if got, err := f.svc.Get(ctx, f.riskEng, "batched"); err != nil || !sameBatching(got.Batching, good) {
		t.Fatalf("updated to %+v (%v), want %+v", got.Batching, err, good)
	}
	for _, tt := range []struct {
		name  string
		field string
		b     endpoint.Batching
	}{
		{"max batch size 0 with other fields set is not unset", "batching.max_batch_size", endpoint.Batching{MaxBatchSize: 0, QueueTimeoutMS: 10}},
		{"max batch size above 1024", "batching.max_batch_size", endpoint.Batching{MaxBatchSize: 1025, QueueTimeoutMS: 10}},
		{"negative delay", "batching.max_queue_delay_us", endpoint.Batching{MaxBatchSize: 8, MaxQueueDelayUS: -1, QueueTimeoutMS: 10}},
		{"delay above a second", "batching.max_queue_delay_us", endpoint.Batching{MaxBatchSize: 8, MaxQueueDelayUS: 1_000_001, QueueTimeoutMS: 10}},
		{"queue timeout 0", "batching.queue_timeout_ms", endpoint.Batching{MaxBatchSize: 8, MaxQueueDelayUS: 100}},
		{"queue timeout above a minute", "batching.queue_timeout_ms", endpoint.Batching{MaxBatchSize: 8, QueueTimeoutMS: 60_001}},
		{"preferred size above the maximum", "batching.preferred_batch_sizes[1]", endpoint.Batching{MaxBatchSize: 8, PreferredBatchSizes: []int32{4, 16}, QueueTimeoutMS: 10}},
		{"preferred sizes not ascending", "batching.preferred_batch_sizes[1]", endpoint.Batching{MaxBatchSize: 8, PreferredBatchSizes: []int32{4, 4}, QueueTimeoutMS: 10}},
		{"preferred size 0", "batching.preferred_batch_sizes[0]", endpoint.Batching{MaxBatchSize: 8, PreferredBatchSizes: []int32{0}, QueueTimeoutMS: 10}},
	} {
		bad := settings
		bad.Batching = tt.b
		if _, err := f.svc.Update(ctx, f.riskEng, "batched", bad); !hasField(err, tt.field) {
			t.Errorf("%s: Update = %v (fields %q), want a field error on %s", tt.name, err, fields(err), tt.field)
		}
		if _, err := f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "refused", Model: "fraud", Version: "v1", Settings: bad}); !hasField(err, tt.field) {
			t.Errorf("%s: Create = %v, want a field error on %s", tt.name, err, tt.field)
		}
	}
	if got, err := f.svc.Get(ctx, f.riskEng, "batched"); err != nil || !sameBatching(got.Batching, good) {
		t.Errorf("after refused updates %+v (%v), want %+v kept", got.Batching, err, good)
	}
}

func sameBatching(a, b endpoint.Batching) bool {
	return a.MaxBatchSize == b.MaxBatchSize && a.MaxQueueDelayUS == b.MaxQueueDelayUS && a.QueueTimeoutMS == b.QueueTimeoutMS &&
		slices.Equal(a.PreferredBatchSizes, b.PreferredBatchSizes)
}
