// Package trafficgen is the demo's traffic: a steady mix of fraud-scoring
// predictions, support-chat completions and documents classified by the
// document-processor graph, sent through a gateway with API keys, as the
// demo's users would send them, with a slow drift in one input of the
// fraud model so that the drift page has something to show.
// `modelplane dev` runs it (--demo-traffic sets the rate; 0 turns it off).
package trafficgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
)

// Defaults for the zero values of Config.
const (
	DefaultChatShare   = 0.1
	DefaultGraphShare  = 0.1
	DefaultDriftPeriod = time.Hour
	DefaultMaxInFlight = 32
	DefaultTimeout     = 30 * time.Second
)

// Config configures a Generator. Gateway, Rate and at least one of the
// endpoints with its key are required.
type Config struct {
	// Gateway is the gateway's base URL.
	Gateway string
	// Rate is the requests per second over both endpoints.
	Rate float64
	// PredictEndpoint and PredictKey are the predict endpoint and the key
	// that may call it; Transaction draws one instance for it, with the
	// drifting feature moved by drift (0 at the start, growing to 1 over
	// DriftPeriod).
	PredictEndpoint, PredictKey string
	Transaction                 func(r *rand.Rand, drift float64) map[string]any
	// ChatEndpoint and ChatKey are the chat endpoint and its key; a
	// ChatShare of the requests go there.
	ChatEndpoint, ChatKey string
	ChatShare             float64
	// GraphEndpoint and GraphKey are a graph endpoint's (or any predict
	// endpoint's) and the key that may call it; a GraphShare of the
	// requests go there, each with one instance that Document draws.
	GraphEndpoint, GraphKey string
	GraphShare              float64
	Document                func(r *rand.Rand) map[string]any
	DriftPeriod             time.Duration
	// MaxInFlight bounds the requests outstanding; a tick that finds it
	// reached sends nothing (counted as skipped), so a slow gateway is not
	// buried.
	MaxInFlight int
	// Timeout bounds one request.
	Timeout time.Duration
	Seed    uint64
	Clock   quartz.Clock
	Client  *http.Client
	Log     *slog.Logger
}

// Stats are the generator's counts so far.
type Stats struct {
	Sent, Failed, Skipped uint64
	// Predictions, Chats and Graphs count the requests sent to each
	// endpoint.
	Predictions, Chats, Graphs uint64
}

// Generator sends the demo's traffic; build it with New and Run it.
type Generator struct {
	cfg Config
	rng *rand.Rand
	// chat and graph are the shares of the requests that go to the chat
	// and graph endpoints; the rest are predictions.
	chat, graph                                       float64
	sent, failed, skipped, predictions, chats, graphs atomic.Uint64
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Generator, error) {
	var errs []string
	if cfg.Gateway == "" {
		errs = append(errs, "a gateway URL is required")
	}
	if cfg.Rate <= 0 {
		errs = append(errs, "the rate must be positive")
	}
	if cfg.PredictEndpoint == "" && cfg.ChatEndpoint == "" && cfg.GraphEndpoint == "" {
		errs = append(errs, "a predict, a chat or a graph endpoint is required")
	}
	if cfg.PredictEndpoint != "" && cfg.Transaction == nil {
		errs = append(errs, "the predict endpoint needs a transaction source")
	}
	if cfg.GraphEndpoint != "" && cfg.Document == nil {
		errs = append(errs, "the graph endpoint needs a document source")
	}
	if cfg.ChatShare < 0 || cfg.GraphShare < 0 || cfg.ChatShare+cfg.GraphShare > 1 {
		errs = append(errs, "the chat and graph shares must be between 0 and 1 together")
	}
	if len(errs) > 0 {
		return nil, errors.New("demo traffic: " + strings.Join(errs, "; "))
	}
	if cfg.ChatShare == 0 {
		cfg.ChatShare = DefaultChatShare
	}
	if cfg.GraphShare == 0 {
		cfg.GraphShare = DefaultGraphShare
	}
	// Each endpoint configured gets its share; predictions the rest, and
	// without a predict endpoint the others share everything.
	chat, graph, predict := 0.0, 0.0, 0.0
	if cfg.ChatEndpoint != "" {
		chat = cfg.ChatShare
	}
	if cfg.GraphEndpoint != "" {
		graph = cfg.GraphShare
	}
	if cfg.PredictEndpoint != "" {
		predict = 1 - chat - graph
	}
	sum := chat + graph + predict
	if cfg.DriftPeriod <= 0 {
		cfg.DriftPeriod = DefaultDriftPeriod
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Gateway = strings.TrimRight(cfg.Gateway, "/")
	return &Generator{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7472616666696321)), chat: chat / sum, graph: graph / sum}, nil
}

