package app

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/auth"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/demo/fraud"
	"modelplane/gguf"
	"modelplane/internal/freeport"
	"modelplane/internal/natstest"
	"modelplane/internal/otlptest"
	"modelplane/internal/wait"
	"modelplane/llm"
	"modelplane/serveapi"
)

// TestOneRequestOneTraceAcrossProcesses runs `modelplane gateway` and
// `modelplane runtime` (the demo's v23 fraud model) as two processes,
// both exporting to a real OTLP/HTTP receiver through the standard
// OTEL_EXPORTER_OTLP_ENDPOINT, and sends one predict: the receiver gets
// one trace holding the gateway's request span as its root and the
// runtime's span under it, each from its own service; the trace id is the
// one the gateway answered with in traceparent. A streamed chat to a
// second runtime serving a GGUF LLM does the same, with the generation's
// prefill and decode spans under the runtime's.
func TestOneRequestOneTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	bin := modelplaneBinary(t)
	rcv := otlptest.Start(t)
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}

	// The runtime, serving v23 as its agent would lay it out.
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	v23 := vs[0]
	dir := t.TempDir()
	cfg := v23.Serving
	cfg.Model, cfg.Version = "fraud-scoring", v23.Name
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, v23.File), v23.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rtPort, _ := freeport.Get()
	rtAddr := "127.0.0.1:" + itoa(rtPort)
	const token = "trace-replica-token"
	startChild(t, bin, []string{"runtime", "--model-dir", dir, "--port", itoa(rtPort)}, append(otel, "MP_REPLICA_TOKEN="+token))
	wait.Eventually(t, 2*time.Minute, func() bool { return httpOK("http://" + rtAddr + "/v2/health/ready") }, "runtime on %s never ready", rtAddr)

	// A second runtime serving a GGUF LLM (the engine's demo model, the
	// directory's only file) for a chat's trace.
	llmDir := t.TempDir()
	if err := llm.WriteDemoFile(filepath.Join(llmDir, "model.gguf"), gguf.F32); err != nil {
		t.Fatal(err)
	}
	llmPort, _ := freeport.Get()
	llmAddr := "127.0.0.1:" + itoa(llmPort)
	startChild(t, bin, []string{"runtime", "--model-dir", llmDir, "--port", itoa(llmPort)}, append(otel, "MP_REPLICA_TOKEN="+token))
	wait.Eventually(t, 2*time.Minute, func() bool { return httpOK("http://" + llmAddr + "/v2/health/ready") }, "LLM runtime on %s never ready", llmAddr)

	// NATS with the routes to them and a key of their team, as the control
	// plane would publish them.
	s := natstest.New(t)
	nc, err := nats.Connect(s.ClientURL(), natstest.ControlPlane(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	rt := busapi.Route{Endpoint: "fraud-scoring", Team: "risk", Task: "classification", Generation: 1, Versions: []busapi.RouteVersion{{
		Name: v23.Name, Weight: 100, Replicas: []busapi.RouteReplica{{ID: "fraud-scoring-v23-a", Addr: rtAddr, Token: token}}}}}
	kvPut(t, js, busapi.BucketRoutes, rt.Endpoint, rt)
	chat := busapi.Route{Endpoint: "chat", Team: "risk", Task: "llm", Generation: 1, Versions: []busapi.RouteVersion{{
		Name: "c1", Weight: 100, Replicas: []busapi.RouteReplica{{ID: "chat-c1-a", Addr: llmAddr, Token: token}}}}}
	kvPut(t, js, busapi.BucketRoutes, chat.Endpoint, chat)
	key, prefix, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	kvPut(t, js, busapi.BucketKeys, prefix, busapi.KeyEntry{Prefix: prefix, SHA256: hex.EncodeToString(auth.HashKey(key)), Team: "risk", Role: "engineer"})

	// The gateway, with its own NATS credential.
	cred, err := natstest.Auth(t).Gateway("trace")
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "gateway.creds")
	if err := cred.WriteFile(creds); err != nil {
		t.Fatal(err)
	}
	gwPort, _ := freeport.Get()
	admPort, _ := freeport.Get()
	gwURL, admURL := "http://127.0.0.1:"+itoa(gwPort), "http://127.0.0.1:"+itoa(admPort)
	startChild(t, bin, []string{"gateway"}, append(otel, "MP_GATEWAY_ADDR=127.0.0.1:"+itoa(gwPort), "MP_GATEWAY_ADMIN_ADDR=127.0.0.1:"+itoa(admPort),
		"MP_GATEWAY_STATE_DIR="+t.TempDir(), "MP_NATS_URL="+s.ClientURL(), "MP_NATS_CREDS="+creds))
	wait.Eventually(t, 2*time.Minute, func() bool { return httpOK(admURL + "/readyz") }, "gateway never ready")

	body, _ := json.Marshal(map[string]any{"instances": []any{fraud.NewGenerator(fraud.DefaultSeed).Next(0).Instance}})
	req, _ := http.NewRequest(http.MethodPost, gwURL+"/v1/endpoints/fraud-scoring/predict", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer bytes.Buffer
	answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("predict = %d %s", resp.StatusCode, answer.String())
	}
	parts := strings.Split(resp.Header.Get("traceparent"), "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		t.Fatalf("answer traceparent %q, want a W3C traceparent", resp.Header.Get("traceparent"))
	}
	traceID := parts[1]

	find := func(spans []otlptest.Span, service, name string) (otlptest.Span, bool) {
		for _, sp := range spans {
			if sp.Service == service && sp.Name == name {
				return sp, true
			}
		}
		return otlptest.Span{}, false
	}
	wait.Eventually(t, time.Minute, func() bool {
		spans := rcv.Trace(traceID)
		_, gw := find(spans, "modelplane-gateway", "ml_serving.request")
		_, rt := find(spans, "modelplane-runtime", "ml_serving.runtime")
		return gw && rt
	}, "receiver never got the trace %s from both processes: %v", traceID, wait.Show(func() any { return rcv.Spans() }))

	spans := rcv.Trace(traceID)
	root, _ := find(spans, "modelplane-gateway", "ml_serving.request")
	run, _ := find(spans, "modelplane-runtime", "ml_serving.runtime")
	if root.ParentSpanID != "" {
		t.Errorf("gateway's request span has parent %s; want the trace's root (the caller sent no traceparent)", root.ParentSpanID)
	}
	if run.ParentSpanID != root.SpanID {
		t.Errorf("runtime's span has parent %s; want the gateway's request span %s", run.ParentSpanID, root.SpanID)
	}
	services := map[string]bool{}
	for _, sp := range rcv.Spans() {
		if sp.TraceID != traceID && (sp.Name == "ml_serving.request" || sp.Name == "ml_serving.runtime") {
			t.Errorf("span %s of %s in another trace %s: the one request made more than one trace", sp.Name, sp.Service, sp.TraceID)
		}
		if sp.TraceID == traceID {
			services[sp.Service] = true
		}
	}
	if len(services) != 2 {
		t.Errorf("trace %s holds spans of %v; want the gateway's and the runtime's alone", traceID, services)
	}

	// A streamed chat: the LLM runtime's span under the gateway's, and
	// the generation's prefill and decode under it.
	req, _ = http.NewRequest(http.MethodPost, gwURL+"/v1/endpoints/chat/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hello"}],"max_tokens":8,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	answer.Reset()
	answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(answer.String(), "[DONE]") {
		t.Fatalf("chat = %d %s", resp.StatusCode, answer.String())
	}
	chatTrace := strings.Split(resp.Header.Get("traceparent"), "-")[1]
	wait.Eventually(t, time.Minute, func() bool {
		_, gw := find(rcv.Trace(chatTrace), "modelplane-gateway", "ml_serving.request")
		_, dec := find(rcv.Trace(chatTrace), "modelplane-runtime", "ml_serving.decode")
		return gw && dec
	}, "receiver never got the chat's request and decode spans in trace %s: %v", chatTrace, wait.Show(func() any { return rcv.Spans() }))
	spans = rcv.Trace(chatTrace)
	root, _ = find(spans, "modelplane-gateway", "ml_serving.request")
	run, _ = find(spans, "modelplane-runtime", "ml_serving.runtime")
	prefill, _ := find(spans, "modelplane-runtime", "ml_serving.prefill")
	decode, _ := find(spans, "modelplane-runtime", "ml_serving.decode")
	if root.SpanID == "" || run.ParentSpanID != root.SpanID || prefill.ParentSpanID != run.SpanID || decode.ParentSpanID != run.SpanID {
		t.Errorf("chat trace: gateway %q, runtime %q under %q, prefill and decode under %q and %q; want gateway → runtime → prefill, decode",
			root.SpanID, run.SpanID, run.ParentSpanID, prefill.ParentSpanID, decode.ParentSpanID)
	}
}

// startChild runs the modelplane binary with args and env added to the
// test's environment, and stops it (SIGTERM, which flushes its traces)
// when the test ends; one still running 30 seconds after the signal fails
// the test and is killed.
func startChild(t *testing.T, bin string, args, env []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		exited := func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		// Deferred: Eventually ends a failing test's cleanup early.
		defer func() {
			if !exited() {
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("modelplane %s:\n%s", args[0], out.String())
			}
		}()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		wait.Eventually(t, 30*time.Second, exited, "modelplane %s still runs 30s after SIGTERM", args[0])
	})
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kvPut stores v as JSON under key in bucket.
func kvPut(t *testing.T, js jetstream.JetStream, bucket, key string, v any) {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if _, err := kv.Put(t.Context(), key, b); err != nil {
		t.Fatal(err)
	}
}
