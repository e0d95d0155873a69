package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/demo/docproc"
	"modelplane/internal/wait"
)

// TestDemoDocumentProcessor is issue 29's demo pipeline as a user meets
// it after `make run`: risk's key, through the real gateway, sends
// held-out sentences (of templates the classifier never saw) to search's
// document-processor graph, shared with risk by a grant, and gets each
// one's document type back from the format node, with X-Graph-Steps
// naming the three steps' endpoints and versions. Risk cannot call the
// steps themselves: only the graph is shared. Search's admin, signed in
// through the development identity provider, sees the graph's diagram
// on its portal page, each step linking to its endpoint.
func TestDemoDocumentProcessor(t *testing.T) {
	t.Parallel()
	oneDevAtATime(t)
	dir, err := os.MkdirTemp("", "mp-dev-docproc-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The demo's six CPU replicas need the default nodes' cores.
	d, stop := startDevWith(t, filepath.Join(dir, ".modelplane"), func(c *DevConfig) { c.DemoTraffic, c.CPUNodeCores = 0, defaultCPUNodeCores() })
	defer stop()
	env := readEnvFile(d.EnvFile)

	p, err := docproc.Build(docproc.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	// The first two held-out sentences of each class.
	var sentences []docproc.Sentence
	per := map[int]int{}
	for _, s := range p.HeldOut {
		if per[s.Class] < 2 {
			per[s.Class]++
			sentences = append(sentences, s)
		}
	}
	var instances []map[string]string
	for _, s := range sentences {
		instances = append(instances, map[string]string{"text": s.Text})
	}
	body, _ := json.Marshal(map[string]any{"instances": instances})
	call := func(endpoint, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, env["MP_GATEWAY"]+"/v1/endpoints/"+endpoint+"/predict", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Graph-Steps", "true")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The steps' replicas start on the CPU nodes; the grant's entry
	// reaches the gateway through the outbox and NATS.
	var status int
	var answer string
	wait.Eventually(t, 3*time.Minute, func() bool {
		status, answer = call(DemoGraphEndpoint, env["MP_RISK_KEY"])
		return status == http.StatusOK
	}, "risk's key never got a 200 from document-processor: %v", wait.Show(func() any { return fmt.Sprint(status, " ", answer) }))

	var got struct {
		Predictions []struct {
			Label string  `json:"label"`
			Score float64 `json:"score"`
		} `json:"predictions"`
		Graph struct {
			Version string `json:"version"`
			Steps   []struct {
				Node, Endpoint, Version string
				Status                  int
			} `json:"steps"`
		} `json:"graph"`
	}
	if err := json.Unmarshal([]byte(answer), &got); err != nil || len(got.Predictions) != len(sentences) {
		t.Fatalf("document-processor answered %s (%v); want %d predictions", answer, err, len(sentences))
	}
	for i, s := range sentences {
		if want := docproc.Classes[s.Class]; got.Predictions[i].Label != want || got.Predictions[i].Score <= 0.25 {
			t.Errorf("%q: %s %.3f; want %s, above chance", s.Text, got.Predictions[i].Label, got.Predictions[i].Score, want)
		}
	}
	wantSteps := []struct{ node, endpoint, version string }{
		{"tokenizer", "bert-tokenizer", p.Tokenizer.Name},
		{"embedder", "bert-embedder", p.Embedder.Name},
		{"classifier", "document-classifier", p.Classifier.Name},
	}
	if got.Graph.Version != "v1" || len(got.Graph.Steps) != len(wantSteps) {
		t.Fatalf("graph %+v; want v1 with %d steps", got.Graph, len(wantSteps))
	}
	for i, w := range wantSteps {
		if s := got.Graph.Steps[i]; s.Node != w.node || s.Endpoint != w.endpoint || s.Version != w.version || s.Status != http.StatusOK {
			t.Errorf("step %d = %+v; want %s calling %s %s, 200", i, s, w.node, w.endpoint, w.version)
		}
	}
	// Only the graph is shared: risk calling a step is refused like an
	// endpoint that does not exist.
	if st, b := call("bert-tokenizer", env["MP_RISK_KEY"]); st != http.StatusNotFound {
		t.Errorf("risk calling bert-tokenizer: %d %s; want 404", st, b)
	}

	// The portal page, as search's admin opens it after signing in.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(d.BaseURL+"/login", url.Values{"login_hint": {"search-admin@example.com"}, "return_to": {"/endpoints/" + DemoGraphEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in and the graph's page: %d %v", resp.StatusCode, err)
	}
	v1 := doc.Find(`#graph .graph-version[data-version="v1"]`)
	if v1.Length() != 1 {
		t.Fatalf("the graph's page (at %s) has no v1 diagram", resp.Request.URL)
	}
	if got := v1.Find(`[data-node="pipeline"] > .graph-children.graph-row > .graph-node`).Length(); got != 4 {
		t.Errorf("the pipeline shows %d steps in a row; want 4", got)
	}
	for _, w := range wantSteps {
		if href := v1.Find(`[data-node="`+w.node+`"] a`).AttrOr("href", ""); href != "/endpoints/"+w.endpoint {
			t.Errorf("node %s links to %q; want /endpoints/%s", w.node, href, w.endpoint)
		}
	}
	if v1.Find(`[data-node="formatter"]`).Length() != 1 {
		t.Errorf("the diagram lacks the formatter")
	}
}
