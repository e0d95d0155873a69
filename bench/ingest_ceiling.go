package bench

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/ingest"
)

// ceilingRows is how many rows the tight writer sends in one INSERT:
// ClickHouse's advice is inserts of 100,000 rows or more, one at a time.
const ceilingRows = 200_000

// The small streams' traffic: samples of 4 instances each of 3 features,
// and one request statistics message per endpoint version window, over
// the usage fleet's 1,000 endpoints.
const (
	predSamples     = 50_000
	predInstances   = 4
	reqStatsWindows = 100_000
	smallPublishers = 8
)

// tightWriter is ClickHouse's own ceiling: one writer inserting typed
// columns, ceilingRows rows an INSERT, into a database of the scratch
// ClickHouse migrated like the consumers', with nothing to fetch, decode,
// check or acknowledge.
type tightWriter struct {
	ch  driver.Conn
	cpu procClock
}

// send inserts cols (typed column slices of one length, in the order of
// stmt's column list) with the consumers' own insert code, ingest.SendColumns.
func (w tightWriter) send(ctx context.Context, stmt string, cols []any) error {
	n := reflect.ValueOf(cols[0]).Len()
	part := make([]any, len(cols))
	for from := 0; from < n; from += ceilingRows {
		to := min(n, from+ceilingRows)
		for i, c := range cols {
			part[i] = reflect.ValueOf(c).Slice(from, to).Interface()
		}
		if err := ingest.SendColumns(ctx, w.ch, stmt, part); err != nil {
			return fmt.Errorf("ceiling insert: %w", err)
		}
	}
	return nil
}

// comparison is a consumer timed beside the tight writer sending the same
// rows: rows per second of each, the first over the second, and the CPU
// each spent per row.
type comparison struct {
	IngestRowsPerS, CeilingRowsPerS, RowsPerSRatio float64
	CPUFigures
}

// CPUFigures is the CPU time, in microseconds per row, that ClickHouse and
// this process spent while the tight writer sent the rows (the mean of its
// two runs) and while the consumer stored them; CPUVsClickHouse is the
// first total over the second, 1 when the consumer costs no more than one
// native insert of large blocks.
type CPUFigures struct {
	CeilingClickHouseUS float64 `json:"ceiling_clickhouse_us_per_row"`
	CeilingSelfUS       float64 `json:"ceiling_self_us_per_row"`
	IngestClickHouseUS  float64 `json:"ingest_clickhouse_us_per_row"`
	IngestSelfUS        float64 `json:"ingest_self_us_per_row"`
	CPUVsClickHouse     float64 `json:"cpu_vs_clickhouse"`
	// TransportSelfUS is this process's CPU a row for taking the same
	// messages from JetStream and acknowledging them, and nothing else
	// (transportFloor; every stream). A consumer pays it on
	// top of all the writer pays, so CPUVsClickHouseBound, the writer's
	// CPU a row over the same plus it, bounds CPUVsClickHouse.
	TransportSelfUS      float64 `json:"transport_self_us_per_row,omitempty"`
	CPUVsClickHouseBound float64 `json:"cpu_vs_clickhouse_bound,omitempty"`
}

// bound sets the transport's figures from its CPU a row.
func (f *CPUFigures) bound(transportUS float64) {
	writer := f.CeilingClickHouseUS + f.CeilingSelfUS
	f.TransportSelfUS, f.CPUVsClickHouseBound = transportUS, writer/(writer+transportUS)
}

