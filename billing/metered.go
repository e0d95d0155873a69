package billing

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/auth"
)

// Metered is GPU time, CPU core time and their cost over a period, from the
// hourly rollup.
type Metered struct {
	// GPUSeconds counts GPU allocation-seconds (whole GPUs, MIG slices, MPS
	// shares); CPU cores are not GPUs and are counted in CPUCoreSeconds.
	GPUSeconds     int64
	CPUCoreSeconds int64
	// CostMicroUSD is the exact cost rounded once, half up, to the micro-dollar.
	CostMicroUSD int64
}

// Meter reads metered usage back from ClickHouse.
type Meter struct {
	ch driver.Conn
}

// NewMeter returns a Meter on ClickHouse.
func NewMeter(ch driver.Conn) *Meter { return &Meter{ch: ch} }

// Since sums every team's usage from the start of from's hour on; platform
// admins and finance only.
func (m *Meter) Since(ctx context.Context, p *auth.Principal, from time.Time) (Metered, error) {
	if !p.Finance() {
		return Metered{}, auth.ErrForbidden
	}
	var gpu, cpu, x3600 uint64
	err := m.ch.QueryRow(ctx, `SELECT sumIf(gpu_seconds, gpu_type != 'cpu'), sumIf(gpu_seconds, gpu_type = 'cpu'), sum(cost_uusd_x3600) `+
		`FROM gpu_usage_hourly WHERE hour >= toStartOfHour(?)`, from.UTC()).Scan(&gpu, &cpu, &x3600)
	if err != nil {
		return Metered{}, fmt.Errorf("metered usage: %w", err)
	}
	return Metered{GPUSeconds: int64(gpu), CPUCoreSeconds: int64(cpu), CostMicroUSD: int64((x3600 + 1800) / 3600)}, nil
}
