package scenario

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"modelplane/sim/profile"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from this build's reports")

// TestReportsMatchGolden runs small fleets that take every path of the
// engine the scenarios use (the seed fleet's length mix, tenants with
// priorities, growth and priority preemption, chunked prefill, shedding,
// draining) and compares each whole report with the one stored in
// testdata/golden. A run is a pure function of its scenario, so a change
// made for speed must leave these bytes alone; `go test -run
// TestReportsMatchGolden -update` rewrites them when a change means to
// alter what a run measures.
func TestReportsMatchGolden(t *testing.T) {
	t.Parallel()
	fleet, err := Builtin("seed-fleet")
	if err != nil {
		t.Fatal(err)
	}
	fleet.Duration, fleet.Warmup = 20*time.Second, 5*time.Second
	fleet.Arrivals.Rate, fleet.Versions[0].GPUs = 200, 30

	capacity, err := Builtin("seed-capacity")
	if err != nil {
		t.Fatal(err)
	}

	pressed := smallCanary(5)
	pressed.Name = "pressed"
	pressed.Tenants = []Tenant{{Name: "a", Share: 3}, {Name: "b", Share: 1, Priority: 1}}
	for i := range pressed.Versions {
		p := &pressed.Versions[i].Profile
		p.KVReserve, p.MaxPrefillTokens, p.UsableGB = profile.ReserveStep, 512, 2
	}
	pressed.Arrivals.Rate, pressed.ShedOutstanding, pressed.Drain = 30, 40, true

	for _, sc := range []Scenario{fleet, capacity, pressed} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			got, err := json.MarshalIndent(run(t, sc), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", "golden", sc.Name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report of %s differs from %s (%d bytes, want %d); a run must stay a pure function of its scenario", sc.Name, file, len(got), len(want))
			}
		})
	}
}
