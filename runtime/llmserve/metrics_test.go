package llmserve

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestRequestsFinishedAreCounted: vllm:request_success_total, the
// requests counter the agent reads in vLLM's names, has a series for each
// finish reason at 0 before any request (an idle replica reports 0
// requests, not none) and counts each generation once as it ends; each
// request's wait for its first step lands in
// vllm:request_queue_time_seconds.
func TestRequestsFinishedAreCounted(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "")
	var queued uint64 // vllm:request_queue_time_seconds' count
	finished := func() map[string]float64 {
		t.Helper()
		resp, err := http.Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if q := fams["vllm:request_queue_time_seconds"]; q == nil || len(q.GetMetric()) != 1 {
			t.Fatal("/metrics lacks vllm:request_queue_time_seconds")
		} else {
			queued = q.GetMetric()[0].GetHistogram().GetSampleCount()
		}
		out := map[string]float64{}
		f := fams["vllm:request_success_total"]
		if f == nil {
			t.Fatal("/metrics lacks vllm:request_success_total")
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "finished_reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	if got := finished(); len(got) != 4 || got["stop"] != 0 || got["length"] != 0 || got["abort"] != 0 || got["error"] != 0 {
		t.Fatalf("idle runtime: %v; want stop, length, abort and error at 0", got)
	}
	for range 3 {
		resp := post(t, ts, "/v1/completions", `{"prompt":"the","max_tokens":2,"ignore_eos":true}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("completion = %d", resp.StatusCode)
		}
	}
	if got := finished(); got["length"] != 3 || got["stop"]+got["abort"]+got["error"] != 0 || queued != 3 {
		t.Errorf("after three completions cut at max_tokens: %v, %d queue times; want length 3 and 3 queue times", got, queued)
	}
}

// TestIgnoreEOSGeneratesToMaxTokens: a seeded completion that ends at the
// model's end of sequence (finish "stop") before max_tokens goes on to
// max_tokens with vLLM's ignore_eos, finishing "length".
func TestIgnoreEOSGeneratesToMaxTokens(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "")
	complete := func(seed int, ignore bool) chatAnswer {
		t.Helper()
		body := fmt.Sprintf(`{"prompt":"the","max_tokens":64,"temperature":1,"seed":%d,"ignore_eos":%t}`, seed, ignore)
		var a chatAnswer
		decodeJSON(t, post(t, ts, "/v1/completions", body), &a)
		if len(a.Choices) != 1 || a.Usage == nil {
			t.Fatalf("answer %+v", a)
		}
		return a
	}
	for seed := 1; seed <= 100; seed++ {
		a := complete(seed, false)
		if a.Choices[0].FinishReason != "stop" {
			continue
		}
		b := complete(seed, true)
		if b.Choices[0].FinishReason != "length" || b.Usage.CompletionTokens != 64 || !strings.HasPrefix(b.Choices[0].Text, a.Choices[0].Text) {
			t.Fatalf("seed %d: %q (%d tokens) ended at EOS; with ignore_eos %q, finish %q, %d tokens; want it continued to 64, finish length",
				seed, a.Choices[0].Text, a.Usage.CompletionTokens, b.Choices[0].Text, b.Choices[0].FinishReason, b.Usage.CompletionTokens)
		}
		return
	}
	t.Fatal("no seed of 100 ended at the end of sequence within 64 tokens")
}
