package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
)

// GraphResult is what `modelplane bench graph` prints: the time a graph
// endpoint adds to its steps, against calling the same steps directly
// in the same run, beside the gateway's own added time for one call.
//
// Paths, each measured over the same moments (every client sends one
// request of every path in turn, rotating the order): direct (one call
// to an instant backend), gateway (the same call through the gateway),
// sequence (a 3-step sequence graph through the gateway) against the
// three calls made one after the other directly, and ensemble (a 3-way
// ensemble graph) against the three calls made at once directly.
//
// AddedP99PerHopMs is (p99 of the graph - p99 of its steps called
// directly) / 3: what each of the three step calls adds, the quantity to
// hold against GatewayAddedP99Ms (p99 through the gateway - p99 direct for
// one call). The target: per hop at most the gateway's own.
type GraphResult struct {
	Name   string         `json:"name"`
	Phases []GraphPhase   `json:"phases"`
	Target string         `json:"target"`
	Env    map[string]any `json:"env"`
}

// GraphPhase is one concurrency's figures.
type GraphPhase struct {
	Clients  int `json:"clients"`
	Requests int `json:"requests_per_path"`
	Errors   int `json:"errors"`
	// GatewayAddedP99Ms is the gateway's p99 minus the direct p99, for one
	// call.
	GatewayAddedP99Ms float64 `json:"gateway_added_p99_ms"`
	// GatewayAddedPairedP99Ms is the p99 of the per-round differences
	// gateway minus direct (each client's two requests of one round), a
	// reading less swayed by the moments a loaded machine stalls.
	GatewayAddedPairedP99Ms float64            `json:"gateway_added_paired_p99_ms"`
	Sequence                GraphFigures       `json:"sequence"`
	Ensemble                GraphFigures       `json:"ensemble"`
	P99Ms                   map[string]float64 `json:"p99_ms"`
	// P50Ms are the paths' medians: what a hop costs when nothing stalls,
	// beside the p99s that the machine's stalls dominate.
	P50Ms map[string]float64 `json:"p50_ms"`
}

// GraphFigures are one graph shape's figures.
type GraphFigures struct {
	AddedP99Ms       float64 `json:"added_p99_ms"`
	AddedP99PerHopMs float64 `json:"added_p99_per_hop_ms"`
	// WithinTarget: per hop at most the gateway's own added p99.
	WithinTarget bool `json:"within_target"`
	// The same from the per-round differences (graph minus its steps
	// direct), against GatewayAddedPairedP99Ms.
	AddedPairedP99PerHopMs float64 `json:"added_paired_p99_per_hop_ms"`
	WithinTargetPaired     bool    `json:"within_target_paired"`
}

const (
	graphHops   = 3
	graphSeq    = "bench-seq"
	graphEns    = "bench-ens"
	graphStepEP = "bench-step-%d"
)

// graph paths, in the order of GraphPhase.P99Ms.
var graphPaths = []string{"direct", "gateway", "direct_sequence", "graph_sequence", "direct_ensemble", "graph_ensemble"}

type graphBench struct {
	s        *scratch
	client   *http.Client
	key      string
	gateway  string
	backends []string
}

func runGraph(ctx context.Context, cfg Config, out io.Writer) error {
	s, err := newScratch("mp-bench-graph-")
	if err != nil {
		return err
	}
	defer s.close()
	b := &graphBench{s: s}
	if err := b.start(ctx); err != nil {
		return err
	}
	res := GraphResult{Name: "graph", Target: "added_p99_per_hop_ms <= gateway_added_p99_ms at each concurrency",
		Env: map[string]any{"process": "gateway, backends and clients in one process", "backends": "instant (fixed JSON answer)"}}
	if err := s.profile(cfg.Profile); err != nil {
		return err
	}
	c1 := max(500, int(cfg.Duration/time.Millisecond/8))
	for _, clients := range []int{1, 64} {
		rounds := c1
		if clients > 1 {
			rounds = max(20, c1/clients*4)
		}
		res.Phases = append(res.Phases, b.phase(ctx, clients, rounds))
	}
	line := ""
	for _, p := range res.Phases {
		line += fmt.Sprintf("c%d: gateway added p99 %.3f ms; per hop sequence %.3f ms, ensemble %.3f ms; ", p.Clients, p.GatewayAddedP99Ms,
			p.Sequence.AddedP99PerHopMs, p.Ensemble.AddedP99PerHopMs)
	}
	return emit(out, cfg.JSON, res, "graph: %s\n", line)
}

