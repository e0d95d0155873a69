package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"modelplane/busapi"
	"modelplane/gateway"
)

// TestGraphIsSampled sends a request to a graph endpoint whose sampling rate
// is 1 and expects its prediction sample, like an endpoint's: named for the
// graph and the graph's version, with the graph's request as features and
// the graph's output as scores and labels, so that drift and a graph
// rollout's drift gate read it.
func TestGraphIsSampled(t *testing.T) {
	t.Parallel()
	ge := newGraphEnv(t, gateway.Config{})
	def := `{"entry":"ens","nodes":[
	 {"id":"ens","type":"ensemble","steps":["x","o"],"combine":"mean","field":"score"},
	 {"id":"x","type":"call","endpoint":"xgb"},{"id":"o","type":"call","endpoint":"onnx"}]}`
	rt := graphRoute("scored", "risk", 1, graphVer("g7", 100, def))
	rt.SamplingRate, rt.FeatureNames = 1, []string{"amount", "country"}
	ge.put(t, rt)
	res := ge.predict(t, "scored", payments)
	var a struct{ Predictions []float64 }
	if res.status != http.StatusOK || json.Unmarshal(res.body, &a) != nil || len(a.Predictions) != 2 {
		t.Fatalf("graph answered %d %s", res.status, res.body)
	}

	got := sampleOf(t, ge.nc, res.header.Get("X-Request-Id"))
	if got.ID != res.header.Get("X-Request-Id") || got.Endpoint != "scored" || got.Team != "risk" || got.Version != "g7" {
		t.Fatalf("sample %+v; want request %s of scored, team risk, version g7", got, res.header.Get("X-Request-Id"))
	}
	want := []busapi.SampleInstance{
		{Num: []float64{42.5, 0}, Str: []string{"", "US"}, Score: a.Predictions[0]},
		{Num: []float64{1250, 0}, Str: []string{"", "NG"}, Score: a.Predictions[1]},
	}
	if fmt.Sprint(got.FeatureNames) != "[amount country]" || fmt.Sprintf("%+v", got.Instances) != fmt.Sprintf("%+v", want) {
		t.Fatalf("features %v instances %+v; want %+v", got.FeatureNames, got.Instances, want)
	}
	// The steps are not sampled for the graph: their endpoints' own
	// sampling rates (0 here) decide.
	for _, smp := range streamSamples(t, ge.nc) {
		if smp.Endpoint != "scored" {
			t.Errorf("step endpoint %s was sampled at rate 0", smp.Endpoint)
		}
	}
}
