package quota

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/placement"
)

// CPUResource is the quota resource of CPU replicas, counted in cores;
// every other resource is a GPU type counted in GPU equivalents.
const CPUResource = busapi.CPUType

// Units is a quota amount in the units usage is counted in: cores, or
// sevenths of a GPU (a MIG slice holds its compute slices out of seven).
func Units(resource string, amount float64) float64 {
	if resource == CPUResource {
		return amount
	}
	return amount * float64(placement.Compute(busapi.ProfileFull))
}

// ReplicaUnits is the resource and units a stored replica holds.
func ReplicaUnits(gpuType, profile string, cores int32, slots int) (string, int) {
	if gpuType == busapi.CPUType || profile == busapi.ProfileCPU {
		return CPUResource, int(cores)
	}
	return gpuType, placement.Sevenths(profile, slots)
}

// ResultUnits is the resource and units a placement result takes.
func ResultUnits(res placement.Result) (string, int) {
	if res.Profile == busapi.ProfileCPU {
		return CPUResource, res.CPUCores
	}
	return res.GPUType, placement.Sevenths(res.Profile, len(res.Slots))
}

// Amount formats units of resource as people read them: "16", "2.43".
func Amount(resource string, units float64) string {
	if resource != CPUResource {
		units /= float64(placement.Compute(busapi.ProfileFull))
	}
	if math.Abs(units-math.Round(units)) < 1e-9 {
		return strconv.FormatFloat(math.Round(units), 'f', -1, 64)
	}
	return strconv.FormatFloat(units, 'f', 2, 64)
}

// Note says why a team gets no more of resource: "quota: team risk holds
// 16 of 16 A100-80GB GPUs". Placement errors that start with "quota: "
// are quota refusals.
func Note(team, resource string, used int, limit float64) string {
	what := resource + " GPUs"
	if resource == CPUResource {
		what = "CPU cores"
	}
	return fmt.Sprintf("quota: team %s holds %s of %s %s", team, Amount(resource, float64(used)), Amount(resource, limit), what)
}

// Table is every team's quotas in units, as one reconcile pass applies
// them: a team's own quota of a resource, else the operator's default of
// it, else no cap.
type Table struct {
	limit    map[int64]map[string]float64 // team → resource → limit in units
	defaults map[string]float64           // resource → limit in units
	teamName map[int64]string
}

// Load reads, inside the caller's transaction q, every team's quotas and
// the names of teams, the teams a pass places for, so that
// a team without a quota row is capped by defaults (resource → amount, as
// Quota.Amount counts it; nil or empty: such teams are uncapped).
func Load(ctx context.Context, q *db.Queries, defaults map[string]float64, teams []int64) (Table, error) {
	rows, err := q.TeamQuotaListAll(ctx)
	if err != nil {
		return Table{}, fmt.Errorf("load quotas: %w", err)
	}
	t := Table{limit: map[int64]map[string]float64{}, defaults: map[string]float64{}, teamName: map[int64]string{}}
	for _, r := range rows {
		if t.limit[r.TeamID] == nil {
			t.limit[r.TeamID] = map[string]float64{}
		}
		t.limit[r.TeamID][r.Resource] = Units(r.Resource, r.Amount)
		t.teamName[r.TeamID] = r.Team
	}
	for res, amount := range defaults {
		t.defaults[res] = Units(res, amount)
	}
	if len(t.defaults) > 0 {
		var unnamed []int64
		for _, id := range teams {
			if _, ok := t.teamName[id]; !ok {
				unnamed = append(unnamed, id)
			}
		}
		if len(unnamed) > 0 {
			named, err := q.TeamListByIDs(ctx, unnamed)
			if err != nil {
				return Table{}, fmt.Errorf("load quotas: %w", err)
			}
			for _, n := range named {
				t.teamName[n.ID] = n.Name
			}
		}
	}
	return t, nil
}

// Empty reports whether no team has a quota and there is no default:
// nothing is capped.
func (t Table) Empty() bool { return len(t.limit) == 0 && len(t.defaults) == 0 }

// Limit is team's limit of resource in units: its own quota, else the
// default; ok is false when neither exists (no cap).
func (t Table) Limit(team int64, resource string) (limit float64, ok bool) {
	if limit, ok = t.limit[team][resource]; ok {
		return limit, true
	}
	limit, ok = t.defaults[resource]
	return limit, ok
}

// Limits is every limit of team in units, its own quotas over the
// defaults.
func (t Table) Limits(team int64) map[string]float64 {
	out := make(map[string]float64, len(t.defaults)+len(t.limit[team]))
	for res, l := range t.defaults {
		out[res] = l
	}
	for res, l := range t.limit[team] {
		out[res] = l
	}
	return out
}

// Over reports whether used units of resource exceed team's quota.
func (t Table) Over(team int64, resource string, used int) bool {
	limit, ok := t.Limit(team, resource)
	return ok && float64(used) > limit+1e-9
}

// Note is Note for team's quota of resource, used units held.
func (t Table) Note(team int64, resource string, used int) string {
	limit, _ := t.Limit(team, resource)
	return Note(t.teamName[team], resource, used, limit)
}