// start serves three instant backends, routes an endpoint to each, and
// two graph endpoints over them, and waits until the gateway serves all.
func (b *graphBench) start(ctx context.Context) error {
	for range graphHops {
		addr, err := b.s.serve(replica())
		if err != nil {
			return err
		}
		b.backends = append(b.backends, addr)
	}
	natsURL, js, err := b.s.nats(ctx)
	if err != nil {
		return err
	}
	routes, err := js.KeyValue(ctx, busapi.BucketRoutes)
	if err != nil {
		return err
	}
	var steps []string
	var nodes []map[string]any
	for i, addr := range b.backends {
		name := fmt.Sprintf(graphStepEP, i)
		steps = append(steps, name)
		nodes = append(nodes, map[string]any{"id": name, "type": "call", "endpoint": name})
		rt := busapi.Route{Endpoint: name, Team: "bench", Task: "classification", Generation: 1,
			Versions: []busapi.RouteVersion{{Name: "v1", Weight: 100, Replicas: []busapi.RouteReplica{{ID: name + "-r", Addr: addr}}}}}
		if err := putRoute(ctx, routes, rt); err != nil {
			return err
		}
	}
	for _, g := range []struct {
		name string
		node map[string]any
	}{
		{graphSeq, map[string]any{"id": "root", "type": "sequence", "steps": steps}},
		{graphEns, map[string]any{"id": "root", "type": "ensemble", "steps": steps, "combine": "collect"}},
	} {
		def, _ := json.Marshal(map[string]any{"entry": "root", "nodes": append([]map[string]any{g.node}, nodes...)})
		rt := busapi.Route{Endpoint: g.name, Team: "bench", Task: busapi.RouteTaskGraph, Generation: 1,
			Versions: []busapi.RouteVersion{{Name: "g1", Weight: 100, Replicas: []busapi.RouteReplica{}, Graph: def}}}
		if err := putRoute(ctx, routes, rt); err != nil {
			return err
		}
	}
	if b.key, err = putKey(ctx, js); err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, b.s.natsOpts()...)
	if err != nil {
		return err
	}
	b.s.onClose(nc.Close)
	g, err := startGateway(ctx, nc, b.s.dir+"/gw", "bench-graph", time.Minute)
	if err != nil {
		return err
	}
	b.s.onClose(g.Stop)
	if b.gateway, err = b.s.serve(g.Handler()); err != nil {
		return err
	}
	b.client = loadClient(b.s, 4096, 1024)
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range append(steps, graphSeq, graphEns) {
		for {
			if _, ok := g.RouteGeneration(name); ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bench graph: the gateway never served %s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Warm every path's connections.
	for range 50 {
		for _, p := range graphPaths {
			if _, err := b.path(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func putRoute(ctx context.Context, kv interface {
	Put(context.Context, string, []byte) (uint64, error)
}, rt busapi.Route) error {
	b, _ := json.Marshal(rt)
	_, err := kv.Put(ctx, rt.Endpoint, b)
	return err
}

// path makes one request of path p and returns how long it took.
func (b *graphBench) path(ctx context.Context, p string) (time.Duration, error) {
	direct := func(i int) error {
		_, err := predict(ctx, b.client, b.key, "http://"+b.backends[i]+"/predict", predictIn)
		return err
	}
	via := func(endpoint string) error {
		_, err := predict(ctx, b.client, b.key, "http://"+b.gateway+"/v1/endpoints/"+endpoint+"/predict", predictIn)
		return err
	}
	start := time.Now()
	var err error
	switch p {
	case "direct":
		err = direct(0)
	case "gateway":
		err = via(fmt.Sprintf(graphStepEP, 0))
	case "direct_sequence":
		for i := range graphHops {
			if err = direct(i); err != nil {
				break
			}
		}
	case "graph_sequence":
		err = via(graphSeq)
	case "direct_ensemble":
		var wg sync.WaitGroup
		errs := make([]error, graphHops)
		for i := range graphHops {
			wg.Go(func() { errs[i] = direct(i) })
		}
		wg.Wait()
		for _, e := range errs {
			if e != nil {
				err = e
			}
		}
	case "graph_ensemble":
		err = via(graphEns)
	}
	return time.Since(start), err
}

// phase runs clients clients, each sending rounds rounds of every path in
// a rotating order, and computes the figures.
func (b *graphBench) phase(ctx context.Context, clients, rounds int) GraphPhase {
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	diff := map[string][]time.Duration{} // per round: gateway, sequence, ensemble minus direct
	errs := 0
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			mine := map[string][]time.Duration{}
			pairs := map[string][]time.Duration{}
			bad := 0
			for r := range rounds {
				turn := map[string]time.Duration{}
				for k := range graphPaths {
					p := graphPaths[(k+r+c)%len(graphPaths)]
					d, err := b.path(ctx, p)
					if err != nil {
						bad++
						continue
					}
					mine[p] = append(mine[p], d)
					turn[p] = d
				}
				if len(turn) == len(graphPaths) {
					pairs["gateway"] = append(pairs["gateway"], turn["gateway"]-turn["direct"])
					pairs["sequence"] = append(pairs["sequence"], turn["graph_sequence"]-turn["direct_sequence"])
					pairs["ensemble"] = append(pairs["ensemble"], turn["graph_ensemble"]-turn["direct_ensemble"])
				}
			}
			mu.Lock()
			for p, ds := range mine {
				lat[p] = append(lat[p], ds...)
			}
			for p, ds := range pairs {
				diff[p] = append(diff[p], ds...)
			}
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	p99, p50 := map[string]float64{}, map[string]float64{}
	for _, p := range graphPaths {
		ds := lat[p]
		slices.Sort(ds)
		p99[p] = round3(percentile(ds, 0.99))
		p50[p] = round3(percentile(ds, 0.5))
	}
	gw := round3(p99["gateway"] - p99["direct"])
	gwPaired := round3(percentile(diff["gateway"], 0.99))
	fig := func(graph, direct, paired string) GraphFigures {
		added := round3(p99[graph] - p99[direct])
		per := round3(added / graphHops)
		perPaired := round3(percentile(diff[paired], 0.99) / graphHops)
		return GraphFigures{AddedP99Ms: added, AddedP99PerHopMs: per, WithinTarget: per <= gw,
			AddedPairedP99PerHopMs: perPaired, WithinTargetPaired: perPaired <= gwPaired}
	}
	return GraphPhase{Clients: clients, Requests: clients * rounds, Errors: errs, GatewayAddedP99Ms: gw, GatewayAddedPairedP99Ms: gwPaired,
		Sequence: fig("graph_sequence", "direct_sequence", "sequence"), Ensemble: fig("graph_ensemble", "direct_ensemble", "ensemble"), P99Ms: p99, P50Ms: p50}
}
