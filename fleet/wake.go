package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/route"
)

// DefaultWakeGrace is how long an endpoint with min_replicas 0 keeps its
// replica after the last wake request (a 202 or, while it serves, a
// gateway's periodic reminder) before it goes back to zero.
const DefaultWakeGrace = 15 * time.Minute

// Grace is the fleet's wake grace (Options.WakeGrace): how long a woken
// endpoint keeps its replica, and the default scale-to-zero grace of an
// autoscaling policy, so that the two agree.
func (f *Fleet) Grace() time.Duration { return f.wakeGrace }

func (f *Fleet) grace() time.Duration { return f.wakeGrace }

// Wake records that a gateway asked for a replica of endpoint. asleep is
// true when the endpoint was not woken within the grace period before, so
// that a pass now changes what it wants; a wake that only extends the grace
// (or names no endpoint) reports false.
func (f *Fleet) Wake(ctx context.Context, endpoint string) (asleep bool, err error) {
	now := f.now()
	prev, err := db.New(f.pool).EndpointWake(ctx, db.EndpointWakeParams{Now: now, Name: endpoint})
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("wake endpoint %s: %w", endpoint, err)
	}
	return prev == nil || now.Sub(*prev) >= f.grace(), nil
}

// woken reports whether d's endpoint was woken within the grace period.
func (f *Fleet) woken(d db.RoutingRuleListForPlacementRow, now time.Time) bool {
	return d.WokenAt != nil && now.Sub(*d.WokenAt) < f.grace()
}

// wanted is the replica count of every endpoint version the pass aims for.
//
// The endpoint's total is the autoscaler's count (autoscale_counts; before
// its first decision, min_replicas), clamped to [min_replicas,
// max_replicas]; an endpoint at zero that was woken within the grace period
// gets one replica for each version callers reach (weight above 0, or an
// experiment arm), and a shadow or a version kept at weight 0 stays at zero.
// Each version then gets its traffic share of the total (canarySize): its
// weight, an experiment arm's share, a shadow's mirrored percent; at least
// one while the total is above zero; a version routed at weight 0 without
// a mirror keeps min_replicas. During a rollout the candidate is warmed for
// the next step's share once the current step has baked (the rollout
// controller moves no weight before those replicas are ready), and the
// incumbent keeps the replicas it has until the step it lost traffic in has
// baked.
//
// A budget with block enforcement at 100 percent this month caps a version
// at the larger of min_replicas and the replicas it has (none beyond the
// minimum is started; running ones are not stopped); notes says, per
// endpoint, why the cap held replicas back. Caps that apply after this
// (quotas) take the map as it is.
func (f *Fleet) wanted(demand []db.RoutingRuleListForPlacementRow, reps []db.ReplicaListAllRow,
	blocking route.BudgetBlocks) (map[versionKey]int, map[int64]string) {
	now := f.now()
	have := map[versionKey]int{}
	for _, r := range reps {
		have[versionKey{r.EndpointID, r.VersionID}]++
	}
	want := map[versionKey]int{}
	notes := map[int64]string{}
	for _, d := range demand {
		k := versionKey{d.EndpointID, d.VersionID}
		n := canarySize(d, f.woken(d, now), have[k], now)
		if n > int(d.MinReplicas) {
			if why := blocking.For(d.TeamID, d.EndpointID); why != "" {
				if capped := max(int(d.MinReplicas), have[k]); capped < n {
					n = capped
					notes[d.EndpointID] = fmt.Sprintf("%s; no replica beyond min_replicas %d is started", why, d.MinReplicas)
				}
			}
		}
		want[k] = n
	}
	return want, notes
}

// endpointTotal is the replica count of d's endpoint over all its versions.
func endpointTotal(d db.RoutingRuleListForPlacementRow) int {
	total := int(d.MinReplicas)
	if d.AutoscaleDesired != nil {
		total = int(*d.AutoscaleDesired)
	}
	return max(int(d.MinReplicas), min(total, int(d.MaxReplicas)))
}

// canarySize is the replica count of one endpoint version (wanted): its
// share of the endpoint's total, as the doc of wanted says. have is how
// many it has; woken whether its endpoint was woken within the grace.
func canarySize(d db.RoutingRuleListForPlacementRow, woken bool, have int, now time.Time) int {
	total := endpointTotal(d)
	reaches := d.Weight > 0 || d.ExperimentArm
	if total == 0 {
		if woken && reaches {
			return 1
		}
		return 0
	}
	share := float64(d.Weight)
	switch {
	case d.ExperimentArm:
		share = float64(d.ArmShare)
	case d.Weight == 0 && d.ShadowPercent > 0:
		share = d.ShadowPercent
	}
	candidate := d.RoState != "" && d.VersionID == d.RoToVersionID
	incumbent := d.RoState != "" && d.VersionID == d.RoFromVersionID
	baked := d.RoState == "progressing" && d.RoBakeDeadline != nil && !now.Before(*d.RoBakeDeadline)
	if candidate {
		var steps []struct {
			Percent int `json:"percent"`
		}
		_ = json.Unmarshal(d.RoSteps, &steps)
		i := int(d.RoStepIndex)
		switch {
		case d.RoState == "starting" && len(steps) > 0:
			share = max(share, float64(steps[0].Percent)) // the first step, before it is applied
		case (baked || d.RoState == "awaiting_approval") && i+1 < len(steps):
			share = max(share, float64(steps[i+1].Percent)) // warm for the next step
		}
	}
	n := int(d.MinReplicas) // parked at weight 0: kept as before
	if share > 0 || candidate {
		n = max(1, int(math.Ceil(float64(total)*share/100-1e-9)))
	}
	if incumbent && !baked {
		n = max(n, have)
	}
	return min(n, max(int(d.MaxReplicas), 1))
}

// wakeQueue bounds the wake requests waiting for the database; beyond it
// they are dropped (the gateways repeat them every second while callers
// retry).
const wakeQueue = 256

// startWakes subscribes to the gateways' wake requests (one control plane
// of the queue group records each) and records them on one worker; a wake
// of a sleeping endpoint calls onDirty, so the reconciler places its replica
// now rather than at its next tick.
func (in *Intake) startWakes(ctx context.Context) error {
	ch := make(chan string, wakeQueue)
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-ch:
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				asleep, err := in.fleet.Wake(wctx, name)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						in.log.Warn("wake not recorded", slog.String("endpoint", name), slog.String("error", err.Error()))
					}
					continue
				}
				if asleep {
					in.log.Info("endpoint woken", slog.String("endpoint", name))
					if in.onDirty != nil {
						in.onDirty()
					}
				}
			}
		}
	}()
	sub, err := in.nc.QueueSubscribe(busapi.WakeWildcard, "mp-control-plane", func(m *nats.Msg) {
		var w busapi.Wake
		if err := json.Unmarshal(m.Data, &w); err != nil || w.Endpoint == "" || busapi.WakeSubject(w.Endpoint) != m.Subject {
			in.log.Warn("wake request does not decode", slog.String("subject", m.Subject))
			return
		}
		select {
		case ch <- w.Endpoint:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe wake requests: %w", err)
	}
	in.wakeSub = sub
	return nil
}