// transportFloor takes the first msgs messages of stream once more
// through a durable consumer of its own that only acknowledges each one,
// pulled as the usage consumer pulls its stream (up to 16 MiB ahead,
// explicit acks), and returns this process's CPU time over rows, the rows those
// messages hold, once the server has every ack. This process holds the
// embedded NATS server too, so that is JetStream's whole delivery. The
// consumer is deleted after.
func transportFloor(ctx context.Context, js jetstream.JetStream, stream string, msgs, rows int, cpu procClock) (float64, error) {
	const durable = "bench-transport-floor"
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 20_000, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("transport floor consumer: %w", err)
	}
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, durable) }()
	span, err := cpu.span(func() (time.Duration, error) {
		start := time.Now()
		it, err := cons.Messages(jetstream.PullMaxBytes(16 << 20))
		if err != nil {
			return 0, err
		}
		defer it.Stop()
		for range msgs {
			m, err := it.Next()
			if err != nil {
				return 0, err
			}
			if err := m.Ack(); err != nil {
				return 0, err
			}
		}
		for {
			info, err := cons.Info(ctx)
			if err != nil {
				return 0, err
			}
			if info.NumAckPending == 0 && info.AckFloor.Consumer >= uint64(msgs) {
				return time.Since(start), nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("transport floor: %w", err)
	}
	return float64(span.self.Microseconds()) / float64(rows), nil
}

// compare times the tight writer sending the columns columns makes, then
// drain (which stores the same rows through a consumer and returns how
// long that took), then the writer again, so that both see the same
// moments of a shared machine; the ceiling is the mean of the writer's two
// rates. The writer's columns are made before each of its spans, outside
// it, and let go after: held through the drain, they were a heap of
// pointers the collector marked on the consumer's time (docs/operations.md).
func (w tightWriter) compare(ctx context.Context, stmt string, columns func() ([]any, error), rows int, drain func() (time.Duration, error)) (comparison, error) {
	var (
		ceil [2]cpuSpan
		run  cpuSpan
		err  error
	)
	writer := func() (cpuSpan, error) {
		cols, err := columns()
		if err != nil {
			return cpuSpan{}, err
		}
		return w.cpu.span(func() (time.Duration, error) {
			start := time.Now()
			err := w.send(ctx, stmt, cols)
			return time.Since(start), err
		})
	}
	if ceil[0], err = writer(); err != nil {
		return comparison{}, err
	}
	if run, err = w.cpu.span(drain); err != nil {
		return comparison{}, err
	}
	if ceil[1], err = writer(); err != nil {
		return comparison{}, err
	}
	perRow := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows) }
	c := comparison{
		IngestRowsPerS:  float64(rows) / run.wall.Seconds(),
		CeilingRowsPerS: (float64(rows)/ceil[0].wall.Seconds() + float64(rows)/ceil[1].wall.Seconds()) / 2,
		CPUFigures: CPUFigures{
			CeilingClickHouseUS: perRow((ceil[0].clickhouse + ceil[1].clickhouse) / 2), CeilingSelfUS: perRow((ceil[0].self + ceil[1].self) / 2),
			IngestClickHouseUS: perRow(run.clickhouse), IngestSelfUS: perRow(run.self),
		},
	}
	c.RowsPerSRatio = c.IngestRowsPerS / c.CeilingRowsPerS
	c.CPUVsClickHouse = (c.CeilingClickHouseUS + c.CeilingSelfUS) / (c.IngestClickHouseUS + c.IngestSelfUS)
	return c, nil
}

// procClock reads the CPU time (user and system, all threads) of this
// process and of the scratch ClickHouse, process clickhouse.
type procClock struct{ clickhouse int }

// cpuSpan is one timed step: its wall time, and the CPU time each process
// spent meanwhile.
type cpuSpan struct{ wall, self, clickhouse time.Duration }

// span runs f, which returns the wall time it measured, and adds the CPU
// time spent over it. It collects the garbage first, outside the span: a
// span that followed a drain paid to collect the drain's garbage, and the
// writer's CPU a row moved between 0.75 and 1.85 µs from run to run with
// nothing different in what it sent.
func (c procClock) span(f func() (time.Duration, error)) (cpuSpan, error) {
	runtime.GC()
	self, ch := pidCPU(os.Getpid()), pidCPU(c.clickhouse)
	wall, err := f()
	if err != nil {
		return cpuSpan{}, err
	}
	return cpuSpan{wall: wall, self: pidCPU(os.Getpid()) - self, clickhouse: pidCPU(c.clickhouse) - ch}, nil
}

