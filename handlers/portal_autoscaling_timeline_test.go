package handlers

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/autoscale"
	"modelplane/db"
)

// TestPortalAutoscalingTimeline: before any decision the autoscaling
// section says so in one sentence and draws nothing; once decisions are
// stored it draws the wanted and ready counts over time with a dated time
// axis running from the oldest decision, and lists the decisions.
func TestPortalAutoscalingTimeline(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")
	doc := u.page("/endpoints/risk-endpoint")
	if doc.Find("#sec-autoscaling #autoscale-empty").Length() != 1 || doc.Find("#autoscale-chart").Length() != 0 {
		t.Fatalf("no decisions: empty state %d, chart %d; want the empty state alone",
			doc.Find("#autoscale-empty").Length(), doc.Find("#autoscale-chart").Length())
	}
	if n := doc.Find("#autoscaling .muted").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(s.Text(), "No ") && s.AttrOr("id", "") != "autoscale-empty"
	}).Length(); n != 0 {
		t.Errorf("%d other empty-state sentences beside #autoscale-empty", n)
	}

	ctx := t.Context()
	q := db.New(e.pool)
	ep, err := q.EndpointGetAsTarget(ctx, "risk-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	for _, d := range []struct {
		at            time.Time
		before, after int32
		ready         int
	}{{t0, 1, 4, 1}, {t0.Add(2 * time.Hour), 4, 2, 4}} {
		raw, err := json.Marshal(autoscale.Decision{Current: int(d.before), Ready: d.ready, Desired: int(d.after), Changed: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.AutoscaleDecisionInsert(ctx, db.AutoscaleDecisionInsertParams{TeamID: ep.TeamID, EndpointID: ep.ID, At: d.at,
			Before: d.before, After: d.after, Signal: "rps", Reason: "test load", Decision: raw}); err != nil {
			t.Fatal(err)
		}
	}
	doc = u.page("/endpoints/risk-endpoint")
	if doc.Find("#autoscale-empty").Length() != 0 {
		t.Errorf("empty state shown beside stored decisions")
	}
	c := doc.Find("#sec-autoscaling #autoscale-chart")
	if c.Length() != 1 {
		t.Fatalf("no timeline chart in the autoscaling section")
	}
	for _, line := range []string{"wanted", "ready"} {
		pts := strings.Fields(c.Find(`polyline[data-line="`+line+`"]`).AttrOr("points", ""))
		if len(pts) != 6 || !strings.HasPrefix(pts[0], "0,") || !strings.HasPrefix(pts[5], "600,") {
			t.Errorf("%s line = %q, want 6 points from the left edge to the right", line, pts)
		}
	}
	// 4 replicas wanted at the top of the scale (y 15), 1 ready at the start.
	if pts := strings.Fields(c.Find(`polyline[data-line="wanted"]`).AttrOr("points", "")); len(pts) == 6 && pts[2] != "0.0,15.0" {
		t.Errorf("wanted after the first decision at %s, want 0.0,15.0", pts[2])
	}
	if got := c.Find("figcaption").Text(); !strings.Contains(got, "max 4") {
		t.Errorf("caption %q, want max 4", got)
	}
	var ticks []string
	c.Find(`[data-axis="time"] span`).Each(func(_ int, s *goquery.Selection) { ticks = append(ticks, s.Text()) })
	if len(ticks) != 4 || ticks[0] != "2026-11-02 09:30" {
		t.Errorf("time axis = %q, want 4 dated ticks from 2026-11-02 09:30", ticks)
	}
	if got := doc.Find("#autoscale-decisions tbody tr").Length(); got != 2 {
		t.Errorf("%d decision rows, want 2", got)
	}
}
