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

// CPUResource is the quota resource of CPU replicas' cores, counted in
// cores, and MemoryResource that of the host memory replicas are given,
// counted in MiB; every other resource is a GPU type counted in GPU
// equivalents.
const (
	CPUResource    = busapi.CPUType
	MemoryResource = "memory"
)

// counted reports whether resource is counted as it is written (cores,
// MiB) rather than in sevenths of a GPU.
func counted(resource string) bool { return resource == CPUResource || resource == MemoryResource }

// Units is a quota amount in the units usage is counted in: cores, MiB, or
// sevenths of a GPU (a MIG slice holds its compute slices out of seven).
func Units(resource string, amount float64) float64 {
	if counted(resource) {
		return amount
	}
	return amount * float64(placement.Compute(busapi.ProfileFull))
}

// Unit is what an amount of resource counts: "cores", "MiB" or "GPU
// equivalents".
func Unit(resource string) string {
	switch resource {
	case CPUResource:
		return "cores"
	case MemoryResource:
		return "MiB"
	}
	return "GPU equivalents"
}

// Use is what a replica holds of one resource, in units.
type Use struct {
	Resource string
	Units    int
}

// ReplicaUses is what a stored replica holds: a CPU replica its cores and
// its memory, a GPU replica its GPU type's sevenths (and host memory, when
// it was given some).
func ReplicaUses(gpuType, profile string, cores, memoryMB int32, slots int) []Use {
	var out []Use
	if gpuType == busapi.CPUType || profile == busapi.ProfileCPU {
		out = append(out, Use{CPUResource, int(cores)})
	} else {
		out = append(out, Use{gpuType, placement.Sevenths(profile, slots)})
	}
	if memoryMB > 0 {
		out = append(out, Use{MemoryResource, int(memoryMB)})
	}
	return out
}

// ResultUses is what a placement result takes.
func ResultUses(res placement.Result) []Use {
	var out []Use
	if res.Profile == busapi.ProfileCPU {
		out = append(out, Use{CPUResource, res.CPUCores})
	} else {
		out = append(out, Use{res.GPUType, placement.Sevenths(res.Profile, len(res.Slots))})
	}
	if res.HostMemoryMB > 0 {
		out = append(out, Use{MemoryResource, res.HostMemoryMB})
	}
	return out
}

// Amount formats units of resource as people read them: "16", "2.43".
func Amount(resource string, units float64) string {
	if !counted(resource) {
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
	switch resource {
	case CPUResource:
		what = "CPU cores"
	case MemoryResource:
		what = "MiB of memory"
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
