package backfill_test

import (
	"context"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/demo/backfill"
	"modelplane/ingest"
	"modelplane/internal/chtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	os.Exit(code)
}

// flat prices every second at one rate.
type flat int64

func (f flat) At(string, string, time.Time) (int64, bool) { return int64(f), true }

func plan() backfill.Plan {
	return backfill.Plan{To: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Days: 7, Seed: 1, Endpoints: []backfill.Endpoint{
		{ID: 7, Name: "fraud-scoring", Team: "risk", Model: "fraud-detector", Version: "v23", PeakRPS: 6, LatencyMS: 4, SamplesPerHour: 20,
			FeatureNames: []string{"amount", "country"},
			Sample: func(r *rand.Rand) busapi.SampleInstance {
				return busapi.SampleInstance{Num: []float64{r.Float64() * 100, 0}, Str: []string{"", "DE"}, Score: r.Float64(), Label: "legit"}
			},
			Replicas: []backfill.Replica{
				{Name: "f-1", Node: "cpu-node-01", GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slots: []busapi.Slot{{Slice: 0}}, MemoryMB: 512},
				{Name: "f-2", Node: "cpu-node-02", GPUType: busapi.CPUType, Profile: busapi.ProfileCPU, Slots: []busapi.Slot{{Slice: 0}}, MemoryMB: 512},
			}},
		{ID: 8, Name: "support-chat", Team: "search", Model: "chat-assistant", Version: "v42", Chat: true, PeakRPS: 0.5, LatencyMS: 180, TPOTMS: 16,
			Replicas: []backfill.Replica{{Name: "c-1", Node: "gpu-node-04", GPUType: "H100-80GB", Profile: "mig-4g.40gb",
				Slots: []busapi.Slot{{GPU: 1, Slice: 0}}, MemoryMB: 40960}}},
	}}
}

// TestDaysAreDeterministic: a day's rows depend only on the plan, so a
// loader that stores a missing day again stores the same rows.
func TestDaysAreDeterministic(t *testing.T) {
	t.Parallel()
	a, b := plan(), plan()
	if !reflect.DeepEqual(a.Stats(3), b.Stats(3)) || !reflect.DeepEqual(a.Samples(3), b.Samples(3)) {
		t.Fatal("the same day built twice differs")
	}
	if len(a.Samples(3)) < 100 {
		t.Errorf("%d samples in a day, want a few hundred", len(a.Samples(3)))
	}
	for _, s := range a.Stats(2) {
		var sum uint64
		for _, n := range s.Latency {
			sum += n
		}
		if sum != s.Count || len(s.Latency) != busapi.LatencyBuckets {
			t.Fatalf("window %s: histogram sums to %d of %d requests", s.ID, sum, s.Count)
		}
	}
}

// TestWeekStoredThroughIngest stores the whole week through package
// ingest into a real ClickHouse: every second of every replica slot is a
// priced usage row, the hourly rollup is fed, and the statistics and
// samples are there; and it is quick enough for dev's start.
func TestWeekStoredThroughIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ch := chtest.New(t)
	p := plan()
	began := time.Now()
	var gen, store time.Duration
	for d := range p.Days {
		t0 := time.Now()
		u := p.Usage(d)
		gen += time.Since(t0)
		t0 = time.Now()
		if _, err := ingest.StoreUsage(ctx, ch, flat(40_000), u); err != nil {
			t.Fatal(err)
		}
		store += time.Since(t0)
		if err := ingest.StoreReqStats(ctx, ch, p.Stats(d)); err != nil {
			t.Fatal(err)
		}
		if err := ingest.StorePredictionSamples(ctx, ch, p.Samples(d)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("a week stored in %v (usage built in %v, stored in %v)", time.Since(began), gen, store)
	const seconds = 7 * 24 * 3600
	var raw, rolled, priced uint64
	if err := ch.QueryRow(ctx, "SELECT count(), countIf(rate_uusd_per_hour = 40000) FROM gpu_usage").Scan(&raw, &priced); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueryRow(ctx, "SELECT sum(gpu_seconds) FROM gpu_usage_hourly").Scan(&rolled); err != nil {
		t.Fatal(err)
	}
	if raw != 3*seconds || rolled != raw || priced != raw {
		t.Errorf("gpu_usage %d rows (%d priced), rollup %d; want %d of each", raw, priced, rolled, 3*seconds)
	}
	var windows, requests uint64
	if err := ch.QueryRow(ctx, "SELECT count(), sum(requests) FROM request_stats WHERE gateway = ?", backfill.Gateway).Scan(&windows, &requests); err != nil {
		t.Fatal(err)
	}
	if windows != 2*7*288 || requests == 0 {
		t.Errorf("request_stats: %d windows of %d requests; want %d windows", windows, requests, 2*7*288)
	}
	// Stored again, statistics and samples are skipped by id.
	if err := ingest.StoreReqStats(ctx, ch, p.Stats(0)); err != nil {
		t.Fatal(err)
	}
	if err := ingest.StorePredictionSamples(ctx, ch, p.Samples(0)); err != nil {
		t.Fatal(err)
	}
	var again, samples, distinct uint64
	if err := ch.QueryRow(ctx, "SELECT count() FROM request_stats").Scan(&again); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueryRow(ctx, "SELECT count(), uniqExact(request_id) FROM prediction_samples WHERE endpoint_id = 7").Scan(&samples, &distinct); err != nil {
		t.Fatal(err)
	}
	if again != windows || samples != distinct || samples < 7*100 {
		t.Errorf("after storing a day twice: %d windows (want %d), %d samples of %d ids", again, windows, samples, distinct)
	}
}
