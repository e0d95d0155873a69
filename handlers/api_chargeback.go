package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/chargeback"
	"modelplane/money"
)

// errNoChargeback is the answer without a usage store (no ClickHouse).
var errNoChargeback = huma.Error503ServiceUnavailable("chargeback is unavailable: no usage store is configured")

type chargebackInput struct {
	From     string `query:"from" required:"true" doc:"Start of the period, included: RFC 3339 or a date (midnight UTC)."`
	To       string `query:"to" required:"true" doc:"End of the period, excluded: RFC 3339 or a date."`
	GroupBy  string `query:"group_by" doc:"Comma-separated subset of team, endpoint, model, version, gpu_type, allocation, caller_team, graph; rows nest in that order. caller_team splits each endpoint's cost among the teams that called it through a grant, by their share of its requests (tokens for LLMs) in each hour; the owning team keeps the rest (docs/sharing.md). graph charges each inference graph its steps' shares of the endpoints they called the same way; with endpoint, a graph's rows are its cost by step; graph_version (which implies graph) splits each graph's share by the graph version whose steps made the calls (docs/graphs.md)."`
	Team     string `query:"team" doc:"Only this team's usage (drill-down)."`
	Endpoint string `query:"endpoint" doc:"Only this endpoint's usage (drill-down)."`
	Graph    string `query:"graph" doc:"Only the shares charged to this graph endpoint: its steps' cost (docs/graphs.md)."`
	Format   string `query:"format" enum:"json,csv" doc:"csv answers text/csv, as Accept: text/csv does."`
	Accept   string `header:"Accept"`
}

// ChargebackRow is one group of a report, or its total. The dimensions the
// report does not group by are absent; team is "" for unallocated GPU time.
type ChargebackRow struct {
	Team         *string `json:"team,omitempty"`
	Endpoint     *string `json:"endpoint,omitempty"`
	Model        *string `json:"model,omitempty"`
	Version      *string `json:"version,omitempty"`
	GPUType      *string `json:"gpu_type,omitempty"`
	Allocation   *string `json:"allocation,omitempty"`
	CallerTeam   *string `json:"caller_team,omitempty" doc:"The team whose calls the row's cost is for: a team granted the endpoint, or its owning team for its own use."`
	Graph        *string `json:"graph,omitempty" doc:"The inference graph endpoint whose steps the row's cost is for; empty for calls from outside a graph."`
	GraphVersion *string `json:"graph_version,omitempty" doc:"The version of the graph whose steps made the calls (group_by graph_version)."`
	GPUSeconds   int64   `json:"gpu_seconds" doc:"GPU allocation-seconds: a whole GPU's second and a MIG slice's second each count one; CPU cores are in cpu_core_seconds, never here."`
	GPUHours     string  `json:"gpu_hours" doc:"gpu_seconds / 3600 as a decimal, six places at most."`
	CostUSD      string  `json:"cost_usd" doc:"cost_uusd as an exact decimal of dollars."`
	CostUUSD     int64   `json:"cost_uusd" doc:"Cost in micro-USD; the rows add up to the total (docs/chargeback.md)."`
	// CostX3600 is the unrounded cost, for reconciling by hand.
	CostX3600           int64    `json:"cost_uusd_x3600" doc:"The exact cost in micro-USD times 3600: the sum of the per-hour rates of every second."`
	Requests            int64    `json:"requests"`
	CostPer1kRequestUSD *string  `json:"cost_per_1k_requests_usd,omitempty"`
	Tokens              *int64   `json:"tokens,omitempty" doc:"Tokens the gateways counted (LLM endpoints), when the grouping does not split by hardware."`
	CostPer1MTokensUSD  *string  `json:"cost_per_1m_tokens_usd,omitempty"`
	AvgGPUUtilPct       *float64 `json:"avg_gpu_util_pct,omitempty" doc:"Mean GPU utilisation over gpu_seconds; absent where no GPU was held (not measured)."`
	CPUCoreSeconds      int64    `json:"cpu_core_seconds" doc:"CPU core-seconds (gpu_type cpu, allocation cpu-core), priced per core-hour."`
	CPUCoreHours        string   `json:"cpu_core_hours" doc:"cpu_core_seconds / 3600 as a decimal, six places at most."`
}

// ChargebackBody is a chargeback report.
type ChargebackBody struct {
	From         time.Time       `json:"from"`
	To           time.Time       `json:"to"`
	GroupBy      []string        `json:"group_by"`
	RatesVersion string          `json:"rates_version" doc:"The id of the newest cost rate when the report was read (r<id>)."`
	Delayed      bool            `json:"delayed" doc:"The period reaches past the newest usage stored: recent seconds may still arrive."`
	NewestUsage  *time.Time      `json:"newest_usage,omitempty"`
	Rows         []ChargebackRow `json:"rows"`
	Total        ChargebackRow   `json:"total"`
}

type chargebackOutput struct {
	ContentType        string `header:"Content-Type"`
	ContentDisposition string `header:"Content-Disposition"`
	Body               []byte
}

// chargebackQuery parses the period, grouping and filters shared by the API
// and the portal's CSV download.
func chargebackQuery(from, to, groupBy, team, endpoint, graph string) (chargeback.Query, error) {
	var q chargeback.Query
	var err error
	if q.From, err = chargeback.ParseTime("from", from); err != nil {
		return q, err
	}
	if q.To, err = chargeback.ParseTime("to", to); err != nil {
		return q, err
	}
	if q.GroupBy, err = chargeback.ParseGroupBy(groupBy); err != nil {
		return q, err
	}
	q.Team, q.Endpoint, q.Graph = team, endpoint, graph
	return q, nil
}

