package chargeback

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/money"
)

// Advice kinds.
const (
	// AdviceMIG: a whole GPU used lightly fits a MIG slice.
	AdviceMIG = "mig_profile"
	// AdviceLowerMin: the endpoint's replicas carry a fraction of their
	// target load; fewer would do.
	AdviceLowerMin = "lower_min_replicas"
	// AdviceScaleToZero: the endpoint serves nothing most of the day.
	AdviceScaleToZero = "scale_to_zero"
)

// Right-sizing thresholds (the right-sizing advisor of the seed documents).
const (
	// MIGMaxUtilPct and MIGMaxMemoryPct: a whole GPU under both fits a slice.
	MIGMaxUtilPct   = 30.0
	MIGMaxMemoryPct = 40.0
	// LowLoadPct: replicas under this share of their target load.
	LowLoadPct = 30.0
	// IdleHoursPerDay: an endpoint idle longer than this should scale to zero.
	IdleHoursPerDay = 16.0
	// DefaultTargetUtilPct is the per-replica GPU utilisation the advisor
	// takes as an endpoint's target load (the autoscaler's default target).
	DefaultTargetUtilPct = 60.0
	// AdviceWindow is how much history advice reads: the last 7 whole days.
	AdviceWindow = 7 * 24 * time.Hour
	// hoursPerMonth prices savings per month (365.25 × 24 / 12).
	hoursPerMonth = 730.5
)

// migProfile is a MIG slice of an 80 GB A100 or H100: its compute in
// sevenths and its memory.
type migProfile struct {
	name     string
	sevenths int
	memoryMB int64
}

var migProfiles = []migProfile{
	{"mig-1g.10gb", 1, 10 * 1024}, {"mig-2g.20gb", 2, 20 * 1024}, {"mig-3g.40gb", 3, 40 * 1024}, {"mig-4g.40gb", 4, 40 * 1024},
}

// gpuMemoryMB is a GPU type's memory, read from its name ("A100-80GB");
// 80 GB when the name does not say.
func gpuMemoryMB(gpuType string) int64 {
	if i := strings.LastIndex(gpuType, "-"); i >= 0 && strings.HasSuffix(gpuType, "GB") {
		var gb int64
		if _, err := fmt.Sscanf(gpuType[i+1:len(gpuType)-2], "%d", &gb); err == nil && gb > 0 {
			return gb * 1024
		}
	}
	return 80 * 1024
}

// Advice is one right-sizing suggestion with the numbers behind it.
type Advice struct {
	Kind     string `json:"kind"`
	Team     string `json:"team"`
	Endpoint string `json:"endpoint"`
	Version  string `json:"version,omitempty"`
	GPUType  string `json:"gpu_type,omitempty"`
	// Summary says what to do and why, with the numbers, in a sentence.
	Summary string `json:"summary"`
	// AvgReplicas is the allocations held on average over the window.
	AvgReplicas float64 `json:"avg_replicas"`
	AvgUtilPct  float64 `json:"avg_util_pct"`
	AvgMemoryMB float64 `json:"avg_memory_mb,omitempty"`
	// SuggestedProfile (mig_profile), MinReplicas and SuggestedMin
	// (lower_min_replicas), IdleHoursPerDay (scale_to_zero).
	SuggestedProfile string  `json:"suggested_profile,omitempty"`
	MinReplicas      int32   `json:"min_replicas,omitempty"`
	SuggestedMin     int32   `json:"suggested_min,omitempty"`
	IdleHoursPerDay  float64 `json:"idle_hours_per_day,omitempty"`
	// MonthlySavingUUSD is what following the advice saves in a month at
	// the rates in force now, at the window's usage.
	MonthlySavingUUSD int64 `json:"monthly_saving_uusd"`
}

// MinReplicas returns an endpoint's minimum replicas as p sees it; the
// endpoint package's Service answers it (handlers wire it).
type MinReplicas func(ctx context.Context, p *auth.Principal, endpoint string) (int32, error)