// usageCeilingColumns are the rows of seconds [from, to) as the consumer
// stores them: attributed by their allocation, priced, with their batch id
// and index.
func usageCeilingColumns(fleet *usageFleet, prices ingest.Pricer, from, to int) ([]any, error) {
	n := fleet.rows(from, to)
	var (
		ts                                                        = make([]int64, 0, n)
		node                                                      = make([]string, 0, n)
		gpu, slice                                                = make([]uint16, 0, n), make([]uint16, 0, n)
		gpuType, profile, team, endpoint, model, version, replica = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n),
			make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		util                   = make([]float32, 0, n)
		memory, requests, rate = make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
		batchID                = make([]string, 0, n)
		rowIdx                 = make([]uint32, 0, n)
	)
	for ni := range fleet.nodes {
		for s := from; s < to; s++ {
			b, err := busapi.DecodeUsage(fleet.batches[ni][s])
			if err != nil {
				return nil, err
			}
			for i, r := range b.Records {
				uusd, _ := prices.At(r.GPUType, r.Profile, time.Unix(r.Time, 0))
				ts = append(ts, r.Time)
				node = append(node, r.Node)
				gpu = append(gpu, uint16(r.GPU))
				slice = append(slice, uint16(r.Slice))
				gpuType = append(gpuType, r.GPUType)
				profile = append(profile, r.Profile)
				team = append(team, r.Team)
				endpoint = append(endpoint, r.Endpoint)
				model = append(model, r.Model)
				version = append(version, r.Version)
				replica = append(replica, r.Replica)
				util = append(util, float32(r.UtilPct))
				memory = append(memory, uint64(r.MemoryMB))
				requests = append(requests, uint64(r.Requests))
				rate = append(rate, uint64(max(uusd, 0)))
				batchID = append(batchID, b.ID)
				rowIdx = append(rowIdx, uint32(i))
			}
		}
	}
	return []any{ts, node, gpu, slice, gpuType, profile, team, endpoint, model, version, replica, util, memory, requests, rate, batchID, rowIdx}, nil
}

// smallMsg is one encoded message of a small stream.
type smallMsg struct {
	subject, id string
	data        []byte
}

