package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/app"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/gateway"
	"modelplane/ingest"
	"modelplane/internal/chproc"
	"modelplane/internal/pgproc"
	"modelplane/migrations"
	"modelplane/tracing"
)

// Config configures `modelplane bench`. Each benchmark reads the settings
// it names and ignores the rest.
type Config struct {
	JSON     bool
	Duration time.Duration
	Clients  int
	Profile  string
	// Gateways is how many gateways `bench rollback` runs.
	Gateways int
	// RawGPUs is how many GPUs `bench chargeback` meters per second for its
	// raw day (default 500).
	RawGPUs int
	// The runtime benchmark's sizes: closed-loop clients, measured load
	// per model and batching setting, the throughput MLP's shape, and the
	// cold-start model's least size (MB) and runs.
	RuntimeClients int
	RuntimeTime    time.Duration
	MLP            string
	ColdMB         int
	ColdRuns       int
	LinkMbps       int
	// LLMBig adds to `bench llm` the batching comparison on a generated
	// model too big for the CPU caches (its memory-bound regime).
	LLMBig bool
	// Results is the file of JSON lines `bench summary` reads; empty or
	// "-": standard input.
	Results string
}

// Flags registers the bench settings on fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "how long to drive load")
	fs.IntVar(&c.Clients, "clients", 50, "concurrent clients")
	fs.StringVar(&c.Profile, "cpuprofile", "", "write a CPU profile of the load phase to this file")
	fs.IntVar(&c.Gateways, "gateways", defaultGateways, "gateways watching the routing table (bench rollback)")
	fs.IntVar(&c.RawGPUs, "raw-gpus", 500, "bench chargeback: GPUs in the per-second raw day")
	fs.IntVar(&c.RuntimeClients, "runtime-clients", defaultRuntimeClients, "bench runtime: closed-loop clients")
	fs.DurationVar(&c.RuntimeTime, "runtime-time", defaultRuntimeTime, "bench runtime: measured load per model and batching setting")
	fs.StringVar(&c.MLP, "mlp", defaultMLP, "bench runtime: the throughput ONNX MLP, INPUTSxHIDDENx... (one sigmoid output)")
	fs.IntVar(&c.ColdMB, "cold-mb", defaultColdMB, "bench runtime: least size of the cold-start ONNX model, in MB")
	fs.IntVar(&c.ColdRuns, "cold-runs", defaultColdRuns, "bench runtime: cold starts of each kind (the median is reported)")
	fs.BoolVar(&c.LLMBig, "big", false, "bench llm: also compare the batching on a generated model too big for the CPU caches")
	fs.StringVar(&c.Results, "results", "", "bench summary: the benchmarks' JSON lines (default standard input)")
	fs.IntVar(&c.LinkMbps, "link-mbps", defaultLinkMbps, "bench runtime: also start uncached over a link of this many Mbit/s (0: loopback only)")
}

// Usage lists every benchmark and its flags.
const Usage = `usage: modelplane bench api [--json] [--duration 20s] [--clients 50]
       modelplane bench engine [--json]
       modelplane bench placement [--json]
       modelplane bench ingest [--json]
       modelplane bench gateway [--json] [--cpuprofile file]
       modelplane bench graph [--json] [--duration 20s] [--cpuprofile file]
       modelplane bench rollback [--json] [--gateways 50]
       modelplane bench chargeback [--json] [--raw-gpus 500]
       modelplane bench pages [--json] [--duration 20s] [--clients 50] [--cpuprofile file]
       modelplane bench drift [--json]
       modelplane bench runtime [--json] [--runtime-clients 64] [--runtime-time 16s] [--mlp 64x4096x4096] [--cold-mb 200] [--cold-runs 3] [--link-mbps 1000]
       modelplane bench autoscale [--json]
       modelplane bench llm [--json] [--big]
       modelplane bench summary [--results FILE]   (the JSON lines of the others, then a table of ratios)`

