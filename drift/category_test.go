package drift_test

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/internal/chtest"
)

// TestStringFeaturesScoredByCategory: a feature the gateway sampled as
// strings (a payment's country) is scored by PSI over its values' shares,
// the 20 most frequent of both windows by name and the rest as "(other)",
// equal to the same sums done here; a value new in the current window
// shows by name and flags the feature; the numeric feature beside it is
// scored by its bins as before.
func TestStringFeaturesScoredByCategory(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	refCounts := map[string]int{"US": 500, "GB": 300, "DE": 200}
	curCounts := map[string]int{"US": 150, "GB": 150, "DE": 100, "NG": 100}
	for i := range 25 { // rare values: more than fit apart
		refCounts[fmt.Sprintf("X%02d", i)] = 4 + i%3
	}
	make := func(version string, from time.Time, counts map[string]int) ([]sample, []float64) {
		var out []sample
		var amounts []float64
		for _, c := range slices.Sorted(maps.Keys(counts)) {
			for range counts[c] {
				a := float64(10 + len(out)%97)
				amounts = append(amounts, a)
				out = append(out, sample{at: from.Add(time.Duration(len(out)) * time.Second), version: version,
					features: []float64{a, 40, 0}, strs: []string{"", "", c}, score: 0.1})
			}
		}
		return out, amounts
	}
	refRows, refAmounts := make("v23", base, refCounts)
	curRows, curAmounts := make("v23", base.Add(24*time.Hour), curCounts)
	insert(t, ch, "fraud", refRows)
	insert(t, ch, "fraud", curRows)

	rep, err := drift.NewReader(ch, drift.ReaderConfig{}).Report(t.Context(), "fraud", 0,
		drift.Window{Version: "v23", From: base, To: base.Add(24 * time.Hour)},
		drift.Window{Version: "v23", From: base.Add(24 * time.Hour), To: base.Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Features) != 3 || rep.Features[2].Name != "country" {
		t.Fatalf("features = %+v; want amount, age, country", rep.Features)
	}

	// The same sums: values by both windows' count, then name; 20 apart.
	values := slices.Collect(maps.Keys(refCounts))
	values = append(values, "NG")
	slices.SortFunc(values, func(a, b string) int {
		return cmp.Or(cmp.Compare(refCounts[b]+curCounts[b], refCounts[a]+curCounts[a]), cmp.Compare(a, b))
	})
	var want drift.Histogram
	var otherRef, otherCur uint64
	for i, v := range values {
		if i < 20 {
			want.Classes = append(want.Classes, v)
			want.Reference = append(want.Reference, uint64(refCounts[v]))
			want.Current = append(want.Current, uint64(curCounts[v]))
		} else {
			otherRef, otherCur = otherRef+uint64(refCounts[v]), otherCur+uint64(curCounts[v])
		}
	}
	want.Classes = append(want.Classes, "(other)")
	want.Reference, want.Current = append(want.Reference, otherRef), append(want.Current, otherCur)

	country := rep.Features[2]
	if !slices.Equal(country.Histogram.Classes, want.Classes) || !slices.Equal(country.Histogram.Reference, want.Reference) ||
		!slices.Equal(country.Histogram.Current, want.Current) {
		t.Fatalf("country histogram %+v; want %+v", country.Histogram, want)
	}
	if w := stat.PSI(want.Reference, want.Current); math.Abs(country.PSI-w) > 1e-12 || !country.Flagged {
		t.Errorf("country PSI %v flagged %v; want %v, flagged (NG is new)", country.PSI, country.Flagged, w)
	}
	if w := purePSI(refAmounts, curAmounts); math.Abs(rep.Features[0].PSI-w) > 1e-9 || len(rep.Features[0].Histogram.Classes) != 0 {
		t.Errorf("amount PSI %v, classes %v; want %v over its bins", rep.Features[0].PSI, rep.Features[0].Histogram.Classes, w)
	}
}
