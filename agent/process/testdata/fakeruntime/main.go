// Command fakeruntime is a small real runtime for the process driver's
// tests: it serves the built-in runtime's health, ready and metrics paths
// and a /predict, and flags make it misbehave the ways real runtimes do.
// Files the test creates are its signals, since after SIGTERM it serves
// nothing a test could call.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	port := flag.Int("port", 0, "port to listen on")
	host := flag.String("host", "127.0.0.1", "address to listen on (a pod's IP, when a test plays the kubelet)")
	modelDir := flag.String("model-dir", "", "model directory")
	crash := flag.Bool("crash", false, "exit with status 3 at once")
	readyFile := flag.String("ready-file", "", "report ready only once this file exists")
	holdFile := flag.String("hold-file", "", "hold every /predict until this file exists")
	spam := flag.Int("spam", 0, "write this many bytes to stdout at start")
	tryRead := flag.String("try-read", "", "a file /env says whether this process can read")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM: only SIGKILL ends it")
	sickFile := flag.String("sick-file", "", "fail the health path (liveness) once this file exists")
	metricsPort := flag.Int("metrics-port", 0, "serve /metrics on 127.0.0.1 at this port, as Triton does, and not on -port")
	llamacpp := flag.Bool("llamacpp-nokv", false, "serve /metrics in llama-server's names, from a build without the KV gauge")
	flag.Parse()

	fmt.Printf("fakeruntime pid %d model dir %s\n", os.Getpid(), *modelDir)
	// The replica's token, as the built-in runtime reads it: once, from
	// the pipe the agent names.
	token := ""
	if fd, err := strconv.Atoi(os.Getenv("MP_REPLICA_TOKEN_FD")); err == nil {
		f := os.NewFile(uintptr(fd), "token")
		b, _ := io.ReadAll(f)
		f.Close()
		token = string(b)
	}
	if *crash {
		fmt.Println("fakeruntime: crashing on start as told")
		os.Exit(3)
	}
	if *spam > 0 {
		line := strings.Repeat("x", 99) + "\n"
		for n := 0; n < *spam; n += len(line) {
			os.Stdout.WriteString(line)
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		fmt.Println("fakeruntime: listen:", err)
		os.Exit(2)
	}
	var served, inflight atomic.Int64
	exists := func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) {
		if *sickFile != "" && exists(*sickFile) {
			http.Error(w, "wedged", http.StatusInternalServerError)
		}
	})
	ready := func(w http.ResponseWriter, r *http.Request) {
		if *readyFile != "" && !exists(*readyFile) {
			http.Error(w, "loading", http.StatusServiceUnavailable)
		}
	}
	mux.HandleFunc("GET /v2/health/ready", ready)
	// Triton's per-model readiness, which its catalogue entry asks.
	mux.HandleFunc("GET /v2/models/{model}/ready", ready)
	// As Triton on its own metrics port: no in-flight gauge of the
	// built-in runtime's (the adapter falls back to the pending count),
	// every held request pending, 5 ms of queue time per request answered,
	// and a GPU a quarter busy.
	triton := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE nv_inference_request_success counter\nnv_inference_request_success{model=\"m\",version=\"1\"} %d\n", served.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_pending_request_count gauge\nnv_inference_pending_request_count{model=\"m\",version=\"1\"} %d\n", inflight.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\",version=\"1\"} %d\n", 2*served.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_exec_count counter\nnv_inference_exec_count{model=\"m\",version=\"1\"} %d\n", served.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_queue_duration_us counter\nnv_inference_queue_duration_us{model=\"m\",version=\"1\"} %d\n", 5000*served.Load())
		fmt.Fprintf(w, "# TYPE nv_gpu_utilization gauge\nnv_gpu_utilization{gpu_uuid=\"GPU-0\"} 0.25\n")
	}
	if *metricsPort > 0 {
		ml, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*metricsPort))
		if err != nil {
			fmt.Println("fakeruntime: listen for metrics:", err)
			os.Exit(2)
		}
		mm := http.NewServeMux()
		mm.HandleFunc("GET /metrics", triton)
		go func() { _ = http.Serve(ml, mm) }()
	}
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if *metricsPort > 0 {
			http.NotFound(w, r) // on a port of their own
			return
		}
		if *llamacpp {
			fmt.Fprintf(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n", inflight.Load())
			fmt.Fprintf(w, "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n")
			fmt.Fprintf(w, "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %d\n", 10*served.Load())
			return
		}
		fmt.Fprintf(w, "# TYPE nv_inference_request_success counter\nnv_inference_request_success{model=\"m\",version=\"1\"} %d\n", served.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_pending_request_count gauge\nnv_inference_pending_request_count{model=\"m\",version=\"1\"} 0\n")
		fmt.Fprintf(w, "# TYPE modelplane_runtime_inflight_requests gauge\nmodelplane_runtime_inflight_requests %d\n", inflight.Load())
		// Each request counts as two inferences in one execution, so that
		// the adapter's mean batch (2) is visible in the heartbeat.
		fmt.Fprintf(w, "# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\",version=\"1\"} %d\n", 2*served.Load())
		fmt.Fprintf(w, "# TYPE nv_inference_exec_count counter\nnv_inference_exec_count{model=\"m\",version=\"1\"} %d\n", served.Load())
	})
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Add(-1)
		for *holdFile != "" && !exists(*holdFile) {
			time.Sleep(5 * time.Millisecond)
		}
		served.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"pid": os.Getpid(), "score": 0.5})
	})
	// POST /alloc?mb=N allocates N MiB and keeps it, touching every page,
	// as a model whose requests allocate rows × classes does.
	var kept [][]byte
	mux.HandleFunc("POST /alloc", func(w http.ResponseWriter, r *http.Request) {
		mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		for range mb {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			kept = append(kept, b)
		}
		fmt.Fprintf(w, "holding %d MiB\n", len(kept))
	})
	// GET /read?path=P says whether this process can read P (a sibling's
	// model file, /proc/<pid>/environ, /proc/<pid>/fd/<n>).
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		_ = json.NewEncoder(w).Encode(map[string]any{"readable": err == nil, "content": string(b)})
	})
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, r *http.Request) {
		status, _ := os.ReadFile("/proc/self/status")
		cpus := ""
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				cpus = strings.TrimSpace(v)
			}
		}
		readable := false
		if *tryRead != "" {
			_, err := os.ReadFile(*tryRead)
			readable = err == nil
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"uid": os.Getuid(), "gid": os.Getgid(), "cpus": cpus, "environ": os.Environ(), "readable": readable, "pid": os.Getpid(),
			"token": token, "header_token": r.Header.Get("X-Modelplane-Replica-Token"),
		})
	})
	srv := &http.Server{Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	drained := make(chan struct{})
	go func() {
		for range sig {
			if *ignoreTerm {
				fmt.Println("fakeruntime: SIGTERM ignored as told")
				continue
			}
			fmt.Println("fakeruntime: SIGTERM; draining")
			// Shutdown returns once every in-flight response is written.
			_ = srv.Shutdown(context.Background())
			close(drained)
			return
		}
	}()
	if err := srv.Serve(l); err != http.ErrServerClosed {
		fmt.Println("fakeruntime: serve:", err)
		os.Exit(1)
	}
	<-drained
	fmt.Printf("fakeruntime: drained after %d requests\n", served.Load())
}