// benchmarks maps each name of `modelplane bench NAME` to its run, which
// measures and prints the result.
var benchmarks = map[string]func(context.Context, Config, io.Writer) error{
	"api":        runAPI,
	"engine":     runEngine,
	"placement":  runPlacement,
	"ingest":     runIngest,
	"gateway":    runGateway,
	"graph":      runGraph,
	"rollback":   runRollback,
	"chargeback": runChargeback,
	"pages":      runPages,
	"drift":      runDrift,
	"runtime":    runRuntimeBench,
	"autoscale":  runAutoscale,
	"llm":        runLLM,
	"summary":    runSummary,
}

// Run runs the benchmark args names (exactly one) and prints its result to
// out: one JSON object with cfg.JSON, else one line.
func Run(ctx context.Context, cfg Config, args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New(Usage)
	}
	run, ok := benchmarks[args[0]]
	if !ok {
		return errors.New(Usage)
	}
	return run(ctx, cfg, out)
}

// emit prints res as one JSON object when asJSON, else the line format
// fills with args.
func emit(out io.Writer, asJSON bool, res any, format string, args ...any) error {
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	_, err := fmt.Fprintf(out, format, args...)
	return err
}

// quantile sorts d and returns its q-quantile: the value at rank
// q·(len-1), rounded down; 0 for no samples. Every figure the benchmarks
// print comes from it, so that they all rank the same way.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

// percentile is d's p-quantile in milliseconds (see ms).
func percentile(d []time.Duration, p float64) float64 { return ms(quantile(d, p)) }

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// round3 rounds to three decimals: the microseconds of a millisecond
// figure, without the float noise of a difference of two.
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// scratch is a benchmark's private directory and the servers it started
// there. close stops them in the reverse order of their start and removes
// the directory, as a chain of defers would.
type scratch struct {
	dir   string
	stops []func()
	// natsCred is the control plane's credential on the scratch NATS, set
	// by nats: the benchmarks' clients connect with it (natsOpts), but for
	// gateway processes, which get their own from natsAuth.
	natsAuth *bus.Authority
	natsCred bus.Credential
	// ch is the scratch ClickHouse, once clickhouse started it.
	ch *chproc.Server
}

// natsOpts are the connection options of the scratch NATS.
func (s *scratch) natsOpts() []nats.Option { return s.natsCred.Options() }

// newScratch makes the directory, readable by the postgres user that
// pgproc runs PostgreSQL as when the benchmark runs as root.
func newScratch(prefix string) (*scratch, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755)
	return &scratch{dir: dir, stops: []func(){func() { os.RemoveAll(dir) }}}, nil
}

// onClose adds f to what close runs (first, being the latest).
func (s *scratch) onClose(f func()) { s.stops = append(s.stops, f) }

func (s *scratch) close() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

// postgres starts a private PostgreSQL under the directory and returns a
// pool on its migrated postgres database.
func (s *scratch) postgres(ctx context.Context) (*pgxpool.Pool, error) {
	pg, err := pgproc.Start(ctx, filepath.Join(s.dir, "pg"))
	if err != nil {
		return nil, err
	}
	s.onClose(pg.Stop)
	pool, err := db.Open(ctx, pg.URL("postgres"))
	if err != nil {
		return nil, err
	}
	s.onClose(pool.Close)
	if err := migrations.Postgres(ctx, pool); err != nil {
		return nil, err
	}
	return pool, nil
}

// clickhouse starts a private ClickHouse under the directory and returns a
// connection to its migrated bench database.
func (s *scratch) clickhouse(ctx context.Context) (driver.Conn, error) {
	chs, err := chproc.Start(ctx, filepath.Join(s.dir, "clickhouse"))
	if err != nil {
		return nil, err
	}
	s.onClose(chs.Stop)
	s.ch = chs
	return s.clickhouseDB(ctx, "bench")
}