func chargebackRowOf(r chargeback.Row, by []chargeback.Dimension) ChargebackRow {
	// GPU time and CPU core time apart, as the portal and the CSV show
	// them: a core-second is no GPU-second.
	out := ChargebackRow{GPUSeconds: r.GPUOnlySeconds(), GPUHours: r.GPUOnlyHours(), CPUCoreSeconds: r.CPUCoreSeconds, CPUCoreHours: r.CPUCoreHours(),
		CostUSD: money.USD(r.CostMicroUSD), CostUUSD: r.CostMicroUSD, CostX3600: r.CostX3600, Requests: r.Requests}
	if pct, ok := r.AvgGPUUtilPct(); ok {
		out.AvgGPUUtilPct = &pct
	}
	for _, d := range by {
		v := r.Get(d)
		switch d {
		case chargeback.DimTeam:
			out.Team = &v
		case chargeback.DimEndpoint:
			out.Endpoint = &v
		case chargeback.DimModel:
			out.Model = &v
		case chargeback.DimVersion:
			out.Version = &v
		case chargeback.DimGPUType:
			out.GPUType = &v
		case chargeback.DimAllocation:
			out.Allocation = &v
		case chargeback.DimCallerTeam:
			out.CallerTeam = &v
		case chargeback.DimGraph:
			out.Graph = &v
		case chargeback.DimGraphVersion:
			out.GraphVersion = &v
		}
	}
	if v, ok := r.CostPer1kRequestsMicroUSD(); ok {
		s := money.USD(v)
		out.CostPer1kRequestUSD = &s
	}
	if r.TokensKnown {
		n := r.Tokens
		out.Tokens = &n
	}
	if v, ok := r.CostPer1MTokensMicroUSD(); ok {
		s := money.USD(v)
		out.CostPer1MTokensUSD = &s
	}
	return out
}

func chargebackBodyOf(rep *chargeback.Report) ChargebackBody {
	b := ChargebackBody{From: rep.From, To: rep.To, GroupBy: []string{}, RatesVersion: rep.RatesVersion, Delayed: rep.Delayed,
		Rows: make([]ChargebackRow, len(rep.Rows)), Total: chargebackRowOf(rep.Total, nil)}
	for _, d := range rep.GroupBy {
		b.GroupBy = append(b.GroupBy, string(d))
	}
	if !rep.Newest.IsZero() {
		n := rep.Newest
		b.NewestUsage = &n
	}
	for i, r := range rep.Rows {
		b.Rows[i] = chargebackRowOf(r, rep.GroupBy)
	}
	return b
}

// csvFilename names a report's download after its period.
func csvFilename(rep *chargeback.Report) string {
	return "chargeback_" + rep.From.Format("20060102T150405Z") + "_" + rep.To.Format("20060102T150405Z") + ".csv"
}

// wantsCSV reports whether the caller asked for CSV, by format or Accept.
func wantsCSV(format, accept string) bool {
	return format == "csv" || (format == "" && strings.Contains(accept, "text/csv"))
}

type adviceInput struct {
	Endpoint string `query:"endpoint" doc:"Only this endpoint's advice."`
}

type adviceBody struct {
	Items []chargeback.Advice `json:"items" doc:"Largest monthly saving first."`
}

func (s *Server) registerChargeback(api huma.API) {
	huma.Register(api, s.op("chargeback-advice", http.MethodGet, "/chargeback/advice",
		"Right-sizing advice from the last 7 days: whole GPUs that fit a MIG profile, minimums to lower, endpoints to scale to zero", "chargeback"),
		func(ctx context.Context, in *adviceInput) (*One[adviceBody], error) {
			if s.Advisor == nil {
				return nil, errNoChargeback
			}
			adv, err := s.Advisor.Advise(ctx, principal(ctx), in.Endpoint)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[adviceBody]{Body: adviceBody{Items: adv}}, nil
		})
	op := s.op("chargeback-report", http.MethodGet, "/chargeback",
		"GPU-hours, cost, requests and utilisation over a period, grouped; JSON, or RFC 4180 CSV with Accept: text/csv or format=csv", "chargeback")
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[ChargebackBody](), true, "")
	op.Responses = map[string]*huma.Response{"200": {Description: "The report", Content: map[string]*huma.MediaType{
		"application/json": {Schema: schema},
		"text/csv":         {Schema: &huma.Schema{Type: "string", Description: "A comment line with the period, grouping and rates version, then the columns of docs/chargeback.md."}},
	}}}
	huma.Register(api, op, func(ctx context.Context, in *chargebackInput) (*chargebackOutput, error) {
		if s.Chargeback == nil {
			return nil, errNoChargeback
		}
		q, err := chargebackQuery(in.From, in.To, in.GroupBy, in.Team, in.Endpoint, in.Graph)
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		rep, err := s.Chargeback.Report(ctx, principal(ctx), q)
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		var buf bytes.Buffer
		if wantsCSV(in.Format, in.Accept) {
			if err := chargeback.WriteCSV(&buf, rep); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &chargebackOutput{ContentType: "text/csv; charset=utf-8; header=present",
				ContentDisposition: `attachment; filename="` + csvFilename(rep) + `"`, Body: buf.Bytes()}, nil
		}
		if err := json.NewEncoder(&buf).Encode(chargebackBodyOf(rep)); err != nil {
			return nil, s.apiError(ctx, errors.Join(errors.New("encode chargeback"), err))
		}
		return &chargebackOutput{ContentType: "application/json", Body: buf.Bytes()}, nil
	})
}
