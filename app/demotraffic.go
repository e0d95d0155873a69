package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"modelplane/demo/docproc"
	"modelplane/demo/fraud"
	"modelplane/demo/trafficgen"
)

// demoDriftPeriod is how long the demo traffic takes to move its drifting
// feature (the amounts, doubled at the end) all the way: slow enough to
// watch, quick enough to see in a first session.
const demoDriftPeriod = 30 * time.Minute

// startDemoTraffic sends the demo's traffic through the gateway at rate
// requests per second with the dev keys until ctx ends; stop waits for it.
// Without fraud, fraud-scoring gets no traffic (a dev directory whose
// fraud model predates the real one); withGraph, risk's key also has
// documents classified by search's document-processor, shared with risk,
// as a consumer team would (its steps run on the CPU nodes).
func startDemoTraffic(ctx context.Context, log *slog.Logger, gatewayURL string, keys map[string]string, rate float64, withFraud, withGraph bool) (stop func(), err error) {
	cfg := trafficgen.Config{Gateway: gatewayURL, Rate: rate, ChatEndpoint: "support-chat", ChatKey: keys["MP_SEARCH_KEY"],
		DriftPeriod: demoDriftPeriod, Seed: uint64(time.Now().UnixNano()), Log: log}
	if withGraph {
		cfg.GraphEndpoint, cfg.GraphKey = DemoGraphEndpoint, keys["MP_RISK_KEY"]
		cfg.Document = func(r *rand.Rand) map[string]any { return map[string]any{"text": docproc.Document(r).Text} }
	}
	if withFraud {
		// The payments of the demo's fraud model (package demo/fraud);
		// drift scales the amounts. The generator calls it from one
		// goroutine only.
		payments := fraud.NewGenerator(uint64(time.Now().UnixNano()))
		cfg.PredictEndpoint, cfg.PredictKey = "fraud-scoring", keys["MP_RISK_KEY"]
		cfg.Transaction = func(_ *rand.Rand, drift float64) map[string]any { return payments.Next(drift).Instance }
	}
	g, err := trafficgen.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