// clickhouseDB returns a connection to database name of the scratch
// ClickHouse, created and migrated: the same tables and views as bench.
func (s *scratch) clickhouseDB(ctx context.Context, name string) (driver.Conn, error) {
	ch, err := ingest.OpenClickHouse(ctx, s.ch.URL(name))
	if err != nil {
		return nil, err
	}
	s.onClose(func() { ch.Close() })
	if err := migrations.ClickHouse(ctx, ch); err != nil {
		return nil, err
	}
	return ch, nil
}

// nats starts an embedded NATS under the directory with the contract's
// buckets and streams, and returns its URL and a JetStream client.
func (s *scratch) nats(ctx context.Context) (string, jetstream.JetStream, error) {
	auth, err := bus.NewAuthority()
	if err != nil {
		return "", nil, err
	}
	s.natsAuth = auth
	if s.natsCred, err = auth.ControlPlane(); err != nil {
		return "", nil, err
	}
	ns, err := bus.StartEmbedded(filepath.Join(s.dir, "nats"), auth, nil)
	if err != nil {
		return "", nil, err
	}
	s.onClose(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL(), s.natsOpts()...)
	if err != nil {
		return "", nil, err
	}
	s.onClose(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return "", nil, err
	}
	if err := bus.Ensure(ctx, js); err != nil {
		return "", nil, err
	}
	return ns.ClientURL(), js, nil
}

// serve serves h on a free loopback port until close and returns its
// address.
func (s *scratch) serve(h http.Handler) (string, error) {
	return s.serveWith(&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
}

// serveGateway serves the gateway's routes h as serve does, with the
// server modelplane gateway runs.
func (s *scratch) serveGateway(h http.Handler) (string, error) {
	return s.serveWith(app.GatewayServer(h, slog.New(slog.DiscardHandler)))
}

// serveWith runs srv on a free loopback port until close.
func (s *scratch) serveWith(srv interface {
	Serve(net.Listener) error
	Close() error
}) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go srv.Serve(ln)
	s.onClose(func() { srv.Close() })
	return ln.Addr().String(), nil
}

// profile writes a CPU profile to file (none when empty) until close.
func (s *scratch) profile(file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	s.onClose(func() { f.Close() })
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	s.onClose(pprof.StopCPUProfile)
	return nil
}

// startGateway builds and starts a gateway on nc whose rate limits never
// bind: the gateway and rollback benchmarks measure the request path and
// the routing table's propagation, not the limiter. id may be empty (the
// gateway then names itself).
func startGateway(ctx context.Context, nc *nats.Conn, stateDir, id string, statsInterval time.Duration) (*gateway.Gateway, error) {
	// Traced as the OTEL_* variables say, as `modelplane gateway` is
	// (bench gateway runs one gateway with tracing on, one with it off).
	tp, err := tracing.FromEnv(ctx, "modelplane-gateway")
	if err != nil {
		return nil, err
	}
	cfg := gateway.Config{StateDir: stateDir, ID: id, KeyRPS: 1e9, KeyBurst: 1e9, EndpointRPS: 1e9, EndpointBurst: 1e9,
		MaxOutstandingPerReplica: 4096, StatsInterval: statsInterval}
	if tp.On {
		cfg.Tracer = tp
	}
	g, err := gateway.New(cfg, nc, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	if err := g.Start(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// putKey makes an API key of the shape package auth makes, stores its
// entry in the keys bucket for the gateways and returns the raw key.
func putKey(ctx context.Context, js jetstream.JetStream) (string, error) {
	id := make([]byte, 6)
	secret := make([]byte, 32)
	_, _ = rand.Read(id)
	_, _ = rand.Read(secret)
	prefix := "mpk_" + hex.EncodeToString(id)
	raw := prefix + "_" + base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(raw))
	entry := busapi.KeyEntry{Prefix: prefix, SHA256: hex.EncodeToString(sum[:]), Team: "bench", Role: "engineer"}
	keys, err := js.KeyValue(ctx, busapi.BucketKeys)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(entry)
	if _, err := keys.Put(ctx, entry.Prefix, b); err != nil {
		return "", err
	}
	return raw, nil
}
