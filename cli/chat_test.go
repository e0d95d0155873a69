package cli_test

import (
	"bytes"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/cli"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime"
)

// TestChatStreamsThroughTheGateway chats with a real LLM replica (the
// built-in engine on the demo GGUF model) through a real gateway: one
// message with -m, then a conversation of two turns read from stdin, and
// an unknown endpoint's 404 as exit 3.
func TestChatStreamsThroughTheGateway(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	dir := t.TempDir()
	if err := llm.WriteDemoFile(filepath.Join(dir, "demo.gguf"), gguf.F32); err != nil {
		t.Fatal(err)
	}
	rt := runtime.New(runtime.Options{Token: "tok"})
	if err := rt.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := rt.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	replica := httptest.NewServer(rt.Handler())
	t.Cleanup(replica.Close)
	s.gateway = s.gatewayTo(t, busapi.Route{Endpoint: "risk-chat", Team: "risk", Task: "llm", Generation: 1,
		Versions: []busapi.RouteVersion{{Name: "v1", Weight: 100, Replicas: []busapi.RouteReplica{{ID: "r-1", Addr: strings.TrimPrefix(replica.URL, "http://"), Token: "tok"}}}}})
	risk := s.keys["risk-admin"]

	first := s.run(t, risk, "chat", "risk-chat", "-m", "hello", "--max-tokens", "4", "--temperature", "0").ok(t, "chat -m")
	if strings.TrimSpace(first) == "" || !strings.HasSuffix(first, "\n") {
		t.Errorf("chat -m printed %q; want the streamed answer and a newline", first)
	}

	var stdout, stderr bytes.Buffer
	env := map[string]string{"MP_API": s.url + "/api/v1", "MP_API_KEY": risk, "MP_GATEWAY": s.gateway}
	code := cli.Run(t.Context(), []string{"chat", "risk-chat", "--max-tokens", "4", "--temperature", "0"}, cli.Env{Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader("hello\n\nhow are you?\n"), ConfigDir: t.TempDir()})
	if code != 0 {
		t.Fatalf("chat from stdin: exit %d: %s", code, stderr.String())
	}
	// The first turn is the -m conversation again (greedy); the second
	// answer follows it.
	if got := stdout.String(); !strings.HasPrefix(got, first) || len(got) <= len(first) || !strings.HasSuffix(got, "\n") {
		t.Errorf("two turns printed %q; want %q (the first turn's answer) and a second answer", got, first)
	}

	s.run(t, risk, "chat", "nowhere", "-m", "hi").want(t, "an unknown endpoint", 3, "404")
}
