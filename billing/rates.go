package billing

import (
	"context"
	"fmt"
	"sort"
	"time"

	"modelplane/db"
)

// Rate is the price of one GPU allocation from EffectiveFrom on, until the
// next rate of the same GPU type and profile takes over.
type Rate struct {
	GPUType       string
	Profile       string
	UUSDPerHour   int64
	EffectiveFrom time.Time
}

// Rates is an immutable rate table; it is safe for concurrent use.
type Rates struct {
	byKey map[rateKey][]step
}

type rateKey struct{ gpuType, profile string }

// step is a rate from a Unix-nanosecond instant on; steps are kept sorted so
// that the rate of an instant is one binary search away.
type step struct {
	from        int64
	uusdPerHour int64
}

// NewRates builds a table from rates in any order. When two rates of one
// type and profile share an effective time the later one in rs wins; the
// database forbids that with a unique key.
func NewRates(rs []Rate) *Rates {
	t := &Rates{byKey: make(map[rateKey][]step)}
	for _, r := range rs {
		k := rateKey{r.GPUType, r.Profile}
		t.byKey[k] = append(t.byKey[k], step{from: r.EffectiveFrom.UnixNano(), uusdPerHour: r.UUSDPerHour})
	}
	for k, steps := range t.byKey {
		sort.SliceStable(steps, func(i, j int) bool { return steps[i].from < steps[j].from })
		out := steps[:0]
		for _, s := range steps {
			if n := len(out); n > 0 && out[n-1].from == s.from {
				out[n-1] = s
				continue
			}
			out = append(out, s)
		}
		t.byKey[k] = out
	}
	return t
}

// At returns the rate in force for the second that starts at t: the rate of
// gpuType and profile with the latest effective time at or before t. A rate
// effective in the middle of a second applies from the next whole second, so
// a new rate never reprices time before it took effect. ok is false when no
// rate of that type and profile was in force at t.
func (r *Rates) At(gpuType, profile string, t time.Time) (uusdPerHour int64, ok bool) {
	if r == nil {
		return 0, false
	}
	steps := r.byKey[rateKey{gpuType, profile}]
	at := t.UnixNano()
	// The first step that starts after t; the one before it is in force.
	i := sort.Search(len(steps), func(i int) bool { return steps[i].from > at })
	if i == 0 {
		return 0, false
	}
	return steps[i-1].uusdPerHour, true
}

// Len is the number of rate steps in the table.
func (r *Rates) Len() int {
	if r == nil {
		return 0
	}
	n := 0
	for _, s := range r.byKey {
		n += len(s)
	}
	return n
}

// Lister reads every cost rate; *db.Queries is one.
type Lister interface {
	CostRateListAll(ctx context.Context) ([]db.CostRate, error)
}

// LoadRates reads the whole rate table. The table is small (a row per GPU
// type, profile and price change), so it is read whole and searched in
// memory rather than queried per second of usage.
func LoadRates(ctx context.Context, q Lister) (*Rates, error) {
	rows, err := q.CostRateListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("load cost rates: %w", err)
	}
	rs := make([]Rate, len(rows))
	for i, row := range rows {
		rs[i] = Rate{GPUType: row.GPUType, Profile: row.Profile, UUSDPerHour: row.UusdPerHour, EffectiveFrom: row.EffectiveFrom}
	}
	return NewRates(rs), nil
}
