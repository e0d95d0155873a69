package trafficgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/demo/trafficgen"
	"modelplane/internal/wait"
)

// gateway records what reaches it.
type gateway struct {
	mu      sync.Mutex
	paths   map[string]int
	keys    map[string]string // path → key
	amounts []float64
	texts   []string
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paths[r.URL.Path]++
	g.keys[r.URL.Path] = r.Header.Get("Authorization")
	var p struct {
		Instances []map[string]any `json:"instances"`
	}
	if json.Unmarshal(body, &p) == nil && len(p.Instances) == 1 {
		switch r.URL.Path {
		case "/v1/endpoints/fraud-scoring/predict":
			g.amounts = append(g.amounts, p.Instances[0]["amount"].(float64))
		case "/v1/endpoints/document-processor/predict":
			text, _ := p.Instances[0]["text"].(string)
			g.texts = append(g.texts, text)
		}
	}
	w.Write([]byte(`{}`))
}

func (g *gateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.paths {
		n += c
	}
	return n
}

// TestSendsTheMixWithDriftAndStopsWithItsContext drives the generator on a
// mock clock against a real HTTP server: the three endpoints get their
// shares of the requests with their keys, the graph a drawn document, the
// drifting feature moves over the drift period, and Run returns once its
// context ends.
func TestSendsTheMixWithDriftAndStopsWithItsContext(t *testing.T) {
	t.Parallel()
	gw := &gateway{paths: map[string]int{}, keys: map[string]string{}}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	clk := quartz.NewMock(t)
	trap := clk.Trap().NewTicker("trafficgen", "tick")
	defer trap.Close()
	g, err := trafficgen.New(trafficgen.Config{Gateway: srv.URL, Rate: 10, PredictEndpoint: "fraud-scoring", PredictKey: "risk-key",
		ChatEndpoint: "support-chat", ChatKey: "search-key", ChatShare: 0.3, DriftPeriod: 10 * time.Second, Clock: clk,
		GraphEndpoint: "document-processor", GraphKey: "graph-key", GraphShare: 0.2,
		Document: func(r *rand.Rand) map[string]any {
			return map[string]any{"text": fmt.Sprintf("invoice %d", r.IntN(1000))}
		},
		Transaction: func(r *rand.Rand, drift float64) map[string]any {
			return map[string]any{"amount": 10 + 100*drift + r.Float64()}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	trap.MustWait(ctx).MustRelease(ctx)
	const ticks = 200 // 20 s at 10/s: twice the drift period
	for i := range ticks {
		clk.Advance(100 * time.Millisecond).MustWait(ctx)
		// One request at a time keeps the order of the amounts.
		wait.Eventually(t, 10*time.Second, func() bool { return gw.count() == i+1 }, "request %d never arrived", i+1)
	}
	cancel()
	wait.Eventually(t, 10*time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, "Run did not return after its context ended")
	gw.mu.Lock()
	defer gw.mu.Unlock()
	pred, chat := gw.paths["/v1/endpoints/fraud-scoring/predict"], gw.paths["/v1/endpoints/support-chat/chat/completions"]
	graph := gw.paths["/v1/endpoints/document-processor/predict"]
	// Shares 50/30/20 of 200: each within about five standard deviations.
	if pred+chat+graph != ticks || pred < 65 || pred > 135 || chat < 27 || chat > 93 || graph < 12 || graph > 68 {
		t.Errorf("%d predictions, %d chats and %d graph calls of %d requests; want about 100/60/40", pred, chat, graph, ticks)
	}
	if gw.keys["/v1/endpoints/fraud-scoring/predict"] != "Bearer risk-key" || gw.keys["/v1/endpoints/support-chat/chat/completions"] != "Bearer search-key" ||
		gw.keys["/v1/endpoints/document-processor/predict"] != "Bearer graph-key" {
		t.Errorf("keys %v", gw.keys)
	}
	if len(gw.texts) != graph || !strings.HasPrefix(gw.texts[0], "invoice ") {
		t.Errorf("graph instances' texts %q; want one drawn document per call", gw.texts)
	}
	if s := g.Stats(); s.Predictions != uint64(pred) || s.Chats != uint64(chat) || s.Graphs != uint64(graph) {
		t.Errorf("stats %+v; the gateway saw %d/%d/%d", s, pred, chat, graph)
	}
	first, last := gw.amounts[0], gw.amounts[len(gw.amounts)-1]
	if first > 12 || last < 109 {
		t.Errorf("amount moved from %v to %v; want it to drift from 10 to 110", first, last)
	}
	if s := g.Stats(); s.Sent != ticks || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestNewNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	if _, err := trafficgen.New(trafficgen.Config{PredictEndpoint: "fraud-scoring"}); err == nil {
		t.Fatal("no gateway, rate or transaction source accepted")
	} else {
		for _, want := range []string{"gateway", "rate", "transaction"} {
			if !contains(err.Error(), want) {
				t.Errorf("error %q does not name the %s", err, want)
			}
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestNewRefusesBadGraphSettings(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		cfg  trafficgen.Config
		want string
	}{
		"graph without documents": {trafficgen.Config{Gateway: "http://gw", Rate: 1, GraphEndpoint: "document-processor"}, "document source"},
		"shares over one": {trafficgen.Config{Gateway: "http://gw", Rate: 1, ChatEndpoint: "c", ChatShare: 0.7, GraphEndpoint: "d", GraphShare: 0.5,
			Document: func(*rand.Rand) map[string]any { return nil }}, "shares"},
	} {
		if _, err := trafficgen.New(c.cfg); err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want one naming the %s", name, err, c.want)
		}
	}
}
