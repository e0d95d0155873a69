package runtime_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/runtime"
)

// TestTokenRequiredButForProbes: a runtime given a replica token answers 401
// to inference and metadata without it (or with another), serves them with
// it, and leaves the agent's probes open.
func TestTokenRequiredButForProbes(t *testing.T) {
	t.Parallel()
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), &opened{}, runtime.Options{Token: "tok-1"})
	send := func(method, path, token, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set(busapi.ReplicaTokenHeader, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	predict := `{"instances":[{"amount":5,"country":"us","merchant":"grocery"}]}`
	infer := `{"inputs":[{"name":"amount","shape":[1],"datatype":"FP64","data":[5]}]}`
	for _, tc := range []struct {
		method, path, body string
	}{{"POST", "/predict", predict}, {"POST", "/v2/models/fraud-scoring/infer", infer}, {"GET", "/v2", ""}, {"GET", "/v2/models/fraud-scoring", ""}} {
		for _, tok := range []string{"", "tok-2"} {
			if got := send(tc.method, tc.path, tok, tc.body); got != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q = %d, want 401", tc.method, tc.path, tok, got)
			}
		}
		if got := send(tc.method, tc.path, "tok-1", tc.body); got == http.StatusUnauthorized {
			t.Errorf("%s %s with its token = 401", tc.method, tc.path)
		}
	}
	if got := send("POST", "/predict", "tok-1", predict); got != http.StatusOK {
		t.Errorf("POST /predict with its token = %d, want 200", got)
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/fraud-scoring/ready", "/v2/stats", "/metrics"} {
		if got := send("GET", p, "", ""); got != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", p, got)
		}
	}
}
