package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/demo/fraud"
	"modelplane/endpoint"
	"modelplane/registry"
	"modelplane/serveapi"
	"modelplane/web"
)

// TestPortalTryItAnswersWithTheSamples: on the demo's fraud model (its
// input schema with allowed countries and categories, v23 with its sample
// inputs), Try it is prefilled with the serving version's samples, the
// prefilled body passes the model's schema at a gateway that checks it as
// the real one does (the demo's first press answered 400 "country: is not
// an allowed value" on a body of zeros), the answer is a table of labels
// and scores with the raw JSON one click away, and the curl command and
// the page's header name the route Send calls.
func TestPortalTryItAnswersWithTheSamples(t *testing.T) {
	t.Parallel()
	schema, err := registry.CompileSchema(fraud.InputSchema())
	if err != nil {
		t.Fatal(err)
	}
	// The gateway's input check: each instance against the model's
	// schema, 400 on the first that fails; a classifier's answer otherwise.
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Instances []any `json:"instances"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &req) != nil || len(req.Instances) == 0 {
			http.Error(w, `{"detail":"instances: required"}`, http.StatusBadRequest)
			return
		}
		res := serveapi.PredictResponse[serveapi.Prediction]{ModelVersion: "v23"}
		for i, in := range req.Instances {
			if err := schema.Validate(in); err != nil {
				http.Error(w, fmt.Sprintf(`{"detail":"instances/%d: %s"}`, i, registry.SchemaMessage(err)), http.StatusBadRequest)
				return
			}
			score := 0.1 + 0.2*float64(i)
			res.Predictions = append(res.Predictions, serveapi.Prediction{Label: "legit", Score: &score})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	t.Cleanup(gw.Close)
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.GatewayURL = gw.URL }})
	ctx := context.Background()
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	v23 := vs[0]
	if _, err := e.srv.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: "risk", Name: "fraud-detector", Task: registry.TaskClassification,
		InputSchema: fraud.InputSchema(), FeatureNames: fraud.FeatureNames()}); err != nil {
		t.Fatal(err)
	}
	sv := registry.Serving{Output: registry.ServingOutput{Classes: v23.Serving.Output.Classes, Threshold: v23.Serving.Output.Threshold},
		SampleInputs: v23.Serving.SampleInputs}
	for _, f := range v23.Serving.Features {
		sv.Features = append(sv.Features, registry.ServingFeature{Name: f.Name, Categories: f.Categories, Encoding: f.Encoding})
	}
	files := map[string][]byte{v23.File: v23.Data}
	if _, err := e.srv.Registry.RegisterVersion(ctx, system, "fraud-detector", registry.VersionSpec{Name: v23.Name, Runtime: v23.Runtime,
		Format: v23.Format, Resources: registry.Resources{CPUCores: 1, MemoryMB: 512}, Serving: sv}, manifestOf(files), filesOf(files)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "fraud-scoring", Model: "fraud-detector", Version: "v23",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}

	u := portalSignIn(t, e, "risk-engineer@example.com")
	doc := u.page("/endpoints/fraud-scoring")
	want, _ := json.Marshal(serveapi.PredictRequest{Instances: v23.Serving.SampleInputs})
	body := doc.Find("textarea#try-body").Text()
	var gotBody, wantBody any
	// The registry keeps samples as JSONB: the same objects, keys reordered.
	if json.Unmarshal([]byte(body), &gotBody) != nil || json.Unmarshal(want, &wantBody) != nil || !reflect.DeepEqual(gotBody, wantBody) {
		t.Errorf("prefilled body %s, want v23's sample inputs %s", body, want)
	}
	if got := doc.Find("#try-curl").Text(); !strings.Contains(got, `"$MP_GATEWAY/v1/endpoints/fraud-scoring/predict"`) || !strings.Contains(got, body) {
		t.Errorf("curl command %q, want the predict route and the prefilled body", got)
	}
	if got := doc.Find("#inference-route").Text(); got != "POST /v1/endpoints/fraud-scoring/predict" {
		t.Errorf("header names %q, want the predict route", got)
	}

	r := u.post("/endpoints/fraud-scoring/try", u.form("body", body))
	ans := r.doc(t)
	if r.StatusCode != http.StatusOK || ans.Find("#try-status").Text() != "200" {
		t.Fatalf("first press = %d, gateway status %q, want 200:\n%s", r.StatusCode, ans.Find("#try-status").Text(), ans.Find("#try-it").Text())
	}
	rows := ans.Find("#try-answers tbody tr")
	if rows.Length() != len(v23.Serving.SampleInputs) || rows.First().Find(".label").Text() != "legit" || rows.First().Find(".score").Text() != "0.100" {
		t.Errorf("answers table: %d rows, first %q; want %d rows, legit 0.100", rows.Length(), rows.First().Text(), len(v23.Serving.SampleInputs))
	}
	if raw := ans.Find("details#try-raw"); raw.Length() != 1 || raw.AttrOr("open", "closed") != "closed" ||
		!json.Valid([]byte(raw.Find("#try-response").Text())) {
		t.Errorf("raw JSON: want a closed details holding the answer, got %q", raw.Text())
	}
	if got := ans.Find("#try-curl").Text(); !strings.Contains(got, body) {
		t.Errorf("after Send, the curl command %q is not the request sent", got)
	}

	// A body of zeros, the old prefill, is refused at the gateway: the
	// raw answer is shown open, with no table.
	r = u.post("/endpoints/fraud-scoring/try", u.form("body", `{"instances":[{"amount":0,"country":"","merchant_category":""}]}`))
	ans = r.doc(t)
	if ans.Find("#try-status").Text() != "400" || ans.Find("#try-answers").Length() != 0 || ans.Find("details#try-raw[open]").Length() != 1 {
		t.Errorf("a bad body: status %q, want 400 with the raw answer open and no table", ans.Find("#try-status").Text())
	}
}

// TestReadAnswer: a 200 answer is read per instance (label and score, a
// regressor's value) or, for an LLM, as the chat it continues.
func TestReadAnswer(t *testing.T) {
	t.Parallel()
	p := web.TryItProps{Response: `{"predictions":[{"label":"fraud","score":0.97},{"value":12.5}],"model_version":"v23"}`}
	readAnswer(&p, registry.TaskClassification, `{"instances":[{},{}]}`)
	if len(p.Answers) != 2 || p.Answers[0] != (web.TryAnswer{Instance: 1, Label: "fraud", Score: "0.970"}) ||
		p.Answers[1] != (web.TryAnswer{Instance: 2, Score: "12.5"}) || p.ModelVersion != "v23" {
		t.Errorf("predict answers = %+v (%s)", p.Answers, p.ModelVersion)
	}
	c := web.TryItProps{Response: `{"choices":[{"message":{"role":"assistant","content":"Hi there."}}]}`}
	readAnswer(&c, registry.TaskLLM, `{"messages":[{"role":"user","content":"Hello!"}]}`)
	if want := []web.ChatTurn{{Role: "user", Content: "Hello!"}, {Role: "assistant", Content: "Hi there."}}; fmt.Sprint(c.Chat) != fmt.Sprint(want) {
		t.Errorf("chat = %v, want %v", c.Chat, want)
	}
	o := web.TryItProps{Response: `[1, 2]`}
	readAnswer(&o, registry.TaskClassification, `{}`)
	if o.Answers != nil || o.Chat != nil {
		t.Errorf("an answer of another shape was read: %+v", o)
	}
	if got := tryPath("chat", registry.TaskLLM); got != "/v1/endpoints/chat/chat/completions" {
		t.Errorf("LLM route = %s", got)
	}
}