// predictionTraffic is predSamples samples, encoded, and the rows
// prediction_samples gets from them, by column of PredictionsInsert. The
// samples span one second, 50,000 a second from smallPublishers gateways,
// and each gateway's go out in batches as its sampler makes them at that
// pace: full, by count or bytes, long before the linger.
func predictionTraffic(t0 time.Time) ([]smallMsg, []any) {
	n := predSamples * predInstances
	var (
		ts                                 = make([]time.Time, 0, n)
		tsMS                               = make([]uint16, 0, n)
		endpoint, team, version, requestID = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		instance                           = make([]uint32, 0, n)
		names, strs                        = make([][]string, 0, n), make([][]string, 0, n)
		values                             = make([][]float64, 0, n)
		score, latency                     = make([]float64, 0, n), make([]float64, 0, n)
		label                              = make([]string, 0, n)
		tokens                             = make([]uint32, 0, n)
		seq                                = make([]uint64, 0, n)
		pinned                             = make([]uint8, 0, n)
		endpointID                         = make([]int64, 0, n)
	)
	var (
		msgs  []smallMsg
		b     = make([]busapi.SampleBody, smallPublishers)
		feats = []string{"a", "b", "c"}
	)
	// send makes gateway g's message of what it gathered, as its sampler
	// does.
	send := func(g int) {
		id := fmt.Sprintf("gw-%d/%d", g, len(msgs))
		msgs = append(msgs, smallMsg{subject: busapi.PredictionBatchSubject, id: id, data: b[g].Message(id, fmt.Sprintf("gw-%d", g))})
	}
	for i := range predSamples {
		ep := i % 1000
		s := busapi.PredictionSample{ID: fmt.Sprintf("req-%07d", i), Time: t0.UnixMilli() + int64(i/50), Endpoint: fmt.Sprintf("endpoint-%d", ep),
			Team: fmt.Sprintf("team-%d", ep%50), Version: "v10", LatencyMS: float64(i%97) / 7, FeatureNames: feats, EndpointID: int64(ep + 1)}
		for k := range predInstances {
			s.Instances = append(s.Instances, busapi.SampleInstance{Num: []float64{float64(k), float64(i % 13), 0.25}, Str: []string{"", "", ""},
				Score: float64((i+k)%100) / 100, Label: []string{"cat", "dog"}[(i+k)%2]})
		}
		if g := i % smallPublishers; !b[g].Add(&s) {
			send(g)
			b[g].Add(&s)
		} else if b[g].Len() == busapi.PredictionBatchMaxSamples {
			send(g)
		}
		for k, in := range s.Instances {
			ts = append(ts, time.UnixMilli(s.Time).UTC())
			tsMS = append(tsMS, uint16(s.Time%1000))
			endpoint, team, version, requestID = append(endpoint, s.Endpoint), append(team, s.Team), append(version, s.Version), append(requestID, s.ID)
			instance = append(instance, uint32(k))
			names, values, strs = append(names, s.FeatureNames), append(values, in.Num), append(strs, in.Str)
			score, label, tokens = append(score, in.Score), append(label, in.Label), append(tokens, 0)
			latency, seq, pinned, endpointID = append(latency, s.LatencyMS), append(seq, uint64(i+1)), append(pinned, 0), append(endpointID, s.EndpointID)
		}
	}
	for g := range b {
		if b[g].Len() > 0 {
			send(g)
		}
	}
	return msgs, []any{ts, tsMS, endpoint, team, version, requestID, instance, names, values, strs, score, label, tokens, latency, seq, pinned, endpointID}
}

