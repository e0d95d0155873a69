package drift_test

import (
	"context"
	"testing"
	"time"

	"modelplane/drift"
	"modelplane/internal/chtest"
)

// TestReaderKeepsToTheEndpointID: samples of a deleted endpoint (id 1) and
// of the one created under its name since (id 2) in the same windows, as
// before retention purges the old ones: the reader given id 2 counts only
// its own, in reports and in a rollout's comparison.
func TestReaderKeepsToTheEndpointID(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	insertID(t, ch, "fraud", 1, rows("v1", base, time.Hour, normal(700, 1, 1, 1), normal(700, 1, 1, 2), normal(700, 0.9, 0.05, 3)))
	insertID(t, ch, "fraud", 1, rows("v2", base, time.Hour, normal(700, 1, 1, 4), normal(700, 1, 1, 5), normal(700, 0.9, 0.05, 6)))
	insertID(t, ch, "fraud", 2, rows("v1", base, time.Hour, normal(300, 1, 1, 7), normal(300, 1, 1, 8), normal(300, 0.1, 0.05, 9)))
	insertID(t, ch, "fraud", 2, rows("v2", base, time.Hour, normal(200, 1, 1, 10), normal(200, 1, 1, 11), normal(200, 0.1, 0.05, 12)))
	r := drift.NewReader(ch, drift.ReaderConfig{})
	w := func(v string) drift.Window { return drift.Window{Version: v, From: base, To: base.Add(time.Hour)} }
	rep, err := r.Report(ctx, "fraud", 2, w("v1"), w("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReferenceSamples != 300 || rep.CurrentSamples != 200 {
		t.Errorf("report counts %d/%d samples, want only id 2's 300/200", rep.ReferenceSamples, rep.CurrentSamples)
	}
	d, err := r.Compare(ctx, "fraud", 2, "v2", "v1", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.ReferenceSamples != 300 || d.CurrentSamples != 200 {
		t.Errorf("compare counts %d/%d samples, want only id 2's 300/200", d.ReferenceSamples, d.CurrentSamples)
	}
}