// Stats returns the counts so far.
func (g *Generator) Stats() Stats {
	return Stats{Sent: g.sent.Load(), Failed: g.failed.Load(), Skipped: g.skipped.Load(),
		Predictions: g.predictions.Load(), Chats: g.chats.Load(), Graphs: g.graphs.Load()}
}

// Run sends one request every 1/Rate seconds until ctx ends, then waits
// for the requests in flight (which ctx cancels) and returns.
func (g *Generator) Run(ctx context.Context) {
	interval := time.Duration(float64(time.Second) / g.cfg.Rate)
	start := g.cfg.Clock.Now()
	tick := g.cfg.Clock.NewTicker(interval, "trafficgen", "tick")
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := make(chan struct{}, g.cfg.MaxInFlight)
	// Logged once per run of failures, not per request.
	var warned atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case inflight <- struct{}{}:
		default:
			g.skipped.Add(1)
			continue
		}
		drift := min(1, float64(g.cfg.Clock.Since(start))/float64(g.cfg.DriftPeriod))
		path, key, body := g.next(drift)
		wg.Go(func() {
			defer func() { <-inflight }()
			if err := g.send(ctx, path, key, body); err != nil {
				g.failed.Add(1)
				if ctx.Err() == nil && !warned.Swap(true) {
					g.cfg.Log.Warn("demo traffic: a request failed (further failures are not logged)", slog.String("error", err.Error()))
				}
				return
			}
			warned.Store(false)
			g.sent.Add(1)
		})
	}
}

// chatPrompts are what the demo's support customers ask.
var chatPrompts = []string{
	"Where is my parcel?",
	"How do I reset my password?",
	"Can I change the delivery address of my order?",
	"My card was charged twice, what now?",
	"Do you ship to Norway?",
	"How long does a refund take?",
}

// next draws the next request: its path, key and body.
func (g *Generator) next(drift float64) (path, key string, body []byte) {
	u := g.rng.Float64()
	if u < g.chat {
		g.chats.Add(1)
		msg := map[string]any{
			"messages":   []map[string]string{{"role": "user", "content": chatPrompts[g.rng.IntN(len(chatPrompts))]}},
			"max_tokens": 16 + g.rng.IntN(48),
			"stream":     g.rng.IntN(2) == 0,
		}
		body, _ = json.Marshal(msg)
		return "/v1/endpoints/" + g.cfg.ChatEndpoint + "/chat/completions", g.cfg.ChatKey, body
	}
	if u < g.chat+g.graph {
		g.graphs.Add(1)
		body, _ = json.Marshal(map[string]any{"instances": []map[string]any{g.cfg.Document(g.rng)}})
		return "/v1/endpoints/" + g.cfg.GraphEndpoint + "/predict", g.cfg.GraphKey, body
	}
	g.predictions.Add(1)
	body, _ = json.Marshal(map[string]any{"instances": []map[string]any{g.cfg.Transaction(g.rng, drift)}})
	return "/v1/endpoints/" + g.cfg.PredictEndpoint + "/predict", g.cfg.PredictKey, body
}

func (g *Generator) send(ctx context.Context, path, key string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.Gateway+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := g.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, strings.TrimSpace(string(msg[:min(len(msg), 200)])))
	}
	return nil
}