// reqStatsTraffic is reqStatsWindows gateway statistics, encoded, and the
// rows request_stats gets from them, by column of ReqStatsInsert: a
// gateway's 100 windows of 1,000 endpoints, each window's statistics in
// batches as the gateway sends them.
func reqStatsTraffic(t0 time.Time) ([]smallMsg, []any) {
	n := reqStatsWindows
	var (
		wStart, wEnd                       = make([]time.Time, 0, n), make([]time.Time, 0, n)
		wStartMS, wEndMS                   = make([]uint16, 0, n), make([]uint16, 0, n)
		gw, endpoint, team, version        = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		count, eClient, eUp, eTO, eShed    = make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
		canceled, streams, tokens, seq     = make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
		lat, ttft, tpot                    = make([][]uint64, 0, n), make([][]uint64, 0, n), make([][]uint64, 0, n)
		latSum, ttftSum, tpotSum           = make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		msgID, caller, viaGraph, viaGraphV = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		pinned                             = make([]uint8, 0, n)
		endpointID                         = make([]int64, 0, n)
		overhead                           = make([][]uint64, 0, n)
		overheadSum                        = make([]float64, 0, n)
		notableStr                         = make([][]string, 0, n) // kind, request id, trace id, replica: none
		notableStatus                      = make([][]uint16, 0, n)
		notableEnd                         = make([][]int64, 0, n)
		notableMS                          = make([][]float64, 0, n) // latency, upstream: none
		empty                              = make([]uint64, busapi.LatencyBuckets)
	)
	var (
		msgs []smallMsg
		body busapi.StatsBody // the current window's statistics, as the gateway gathers them
		part int
	)
	send := func(gateway string, start int64) {
		id := busapi.ReqStatsBatchID(gateway, start, part)
		msgs = append(msgs, smallMsg{subject: busapi.ReqStatsBatchSubject, id: id, data: body.Message(id, gateway)})
		part++
	}
	for i := range n {
		ep := i % 1000
		start := t0.UnixMilli() + int64(i/1000)*5000
		s := busapi.ReqStats{ID: fmt.Sprintf("gw-1/%07d", i), WindowStart: start, WindowEnd: start + 5000, Gateway: "gw-1",
			Endpoint: fmt.Sprintf("endpoint-%d", ep), Team: fmt.Sprintf("team-%d", ep%50), Version: "v10", Count: 100,
			Errors: busapi.ErrorCounts{Client: uint64(i % 3)}, Latency: make([]uint64, busapi.LatencyBuckets), LatencySumMS: 1234.5, EndpointID: int64(ep + 1)}
		s.Latency[i%busapi.LatencyBuckets] = s.Count
		if !body.Add(&s) {
			send(s.Gateway, s.WindowStart)
			body.Add(&s)
		}
		if ep == 999 || i == n-1 { // the window's end
			send(s.Gateway, s.WindowStart)
			part = 0
		}
		wStart, wStartMS = append(wStart, time.UnixMilli(s.WindowStart).UTC()), append(wStartMS, uint16(s.WindowStart%1000))
		wEnd, wEndMS = append(wEnd, time.UnixMilli(s.WindowEnd).UTC()), append(wEndMS, uint16(s.WindowEnd%1000))
		gw, endpoint, team, version = append(gw, s.Gateway), append(endpoint, s.Endpoint), append(team, s.Team), append(version, s.Version)
		count, eClient, eUp, eTO, eShed = append(count, s.Count), append(eClient, s.Errors.Client), append(eUp, 0), append(eTO, 0), append(eShed, 0)
		canceled, streams, tokens, seq = append(canceled, 0), append(streams, 0), append(tokens, 0), append(seq, uint64(i+1))
		lat, ttft, tpot = append(lat, s.Latency), append(ttft, empty), append(tpot, empty)
		latSum, ttftSum, tpotSum = append(latSum, s.LatencySumMS), append(ttftSum, 0), append(tpotSum, 0)
		msgID, caller, viaGraph, viaGraphV = append(msgID, s.ID), append(caller, ""), append(viaGraph, ""), append(viaGraphV, "")
		pinned, endpointID = append(pinned, 0), append(endpointID, s.EndpointID)
		overhead, overheadSum = append(overhead, empty), append(overheadSum, 0)
		notableStr, notableStatus = append(notableStr, []string{}), append(notableStatus, []uint16{})
		notableEnd, notableMS = append(notableEnd, []int64{}), append(notableMS, []float64{})
	}
	return msgs, []any{wStart, wStartMS, wEnd, wEndMS, gw, endpoint, team, version, count, eClient, eUp, eTO, eShed, canceled,
		lat, latSum, streams, ttft, ttftSum, tpot, tpotSum, tokens, msgID, seq, pinned, endpointID, caller, viaGraph, viaGraphV,
		overhead, overheadSum, notableStr, notableStr, notableStr, notableStr, notableStatus, notableEnd, notableMS, notableMS}
}

