package chargeback_test

import (
	"testing"
	"time"

	"modelplane/chargeback"
	"modelplane/internal/chtest"
)

// TestTokensOfARecreatedEndpoint: endpoint chat of team old was deleted and
// team new created chat again; the statistics of both are in the window
// (before retention purges the old ones). The new team's chat is credited
// only its own tokens.
func TestTokensOfARecreatedEndpoint(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	from, to := t0, t0.Add(time.Hour)
	var usage []rec
	for s := from; s.Before(from.Add(10 * time.Second)); s = s.Add(time.Second) {
		usage = append(usage, rec{ts: s, node: "n1", gpuType: "A100-80GB", profile: "full", team: "new", endpoint: "chat", model: "m", ver: "v1",
			rate: 3_600_000})
	}
	insert(t, ch, usage)
	b, err := ch.PrepareBatch(t.Context(), "INSERT INTO request_stats (window_start, window_end, endpoint, team, version, requests, tokens)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		team   string
		tokens uint64
	}{{"old", 1_000_000}, {"new", 10}} {
		if err := b.Append(t0.Add(time.Minute), t0.Add(time.Minute+5*time.Second), "chat", r.team, "v1", uint64(1), r.tokens); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	svc := chargeback.New(ch, nil, clockAt(t, to.Add(48*time.Hour)))
	rep, err := svc.Report(t.Context(), finance, chargeback.Query{From: from, To: to, Source: chargeback.SourceRaw,
		GroupBy: []chargeback.Dimension{chargeback.DimEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Tokens != 10 {
		t.Fatalf("rows %+v; want chat credited only team new's 10 tokens", rep.Rows)
	}
}
