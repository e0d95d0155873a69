package reqstats_test

import (
	"errors"
	"testing"
	"time"

	"modelplane/autoscale"
	"modelplane/internal/chtest"
	"modelplane/reqstats"
)

func TestHourlyRates(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from := time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC)
	to := from.Add(14 * 24 * time.Hour)
	var rows []row
	// Two weeks of 10:00 hours with 7,200 requests (2 req/s) over two
	// versions and several windows, and every other hour 360 (0.1 req/s).
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		if h.Hour() == 10 {
			rows = append(rows,
				row{at: h, endpoint: "chat", version: "v42", requests: 5000},
				row{at: h.Add(59*time.Minute + 59*time.Second + 500*time.Millisecond), endpoint: "chat", version: "v43", requests: 2200})
		} else {
			rows = append(rows, row{at: h.Add(30 * time.Minute), endpoint: "chat", version: "v42", requests: 360})
		}
	}
	rows = append(rows,
		// Outside the span, and another endpoint: not counted.
		row{at: from.Add(-time.Second), endpoint: "chat", version: "v42", requests: 1_000_000},
		row{at: to, endpoint: "chat", version: "v42", requests: 1_000_000},
		row{at: from.Add(10 * time.Hour), endpoint: "fraud", version: "v1", requests: 1_000_000})
	insert(t, ch, rows...)
	r := reqstats.NewReader(ch, nil)
	h, err := r.HourlyRates(t.Context(), "chat", 0, from.Add(15*time.Minute), to)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 14*24 {
		t.Fatalf("%d hours, want %d", len(h), 14*24)
	}
	for _, p := range h {
		want := 0.1
		if p.Hour.Hour() == 10 {
			want = 2
		}
		if !near(p.RPS, want) || p.Hour.Minute() != 0 {
			t.Fatalf("hour %s: %v req/s, want %v", p.Hour, p.RPS, want)
		}
	}
	if !h[0].Hour.Equal(from) || !h[len(h)-1].Hour.Equal(to.Add(-time.Hour)) {
		t.Errorf("hours from %s to %s, want %s to %s", h[0].Hour, h[len(h)-1].Hour, from, to.Add(-time.Hour))
	}
	// What predictive autoscaling makes of it: at 09:50 the next 15
	// minutes reach into a 10:00 hour.
	rps, ok, why := autoscale.Forecast(h, to.Add(9*time.Hour+50*time.Minute), 15*time.Minute)
	if !ok || !near(rps, 2) {
		t.Errorf("forecast %v ok %v (%s), want 2", rps, ok, why)
	}
	if _, err := r.HourlyRates(t.Context(), "chat", 0, to, from); !errors.Is(err, reqstats.ErrWindow) {
		t.Errorf("reversed span: %v, want ErrWindow", err)
	}
	if _, err := r.HourlyRates(t.Context(), "chat", 0, from, from.Add(6*autoscale.Week)); !errors.Is(err, reqstats.ErrWindow) {
		t.Errorf("six weeks: %v, want ErrWindow", err)
	}
}
