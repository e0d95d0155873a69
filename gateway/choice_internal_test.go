package gateway

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"testing"
	"time"

	"modelplane/busapi"
)

// within reports whether got successes of n trials at probability p lie
// within five standard deviations of the mean: a correct draw fails about
// once in three million runs.
func within(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	if d := math.Abs(float64(got) - mean); d > 5*sd {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f", what, got, n, mean, 5*sd)
	}
}

func twoVersions(stable, canary int) busapi.Route {
	return busapi.Route{Endpoint: "e", Versions: []busapi.RouteVersion{
		{Name: "stable", Weight: stable, Replicas: []busapi.RouteReplica{{ID: "s", Addr: "10.0.0.1:1"}}},
		{Name: "canary", Weight: canary, Replicas: []busapi.RouteReplica{{ID: "c", Addr: "10.0.0.2:1"}}}}}
}

// TestSplitChoiceAccuracy draws the weighted split 100,000 times at each
// canary share.
func TestSplitChoiceAccuracy(t *testing.T) {
	t.Parallel()
	const n = 100_000
	for _, pct := range []int{1, 5, 25, 50} {
		t.Run(fmt.Sprintf("%d%%", pct), func(t *testing.T) {
			t.Parallel()
			rt := newRoute(twoVersions(100-pct, pct), nil, routeDefaults{timeout: time.Second})
			canary := 0
			for range n {
				if rt.pick().name == "canary" {
					canary++
				}
			}
			within(t, "canary", canary, n, float64(pct)/100)
		})
	}
}

func withExperiment(name string, arms ...busapi.RouteArm) busapi.Route {
	src := twoVersions(100, 0)
	src.Experiment = &busapi.RouteExperiment{Name: name, Arms: arms}
	return src
}

// TestExperimentAssignment: a user keeps its arm on every call and on
// another gateway (a route built afresh); another experiment name
// reshuffles the users independently; arm shares hold over many users; an
// arm whose version is not routed yields no version (the caller falls back
// to the split).
func TestExperimentAssignment(t *testing.T) {
	t.Parallel()
	arms := []busapi.RouteArm{{Version: "stable", Share: 20}, {Version: "canary", Share: 80}}
	a := newRoute(withExperiment("checkout-1", arms...), nil, routeDefaults{timeout: time.Second}).experiment
	b := newRoute(withExperiment("checkout-1", arms...), nil, routeDefaults{timeout: time.Second}).experiment
	other := newRoute(withExperiment("checkout-2", arms...), nil, routeDefaults{timeout: time.Second}).experiment
	const users = 100_000
	canary, moved, canaryOther := 0, 0, 0
	for i := range users {
		u := "user-" + strconv.Itoa(i)
		v := a.assign(u)
		if v == nil {
			t.Fatalf("user %s got no arm", u)
		}
		if again, there := a.assign(u), b.assign(u); again != v || there.name != v.name {
			t.Fatalf("user %s: %s, then %s, on another gateway %s; want the same arm", u, v.name, again.name, there.name)
		}
		if want := fnvArm(a, "checkout-1", u); v != want {
			t.Fatalf("user %s: %s, want %s (hash/fnv's FNV-64a of name, NUL, user)", u, v.name, want.name)
		}
		if v.name == "canary" {
			canary++
		}
		w := other.assign(u)
		if w.name == "canary" {
			canaryOther++
		}
		if w.name != v.name {
			moved++
		}
	}
	within(t, "canary users", canary, users, 0.8)
	within(t, "canary users of the other experiment", canaryOther, users, 0.8)
	// Independent assignments differ with probability 2 × 0.2 × 0.8.
	within(t, "users whose arm changed with the experiment's name", moved, users, 0.32)

	gone := newRoute(withExperiment("gone", busapi.RouteArm{Version: "stable", Share: 50}, busapi.RouteArm{Version: "v9", Share: 50}), nil, routeDefaults{timeout: time.Second}).experiment
	nils := 0
	for i := range 1000 {
		if v := gone.assign(strconv.Itoa(i)); v == nil {
			nils++
		} else if v.name != "stable" {
			t.Fatalf("assigned %s, want stable or none", v.name)
		}
	}
	if nils == 0 || nils == 1000 {
		t.Errorf("%d of 1000 users fell in the arm of an unrouted version, want about half", nils)
	}
}

// fnvArm is the arm of user by the stored assignment: hash/fnv's FNV-64a
// of the experiment's name, a NUL byte and the user id, modulo the total.
func fnvArm(e *experiment, name, user string) *version {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name + "\x00" + user))
	n := int(h.Sum64() % uint64(e.total))
	for _, a := range e.arms {
		if n < a.share {
			return a.v
		}
		n -= a.share
	}
	return nil
}

// TestExperimentAssignNoAlloc: assigning a user allocates nothing (not
// parallel: AllocsPerRun counts the whole process).
func TestExperimentAssignNoAlloc(t *testing.T) {
	e := newRoute(withExperiment("checkout-1", busapi.RouteArm{Version: "stable", Share: 20}, busapi.RouteArm{Version: "canary", Share: 80}),
		nil, routeDefaults{timeout: time.Second}).experiment
	if n := testing.AllocsPerRun(100, func() { e.assign("user-42") }); n != 0 {
		t.Errorf("assign allocates %v times, want 0", n)
	}
}
