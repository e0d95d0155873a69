package handlers

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/reqstats"
	"modelplane/web"
)

// TestChartsHaveTimeAxes: every traffic chart writes the times of its
// first and last points under it (the time of day within one UTC day,
// dates across days), so a chart is read against time.
func TestChartsHaveTimeAxes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		to       time.Time
		from, at string
	}{
		{t0.Add(30 * time.Minute), "10:00 UTC", "10:30 UTC"},
		{t0.Add(24 * time.Hour), "Nov 30 10:00 UTC", "Dec 1 10:00 UTC"},
	} {
		stats := versionCharts(reqstats.Series{Version: "v1", Streaming: true, Points: []reqstats.Point{{Start: t0}, {Start: c.to}}})
		var buf bytes.Buffer
		if err := web.StatsSection(web.StatsProps{Endpoint: "e", Minutes: 30, Versions: []web.VersionStats{stats}}).Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		doc, err := goquery.NewDocumentFromReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		charts := doc.Find("figure.chart")
		if charts.Length() != 5 {
			t.Fatalf("%d charts, want 5 (QPS, latency, errors, TTFT, TPOT)", charts.Length())
		}
		charts.Each(func(_ int, f *goquery.Selection) {
			axis := f.Find(`[data-axis="time"] span`)
			if axis.Length() != 2 || axis.Eq(0).Text() != c.from || axis.Eq(1).Text() != c.at {
				t.Errorf("chart %s: axis %q, want %s to %s", f.AttrOr("data-chart", "?"), axis.Text(), c.from, c.at)
			}
		})
	}
}
