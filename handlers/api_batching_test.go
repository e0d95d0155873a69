package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"modelplane/endpoint"
)

// TestAPIBatchingSettings: the batcher's settings are endpoint settings.
// A field left out takes its default (0 delay is kept, not read as unset),
// each bound is refused with 400 naming its field and leaves the endpoint
// as it was, and create fills the defaults.
func TestAPIBatchingSettings(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := e.Keys["risk-admin"]
	put := func(batching map[string]any) response {
		body := map[string]any{"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 2, "tier": "standard"}
		if batching != nil {
			body["batching"] = batching
		}
		return e.call(t, admin, http.MethodPut, "/endpoints/risk-endpoint", jsonPayload(body))
	}
	batchingOf := func(r response) endpoint.Batching {
		t.Helper()
		var out struct{ Batching endpoint.Batching }
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatalf("decode %s: %v", r, err)
		}
		return out.Batching
	}

	r := put(map[string]any{"max_batch_size": 8, "max_queue_delay_us": 0, "preferred_batch_sizes": []int{2, 8}})
	if r.status != http.StatusOK {
		t.Fatalf("PUT with batching = %d %s", r.status, r)
	}
	want := endpoint.Batching{MaxBatchSize: 8, MaxQueueDelayUS: 0, PreferredBatchSizes: []int32{2, 8}, QueueTimeoutMS: 1000}
	if got := batchingOf(r); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("batching = %+v, want %+v (queue timeout left out: its default)", got, want)
	}

	for _, c := range []struct {
		name     string
		batching map[string]any
		location string
	}{
		{"max batch size 0", map[string]any{"max_batch_size": 0}, "body.batching.max_batch_size"},
		{"max batch size above 1024", map[string]any{"max_batch_size": 1025}, "body.batching.max_batch_size"},
		{"negative delay", map[string]any{"max_queue_delay_us": -1}, "body.batching.max_queue_delay_us"},
		{"delay above a second", map[string]any{"max_queue_delay_us": 1_000_001}, "body.batching.max_queue_delay_us"},
		{"queue timeout 0", map[string]any{"queue_timeout_ms": 0}, "body.batching.queue_timeout_ms"},
		{"preferred above the maximum", map[string]any{"max_batch_size": 16, "preferred_batch_sizes": []int{4, 32}}, "body.batching.preferred_batch_sizes[1]"},
		{"preferred not ascending", map[string]any{"preferred_batch_sizes": []int{8, 4}}, "body.batching.preferred_batch_sizes[1]"},
		{"preferred above the default maximum", map[string]any{"preferred_batch_sizes": []int{64}}, "body.batching.preferred_batch_sizes[0]"},
		{"not a number", map[string]any{"max_batch_size": "many"}, "body.batching.max_batch_size"},
	} {
		doc := problem(t, c.name, put(c.batching), http.StatusBadRequest)
		if !doc.names(c.location) {
			t.Errorf("%s: errors at %v; want %s", c.name, doc.locations(), c.location)
		}
	}
	ep, err := e.srv.Endpoints.Get(context.Background(), system, "risk-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ep.Batching) != fmt.Sprint(want) {
		t.Errorf("after refused updates batching = %+v, want %+v kept", ep.Batching, want)
	}

	// Left out entirely: the defaults, on update and on create.
	if got := batchingOf(put(nil)); fmt.Sprint(got) != fmt.Sprint(endpoint.DefaultBatching) {
		t.Errorf("PUT without batching = %+v, want the defaults %+v", got, endpoint.DefaultBatching)
	}
	r = e.call(t, admin, http.MethodPost, "/endpoints", jsonPayload(map[string]any{"name": "batch-defaults", "model": "risk-model", "version": "v1",
		"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 2, "tier": "standard"}))
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("create without runtime or batching = %d %s", r.status, r)
	}
	if got := batchingOf(r); fmt.Sprint(got) != fmt.Sprint(endpoint.DefaultBatching) {
		t.Errorf("created with batching %+v, want the defaults", got)
	}

	// The OpenAPI document describes the batching fields and marks the
	// runtime field deprecated.
	r = e.call(t, "", http.MethodGet, "/openapi.json", nil)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Deprecated  bool   `json:"deprecated"`
					Description string `json:"description"`
					Minimum     *int   `json:"minimum"`
					Maximum     *int   `json:"maximum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("openapi: %v", err)
	}
	bs, ok := doc.Components.Schemas["BatchingSettings"]
	if mx := bs.Properties["max_batch_size"]; !ok || mx.Minimum == nil || *mx.Minimum != 1 || mx.Maximum == nil || *mx.Maximum != 1024 {
		t.Errorf("openapi BatchingSettings = %+v, want max_batch_size 1..1024", bs)
	}
	deprecated := false
	for _, s := range doc.Components.Schemas {
		if p, ok := s.Properties["runtime"]; ok && p.Deprecated && strings.Contains(p.Description, "version's runtime") {
			deprecated = true
		}
	}
	if !deprecated {
		t.Error("openapi: no schema has a deprecated runtime field saying the version's runtime decides")
	}
}

// TestPortalBatchingAndNoRuntimeChoice: the endpoint forms carry the
// batcher's settings (blank is the default, a bad one is shown on its
// field), and the create form offers no runtime: the version's decides.
func TestPortalBatchingAndNoRuntimeChoice(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")

	doc := u.page("/endpoints/new")
	if n := doc.Find(`#endpoint-form [name="runtime"]`).Length(); n != 0 {
		t.Errorf("the create form has %d runtime fields, want none", n)
	}
	for _, name := range []string{"max_batch_size", "max_queue_delay_us", "preferred_batch_sizes", "queue_timeout_ms"} {
		if doc.Find(`#endpoint-form input[name="`+name+`"]`).Length() != 1 {
			t.Errorf("the create form has no %s field", name)
		}
	}
	r := u.post("/endpoints", u.form("name", "portal-batched", "model", "risk-model", "version", "v1", "instance_profile", "mig-1g.10gb",
		"tier", "standard", "min_replicas", "1", "max_replicas", "1", "sampling_rate", "0", "retention_days", "30",
		"max_batch_size", "16", "max_queue_delay_us", "", "preferred_batch_sizes", "4, 16", "queue_timeout_ms", "200"))
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("create with batching = %d\n%s", r.StatusCode, r.Body)
	}
	ep, err := e.srv.Endpoints.Get(context.Background(), system, "portal-batched")
	if err != nil {
		t.Fatal(err)
	}
	want := endpoint.Batching{MaxBatchSize: 16, MaxQueueDelayUS: 500, PreferredBatchSizes: []int32{4, 16}, QueueTimeoutMS: 200}
	if fmt.Sprint(ep.Batching) != fmt.Sprint(want) || ep.Runtime != "onnxruntime" {
		t.Errorf("created batching %+v runtime %s, want %+v and the version's runtime", ep.Batching, ep.Runtime, want)
	}

	doc = u.page("/endpoints/portal-batched")
	if got := doc.Find(`#settings-form input[name="preferred_batch_sizes"]`).AttrOr("value", ""); got != "4, 16" {
		t.Errorf("settings form shows preferred sizes %q, want 4, 16", got)
	}
	settings := func(pairs ...string) portalResponse {
		base := []string{"instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1", "max_replicas", "1",
			"sampling_rate", "0", "retention_days", "30"}
		return u.post("/endpoints/portal-batched/settings", u.form(append(base, pairs...)...))
	}
	r = settings("max_batch_size", "8", "max_queue_delay_us", "0", "preferred_batch_sizes", "", "queue_timeout_ms", "")
	if r.StatusCode != http.StatusOK && r.StatusCode != http.StatusSeeOther {
		t.Fatalf("settings with batching = %d\n%s", r.StatusCode, r.Body)
	}
	if ep, err = e.srv.Endpoints.Get(context.Background(), system, "portal-batched"); err != nil {
		t.Fatal(err)
	}
	want = endpoint.Batching{MaxBatchSize: 8, MaxQueueDelayUS: 0, PreferredBatchSizes: []int32{}, QueueTimeoutMS: 1000}
	if fmt.Sprint(ep.Batching) != fmt.Sprint(want) {
		t.Errorf("updated batching %+v, want %+v", ep.Batching, want)
	}
	for _, c := range [][2]string{{"max_batch_size", "0"}, {"preferred_batch_sizes", "8, 4"}, {"queue_timeout_ms", "soon"}} {
		r = settings(c[0], c[1])
		if r.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("settings with %s=%q = %d, want 422", c[0], c[1], r.StatusCode)
		}
		if msg := portalText(r.doc(t).Find(`#settings-form .err[data-field="` + c[0] + `"]`)); strings.TrimSpace(msg) == "" {
			t.Errorf("settings with %s=%q: no error shown on the field\n%s", c[0], c[1], r.Body)
		}
	}
}