// Advisor reads usage and suggests right-sizing.
type Advisor struct {
	reports *Service
	min     MinReplicas
	// TargetUtilPct is the per-replica target load; default
	// DefaultTargetUtilPct.
	TargetUtilPct float64
}

// NewAdvisor returns an Advisor; min may be nil (no lower-minimum advice).
func NewAdvisor(reports *Service, min MinReplicas) *Advisor {
	return &Advisor{reports: reports, min: min, TargetUtilPct: DefaultTargetUtilPct}
}

// Advise reads the last AdviceWindow of whole hours (scoped to p, and to
// one endpoint when endpoint is set) and returns every suggestion, largest
// saving first.
func (a *Advisor) Advise(ctx context.Context, p *auth.Principal, endpoint string) ([]Advice, error) {
	s := a.reports
	to := s.clock.Now().UTC().Truncate(time.Hour)
	from := to.Add(-AdviceWindow)
	all, teams := scope(p)
	out := []Advice{}
	if !all && len(teams) == 0 {
		return out, nil
	}
	var rates *billing.Rates
	if s.rates != nil {
		var err error
		if rates, err = billing.LoadRates(ctx, s.rates); err != nil {
			return nil, err
		}
	}
	f := filter{all: all, teams: teams, endpoint: endpoint}
	window := AdviceWindow.Seconds()
	// Whole GPUs used lightly, per endpoint version and GPU type.
	rows, err := s.read(ctx, []Dimension{DimTeam, DimEndpoint, DimVersion, DimGPUType, DimAllocation}, f, from, to, tableHourly)
	if err != nil {
		return nil, err
	}
	type epUse struct {
		team    string
		seconds int64
		util    float64
	}
	perEndpoint := map[string]*epUse{}
	for _, r := range rows {
		if r.Endpoint == "" {
			continue
		}
		u := perEndpoint[r.Endpoint]
		if u == nil {
			u = &epUse{team: r.Team}
			perEndpoint[r.Endpoint] = u
		}
		u.seconds += r.GPUSeconds
		u.util += r.UtilPctSum
		if r.Allocation != "full" {
			continue
		}
		util, mem := r.AvgUtilPct(), r.AvgMemoryMB()
		total := gpuMemoryMB(r.GPUType)
		if util >= MIGMaxUtilPct || mem >= MIGMaxMemoryPct/100*float64(total) {
			continue
		}
		// The smallest slice with the memory in use plus a fifth, and
		// the compute in use plus a fifth.
		var pick *migProfile
		for i := range migProfiles {
			m := &migProfiles[i]
			if float64(m.memoryMB) >= mem*1.2 && float64(m.sevenths)/7*100 >= util*1.2 {
				pick = m
				break
			}
		}
		if pick == nil {
			continue
		}
		avg := float64(r.GPUSeconds) / window
		adv := Advice{Kind: AdviceMIG, Team: r.Team, Endpoint: r.Endpoint, Version: r.Version, GPUType: r.GPUType, AvgReplicas: avg,
			AvgUtilPct: util, AvgMemoryMB: mem, SuggestedProfile: pick.name}
		now := s.clock.Now()
		full, okF := rates.At(r.GPUType, "full", now)
		slice, okS := rates.At(r.GPUType, pick.name, now)
		if okF && okS && full > slice {
			adv.MonthlySavingUUSD = int64(math.Round(float64(full-slice) * avg * hoursPerMonth))
		}
		adv.Summary = fmt.Sprintf("%s %s runs %.1f whole %s GPUs at %.1f%% average utilisation and %.1f GB of %d GB memory (under %.0f%% and %.0f%%): %s fits, saving $%s a month at current rates.",
			r.Endpoint, r.Version, avg, r.GPUType, util, mem/1024, total/1024, MIGMaxUtilPct, MIGMaxMemoryPct, pick.name, money.USD(adv.MonthlySavingUUSD))
		out = append(out, adv)
	}
	// Replicas far under their target load.
	if a.min != nil {
		for name, u := range perEndpoint {
			if u.seconds == 0 {
				continue
			}
			util := u.util / float64(u.seconds)
			load := util / a.TargetUtilPct * 100
			if load >= LowLoadPct {
				continue
			}
			min, err := a.min(ctx, p, name)
			if err != nil || min <= 1 {
				continue // gone, or nothing lower to suggest but zero (below)
			}
			avg := float64(u.seconds) / window
			suggested := max(int32(math.Ceil(avg*util/a.TargetUtilPct)), 1)
			if suggested >= min {
				continue
			}
			adv := Advice{Kind: AdviceLowerMin, Team: u.team, Endpoint: name, AvgReplicas: avg, AvgUtilPct: util, MinReplicas: min, SuggestedMin: suggested}
			// The replicas dropped cost the endpoint's average per replica.
			rep, err := s.Report(ctx, p, Query{From: from, To: to, Endpoint: name})
			if err == nil && avg > 0 {
				perReplicaMonth := float64(rep.Total.CostX3600) / 3600 / window * 3600 * hoursPerMonth / avg
				adv.MonthlySavingUUSD = int64(math.Round(perReplicaMonth * float64(min-suggested)))
			}
			adv.Summary = fmt.Sprintf("%s averages %.1f replicas at %.1f%% GPU utilisation, %.0f%% of its %.0f%% target load (under %.0f%%): lower the minimum from %d to %d, saving about $%s a month.",
				name, avg, util, load, a.TargetUtilPct, LowLoadPct, min, suggested, money.USD(adv.MonthlySavingUUSD))
			out = append(out, adv)
		}
	}
	// Endpoints idle most of the day.
	idle, err := a.idle(ctx, f, from, to)
	if err != nil {
		return nil, err
	}
	days := AdviceWindow.Hours() / 24
	for _, r := range idle {
		perDay := float64(r.idleHours) / days
		if perDay <= IdleHoursPerDay {
			continue
		}
		adv := Advice{Kind: AdviceScaleToZero, Team: r.team, Endpoint: r.endpoint, IdleHoursPerDay: perDay,
			MonthlySavingUUSD: int64(math.Round(float64(r.idleX3600) / 3600 / days * hoursPerMonth / 24))}
		adv.Summary = fmt.Sprintf("%s served no request in %.1f hours a day on average over the last %d days (over %.0f): scale to zero, saving $%s a month of idle GPU time.",
			r.endpoint, perDay, int(days), IdleHoursPerDay, money.USD(adv.MonthlySavingUUSD))
		out = append(out, adv)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].MonthlySavingUUSD != out[j].MonthlySavingUUSD {
			return out[i].MonthlySavingUUSD > out[j].MonthlySavingUUSD
		}
		return out[i].Endpoint+out[i].Kind < out[j].Endpoint+out[j].Kind
	})
	return out, nil
}

type idleRow struct {
	team, endpoint string
	idleHours      int64
	idleX3600      int64
}

// idle counts, per endpoint, the hours of [from, to) in which it held GPUs
// and served no request, and what those hours cost.
func (a *Advisor) idle(ctx context.Context, f filter, from, to time.Time) ([]idleRow, error) {
	cond, args := f.where()
	rows, err := a.reports.ch.Query(ctx, `SELECT team, endpoint, toInt64(countIf(req = 0)), toInt64(sumIf(cost, req = 0)) FROM (
		SELECT team, endpoint, hour, sum(requests) AS req, sum(cost_uusd_x3600) AS cost FROM gpu_usage_hourly
		WHERE hour >= ? AND hour < ? AND endpoint != ''`+cond+` GROUP BY team, endpoint, hour) GROUP BY team, endpoint`,
		append([]any{from, to}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("idle hours: %w", err)
	}
	defer rows.Close()
	var out []idleRow
	for rows.Next() {
		var r idleRow
		if err := rows.Scan(&r.team, &r.endpoint, &r.idleHours, &r.idleX3600); err != nil {
			return nil, fmt.Errorf("idle hours: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