// publishSmall publishes msgs from smallPublishers connections, each its
// share with async publishes, and returns once every one is acknowledged.
func publishSmall(ctx context.Context, url string, opts []nats.Option, msgs []smallMsg) error {
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	fail := func(err error) { errOnce.Do(func() { first = err }) }
	for p := range smallPublishers {
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
		if err != nil {
			return err
		}
		wg.Go(func() {
			for i := p; i < len(msgs); i += smallPublishers {
				m := msgs[i]
				if _, err := js.PublishAsync(m.subject, m.data, jetstream.WithMsgID(m.id), jetstream.WithStallWait(time.Minute)); err != nil {
					fail(err)
					return
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				fail(ctx.Err())
			}
		})
	}
	wg.Wait()
	return first
}

// drainTime starts a consumer over a stream that already holds every
// message, waits until rows() reaches want, and returns the time from the
// start to then: the ingest path alone, from fetch to ack. The consumer
// is stopped after.
func drainTime(ctx context.Context, start func(context.Context) error, stop func(), rows func() uint64, want uint64) (time.Duration, error) {
	t0 := time.Now()
	if err := start(ctx); err != nil {
		return 0, err
	}
	defer stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Minute)
	for rows() < want {
		select {
		case <-tick.C:
		case <-deadline:
			return 0, fmt.Errorf("ingest: %d of %d rows stored after 5 minutes", rows(), want)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return time.Since(t0), nil
}

// smallStreams publishes the prediction samples and the request
// statistics of t0, then times each consumer draining its stream beside the
// tight writer sending the same rows, and checks that ClickHouse holds
// exactly the rows published.
//
// Each stream's columns for the writer are made again before each of the
// writer's spans (compare), and nothing the benchmark made for an earlier
// phase is held meanwhile: what the process holds sets when the collector runs, and
// held traffic without pointers (the usage batches as JSON were 460 MB)
// kept every cycle out of the drains, which no consumer in production
// enjoys (docs/operations.md, "Usage batches in binary").
func smallStreams(ctx context.Context, s *scratch, w tightWriter, js jetstream.JetStream, ch driver.Conn, url string, t0 time.Time, res *IngestResult) error {
	preds, _ := predictionTraffic(t0)
	stats, _ := reqStatsTraffic(t0)
	res.PredictionSamples, res.PredictionMessages, res.ReqStatsWindows, res.ReqStatsMessages = predSamples, len(preds), reqStatsWindows, len(stats)
	if err := publishSmall(ctx, url, s.natsOpts(), append(preds, stats...)); err != nil {
		return fmt.Errorf("publish samples and statistics: %w", err)
	}
	p, err := ingest.NewPredictions(ingest.PredictionsConfig{JS: js, CH: ch})
	if err != nil {
		return err
	}
	predRows := uint64(predSamples * predInstances)
	predCols := func() ([]any, error) { _, cols := predictionTraffic(t0); return cols, nil }
	c, err := w.compare(ctx, ingest.PredictionsInsert, predCols, int(predRows), func() (time.Duration, error) {
		return drainTime(ctx, p.Start, p.Stop, func() uint64 { return p.Stats().Rows }, predRows)
	})
	if err != nil {
		return fmt.Errorf("predictions: %w", err)
	}
	res.PredictionRowsPerS, res.PredictionClickHouseRowsPerS, res.PredictionsVsClickHouse = c.IngestRowsPerS, c.CeilingRowsPerS, c.RowsPerSRatio
	transport, err := transportFloor(ctx, js, busapi.StreamPredictions, res.PredictionMessages, int(predRows), w.cpu)
	if err != nil {
		return err
	}
	c.bound(transport)
	res.CPU["predictions"] = c.CPUFigures
	r, err := ingest.NewReqStats(ingest.ReqStatsConfig{JS: js, CH: ch})
	if err != nil {
		return err
	}
	statsCols := func() ([]any, error) { _, cols := reqStatsTraffic(t0); return cols, nil }
	c, err = w.compare(ctx, ingest.ReqStatsInsert, statsCols, reqStatsWindows, func() (time.Duration, error) {
		return drainTime(ctx, r.Start, r.Stop, func() uint64 { return r.Stats().Rows }, reqStatsWindows)
	})
	if err != nil {
		return fmt.Errorf("reqstats: %w", err)
	}
	res.ReqStatsRowsPerS, res.ReqStatsClickHouseRowsPerS, res.ReqStatsVsClickHouse = c.IngestRowsPerS, c.CeilingRowsPerS, c.RowsPerSRatio
	if transport, err = transportFloor(ctx, js, busapi.StreamReqStats, res.ReqStatsMessages, reqStatsWindows, w.cpu); err != nil {
		return err
	}
	c.bound(transport)
	res.CPU["reqstats"] = c.CPUFigures
	for table, want := range map[string]uint64{"prediction_samples": predRows, "request_stats": reqStatsWindows} {
		var got uint64
		if err := ch.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s holds %d rows, %d were published", table, got, want)
		}
	}
	return nil
}
