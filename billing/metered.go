package billing

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/auth"
)

// Metered is GPU time and its cost over a period, from the hourly rollup.
type Metered struct {
	GPUSeconds int64
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
	var seconds, x3600 uint64
	err := m.ch.QueryRow(ctx, `SELECT sum(gpu_seconds), sum(cost_uusd_x3600) FROM gpu_usage_hourly WHERE hour >= toStartOfHour(?)`,
		from.UTC()).Scan(&seconds, &x3600)
	if err != nil {
		return Metered{}, fmt.Errorf("metered usage: %w", err)
	}
	return Metered{GPUSeconds: int64(seconds), CostMicroUSD: int64((x3600 + 1800) / 3600)}, nil
}
