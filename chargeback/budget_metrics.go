package chargeback

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	budgetSpentDesc = prometheus.NewDesc("ml_serving_budget_spent_usd",
		"A budget's spend this month as the last budget check measured it.", []string{"team", "endpoint"}, nil)
	budgetDesc = prometheus.NewDesc("ml_serving_budget_usd",
		"A monthly budget.", []string{"team", "endpoint"}, nil)
	budgetForecastDesc = prometheus.NewDesc("ml_serving_budget_forecast_usd",
		"A budget's month-end spend at this month's run rate, as the last check measured it.", []string{"team", "endpoint"}, nil)
)

// budgetsMeasured keeps the budgets the last Check measured, so that a
// scrape reports them without reading ClickHouse. An endpoint label is
// empty for a team-wide budget.
type budgetsMeasured struct {
	mu   sync.Mutex
	last []Budget
}

func (m *budgetsMeasured) set(bs []Budget) {
	m.mu.Lock()
	m.last = bs
	m.mu.Unlock()
}

// Describe sends the budget series' descriptions.
func (b *Budgets) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetSpentDesc
	ch <- budgetDesc
	ch <- budgetForecastDesc
}

// Collect sends each budget's spend, amount and forecast as of the last
// Check (none before the first).
func (b *Budgets) Collect(ch chan<- prometheus.Metric) {
	b.measured.mu.Lock()
	last := b.measured.last
	b.measured.mu.Unlock()
	for _, bu := range last {
		ch <- prometheus.MustNewConstMetric(budgetSpentDesc, prometheus.GaugeValue, float64(bu.SpentUUSD)/1e6, bu.Team, bu.Endpoint)
		ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(bu.MonthlyUUSD)/1e6, bu.Team, bu.Endpoint)
		ch <- prometheus.MustNewConstMetric(budgetForecastDesc, prometheus.GaugeValue, float64(bu.ForecastUUSD)/1e6, bu.Team, bu.Endpoint)
	}
}
