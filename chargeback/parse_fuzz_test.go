package chargeback_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// FuzzParseGroupBy: any input either fails or yields known dimensions, in
// nesting order, without repeats.
func FuzzParseGroupBy(f *testing.F) {
	for _, s := range []string{"", "team", "allocation,team", "team,,endpoint", " version ,model", "team,team", "region", "TEAM", "team,\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dims, err := chargeback.ParseGroupBy(s)
		if err != nil {
			return
		}
		last := -1
		for _, d := range dims {
			i := slices.Index(chargeback.Dimensions, d)
			if i <= last {
				t.Fatalf("ParseGroupBy(%q) = %v: unknown, repeated or out of order", s, dims)
			}
			last = i
		}
	})
}

// FuzzParseTime: any input either fails or yields a UTC time that the
// input spelled (RFC 3339 or a date).
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-10-01", "2026-10-01T00:00:00Z", "2026-10-01T12:30:00+02:00", "2026-13-01", "yesterday", "", "2026-10-01T00:00:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := chargeback.ParseTime("from", s)
		if err != nil {
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("ParseTime(%q) = %v, not UTC", s, got)
		}
		if !strings.HasPrefix(s, got.Format("2006")) && !strings.Contains(s, "T") {
			t.Fatalf("ParseTime(%q) = %v, not the date written", s, got)
		}
	})
}

// TestDailyAddsUpToTheReport: the daily series of a period split by team
// sum to the report's exact total, day by day into the right days.
func TestDailyAddsUpToTheReport(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0.Add(23*time.Hour+50*time.Minute), t0.Add(24*time.Hour+20*time.Minute)
	rows := fleetUsage(from, to)
	insert(t, ch, rows)
	svc := chargeback.New(ch, nil, clockAt(t, to))
	q := chargeback.Query{From: t0, To: t0.Add(3 * 24 * time.Hour)}
	d, err := svc.Daily(t.Context(), finance, q, chargeback.DimTeam)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"2026-10-01", "2026-10-02", "2026-10-03"}; !slices.Equal(d.Days, want) {
		t.Fatalf("days = %v, want %v", d.Days, want)
	}
	var total int64
	perDay := make([]int64, 3)
	for _, s := range d.Series {
		for i, x := range s.CostX3600 {
			total += x
			perDay[i] += x
		}
	}
	_, want := exact(rows, from, to, nil)
	_, day1 := exact(rows, from, t0.Add(24*time.Hour), nil)
	if total != want || perDay[0] != day1 || perDay[2] != 0 {
		t.Fatalf("daily = %v (total %d), want %d with %d on the first day and none on the third", perDay, total, want, day1)
	}
	// Most costly first: search ($8.05/h), risk ($7.50/h), the idle GPU and slice ($6.30/h).
	var labels []string
	for _, s := range d.Series {
		labels = append(labels, s.Label)
	}
	if want := []string{"search", "risk", ""}; !slices.Equal(labels, want) {
		t.Errorf("series = %q, want %q", labels, want)
	}
}
