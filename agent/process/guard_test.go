package process

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/busapi"
)

// call sends method path to addr with the replica token (none when "").
func call(t *testing.T, method, addr, path, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"instances":[{}]}`))
	if token != "" {
		req.Header.Set(busapi.ReplicaTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// TestGuardChecksTheTokenOfARuntimeThatDoesNot: a runtime whose catalogue
// entry does not check the replica's token itself (vLLM, Triton,
// llama.cpp's server; here the fake runtime) is reached only through the
// agent's guard on the replica's address: without the token a request is
// 401 and never reaches it, with it the answer is the runtime's, and the
// agent's probes pass without one. An agent that restarts guards the
// runtime it adopts again, on the same address, without restarting it.
func TestGuardChecksTheTokenOfARuntimeThatDoesNot(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := spec("r-guard")
	s.Token = "replica-token-1"
	d1 := newDriver(t, state, quartz.NewMock(t), nil)
	r1 := start(t, d1, s, "")
	waitReady(t, r1)
	addr := r1.Addr()

	check := func(stage string) float64 {
		t.Helper()
		if code, _ := call(t, http.MethodPost, addr, "/predict", ""); code != http.StatusUnauthorized {
			t.Errorf("%s: predict without the token = %d, want 401", stage, code)
		}
		if code, _ := call(t, http.MethodPost, addr, "/predict", "another-token"); code != http.StatusUnauthorized {
			t.Errorf("%s: predict with a wrong token = %d, want 401", stage, code)
		}
		if code, _ := call(t, http.MethodGet, addr, "/metrics", ""); code != http.StatusOK {
			t.Errorf("%s: metrics without the token = %d, want the probe path open", stage, code)
		}
		code, body := call(t, http.MethodPost, addr, "/predict", s.Token)
		if code != http.StatusOK || body["pid"] == nil {
			t.Fatalf("%s: predict with the token = %d %v, want the runtime's answer", stage, code, body)
		}
		return body["pid"].(float64)
	}
	pid := check("started")
	if got := observe(t, r1).Requests; got != 1 {
		t.Errorf("the runtime counted %d requests, want 1: the refused ones never reached it", got)
	}

	d1.detach() // the agent's process ends, and its guard with it
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Errorf("the replica's address still answers with the agent gone; want the guard closed")
	}
	d2 := newDriver(t, state, quartz.NewMock(t), nil)
	r2, err := d2.Adopt(t.Context(), s, addr)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if o := observe(t, r2); !o.Ready || o.Restarts != 0 {
		t.Errorf("adopted replica: %+v, want ready with no restart", o)
	}
	if again := check("adopted"); again != pid {
		t.Errorf("adopted replica answers from pid %v, want %v: the same process", again, pid)
	}
}
