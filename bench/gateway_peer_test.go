package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The peer does the gateway's work: it answers only a caller whose key
// hashes to the stored digest, passes exactly the bodies whose every
// instance the endpoint's schema accepts (held to the schema by
// jsonschema, not by the peer's own reading of it), splits the versions
// about 90/10, and gives the replica and the caller one request id.
func TestPeerDoesTheGatewaysWork(t *testing.T) {
	t.Parallel()
	if _, err := proxyBin("nginx"); err != nil {
		t.Skip("nginx is not installed (scripts/bench-proxies.sh installs it)")
	}
	if _, err := findPeerFiles(); err != nil {
		t.Skip(err.Error())
	}
	s, err := newScratch("mp-bench-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var mu sync.Mutex
	seen := map[string]int{} // request ids the replicas got
	var replicas []string
	for range 2 {
		addr, err := s.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if r.URL.Path != "/predict" {
				http.NotFound(w, r)
				return
			}
			mu.Lock()
			seen[r.Header.Get("X-Request-Id")]++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, predictOut)
		}))
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, addr)
	}
	const key = "mpk_0123456789ab_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"
	p, addr, version, err := startPeer(s.dir, key, replicas, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if !strings.HasPrefix(version, "1.") {
		t.Errorf("version %q, want nginx's", version)
	}
	u := "http://" + addr + "/v1/endpoints/" + predictEndpoint + "/predict"
	post := func(u, auth, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	schema, err := jsonschema.UnmarshalJSON(strings.NewReader(predictSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("predict.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("predict.json")
	if err != nil {
		t.Fatal(err)
	}
	accepts := func(body string) bool {
		var doc struct{ Instances []json.RawMessage }
		if json.Unmarshal([]byte(body), &doc) != nil || len(doc.Instances) == 0 {
			return false
		}
		for _, raw := range doc.Instances {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
			if err != nil || sch.Validate(inst) != nil {
				return false
			}
		}
		return true
	}
	for _, body := range []string{
		predictIn,
		`{"instances":[{"amount":0,"country":"FR"}]}`,
		`{"instances":[{"country":"DE","amount":1e3}]}`,
		`{"instances":[{"amount":-1,"country":"DE"}]}`,
		`{"instances":[{"amount":1,"country":"DEU"}]}`,
		`{"instances":[{"amount":"1","country":"DE"}]}`,
		`{"instances":[{"amount":1}]}`,
		`{"instances":[{"amount":1,"country":"DE","extra":true}]}`,
		`{"instances":[{"amount":1,"country":"DE"},{"amount":2,"country":7}]}`,
		`{"instances":[]}`,
		`{"instances":{"amount":1,"country":"DE"}}`,
		`{"instances":[[1,"DE"]]}`,
		`not json`,
		``,
	} {
		resp := post(u, "Bearer "+key, body)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusBadRequest
		if accepts(body) {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d %s, want %d as the schema says", body, resp.StatusCode, got, want)
		}
		if want == http.StatusOK && string(got) != predictOut {
			t.Errorf("%s: answer %q, want the replica's", body, got)
		}
	}

	for _, auth := range []string{"", "Basic " + key, "Bearer " + key + "x", "Bearer mpk_ffffffffffff_" + key[17:]} {
		resp := post(u, auth, predictIn)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}
	resp := post("http://"+addr+"/v1/endpoints/other/predict", "Bearer "+key, predictIn)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("another endpoint: %d, want 404", resp.StatusCode)
	}

	mu.Lock()
	clear(seen)
	mu.Unlock()
	versions := map[string]int{}
	ids := map[string]bool{}
	const n = 400
	for range n {
		resp := post(u, "Bearer "+key, predictIn)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d, want 200", resp.StatusCode)
		}
		versions[resp.Header.Get("X-Model-Version")]++
		ids[resp.Header.Get("X-Request-Id")] = true
	}
	if len(versions) != 2 || versions["canary"] < n/20 || versions["canary"] > n/5 {
		t.Errorf("versions %v over %d requests, want stable and about 10 %% canary", versions, n)
	}
	// Every phase's Lua ran without an error (a failing log phase would
	// only show in nginx's log).
	if log, err := os.ReadFile(filepath.Join(s.dir, "nginx_lua", "error.log")); err != nil || strings.Contains(string(log), "[error]") {
		t.Errorf("the peer's log: %v %s", err, log)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != n || len(seen) != n {
		t.Fatalf("%d request ids answered and %d seen by the replicas for %d requests, want one each", len(ids), len(seen), n)
	}
	for id := range ids {
		if len(id) != 32 || seen[id] != 1 {
			t.Errorf("request id %q answered, seen %d times by the replicas; want 32 hex digits, once", id, seen[id])
		}
	}
}
