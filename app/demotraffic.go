package app

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"modelplane/demo/trafficgen"
)

// demoDriftPeriod is how long the demo traffic takes to move its drifting
// feature all the way: slow enough to watch, quick enough to see in a
// first session.
const demoDriftPeriod = 30 * time.Minute

var (
	demoCategories = []string{"grocery", "travel", "electronics", "fuel", "restaurants", "gambling"}
	demoCountries  = []string{"DE", "FR", "US", "GB", "NL", "BR"}
)

// demoTransaction draws a card payment for fraud-scoring. drift (0 to 1)
// moves the amounts up, by up to 80 %: the drift the demo shows.
func demoTransaction(r *rand.Rand, drift float64) map[string]any {
	amount := math.Round(40*(1+0.8*drift)*math.Exp(0.9*r.NormFloat64())*100) / 100
	return map[string]any{
		"amount":            amount,
		"merchant_category": demoCategories[r.IntN(len(demoCategories))],
		"country":           demoCountries[r.IntN(len(demoCountries))],
	}
}

// startDemoTraffic sends the demo's traffic through the gateway at rate
// requests per second with the dev keys until ctx ends; stop waits for it.
func startDemoTraffic(ctx context.Context, log *slog.Logger, gatewayURL string, keys map[string]string, rate float64) (stop func(), err error) {
	g, err := trafficgen.New(trafficgen.Config{Gateway: gatewayURL, Rate: rate,
		PredictEndpoint: "fraud-scoring", PredictKey: keys["MP_RISK_KEY"], Transaction: demoTransaction,
		ChatEndpoint: "support-chat", ChatKey: keys["MP_SEARCH_KEY"],
		DriftPeriod: demoDriftPeriod, Seed: uint64(time.Now().UnixNano()), Log: log})
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
