package chargeback_test

import (
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
	"modelplane/readcache"
)

// TestClosedReportsCachedWithinTheirBound: a report of a period that
// ended before the last LagWindow is served from the cache, per caller
// scope, and late usage of that period shows once the cached report is
// past ClosedMaxAge; a report reaching into the last LagWindow, and one
// read with SourceRaw, see late usage at once; a caller changing its copy
// changes no one else's.
func TestClosedReportsCachedWithinTheirBound(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	insert(t, ch, fleetUsage(t0, t0.Add(2*time.Hour)))
	clk := clockAt(t, t0.Add(5*time.Hour))
	svc := chargeback.New(ch, nil, clk).WithCache(readcache.Options{Fresh: chargeback.ClosedFresh, MaxAge: chargeback.ClosedMaxAge})
	closed := chargeback.Query{From: t0, To: t0.Add(2 * time.Hour), GroupBy: []chargeback.Dimension{chargeback.DimTeam}}
	recent := chargeback.Query{From: t0, To: t0.Add(5 * time.Hour), GroupBy: []chargeback.Dimension{chargeback.DimTeam}}
	seconds := func(p string, q chargeback.Query) int64 {
		t.Helper()
		who := finance
		if p == "risk" {
			who = riskEng
		}
		rep, err := svc.Report(t.Context(), who, q)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Total.GPUSeconds
	}
	const gpus, riskGPUs = 8, 3
	if got, want := seconds("finance", closed), int64(2*3600*gpus); got != want {
		t.Fatalf("closed period: %d GPU-seconds, want %d", got, want)
	}
	if got, want := seconds("risk", closed), int64(2*3600*riskGPUs); got != want {
		t.Fatalf("closed period for risk: %d GPU-seconds, want %d (the scope is part of the key)", got, want)
	}
	rep, err := svc.Report(t.Context(), finance, closed)
	if err != nil {
		t.Fatal(err)
	}
	rep.Rows[0].GPUSeconds, rep.Total.GPUSeconds = -1, -1

	// Late usage: one more GPU for the first hour, stored now.
	late := fleetUsage(t0, t0.Add(time.Hour))[:0]
	for s := t0; s.Before(t0.Add(time.Hour)); s = s.Add(time.Second) {
		late = append(late, rec{ts: s, node: "n3", gpuType: "A100-80GB", profile: "full", team: "risk", endpoint: "fraud",
			model: "fraud-model", ver: "v1", rate: 3_500_001})
	}
	insert(t, ch, late)
	for _, c := range []struct {
		name string
		q    chargeback.Query
		want int64
	}{
		{"closed, cached", closed, 2 * 3600 * gpus},
		{"reaching into the last hour", recent, 2*3600*gpus + 3600},
		{"raw", chargeback.Query{From: closed.From, To: closed.To, GroupBy: closed.GroupBy, Source: chargeback.SourceRaw}, 2*3600*gpus + 3600},
	} {
		if got := seconds("finance", c.q); got != c.want {
			t.Errorf("%s after late usage: %d GPU-seconds, want %d", c.name, got, c.want)
		}
	}
	// Past its bound the cached report is never served: the caller waits
	// for a new read.
	clk.Advance(chargeback.ClosedMaxAge)
	if got, want := seconds("finance", closed), int64(2*3600*gpus+3600); got != want {
		t.Errorf("closed period past ClosedMaxAge: %d GPU-seconds, want %d", got, want)
	}
}

// TestNewestUsageCachedWithinItsBound: with WithCache, a report reaching
// into the last LagWindow shows the newest stored usage second as read at
// most NewestMaxAge before, while its sums are read every time; past the
// bound the newest second is read again.
func TestNewestUsageCachedWithinItsBound(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	insert(t, ch, fleetUsage(t0, t0.Add(time.Hour)))
	clk := clockAt(t, t0.Add(time.Hour+30*time.Second))
	svc := chargeback.New(ch, nil, clk).WithCache(readcache.Options{Fresh: chargeback.ClosedFresh, MaxAge: chargeback.ClosedMaxAge})
	report := func() *chargeback.Report {
		t.Helper()
		rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: t0, To: clk.Now(), GroupBy: []chargeback.Dimension{chargeback.DimTeam}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	first := report()
	if want := t0.Add(time.Hour - time.Second); !first.Newest.Equal(want) {
		t.Fatalf("newest %v; want %v, the last second stored", first.Newest, want)
	}
	insert(t, ch, fleetUsage(t0.Add(time.Hour), t0.Add(time.Hour+20*time.Second)))
	second := report()
	if !second.Newest.Equal(first.Newest) || second.Total.GPUSeconds <= first.Total.GPUSeconds {
		t.Errorf("within NewestMaxAge: newest %v, %d GPU-seconds; want the kept %v and the new seconds counted (over %d)",
			second.Newest, second.Total.GPUSeconds, first.Newest, first.Total.GPUSeconds)
	}
	clk.Advance(chargeback.NewestMaxAge)
	if got, want := report().Newest, t0.Add(time.Hour+19*time.Second); !got.Equal(want) {
		t.Errorf("past NewestMaxAge: newest %v; want %v", got, want)
	}
}
