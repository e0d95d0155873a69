package handlers

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/registry"
)

// TestPortalFleetShowsCPUNodes: a CPU node is listed on the fleet page and
// its own page with the cores and memory its replicas hold.
func TestPortalFleetShowsCPUNodes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	if _, err := e.srv.Fleet.Observe(ctx, busapi.NodeStatus{Node: "cpu-01", BootID: "b1", LeaseSeconds: 15, CPUCores: 16, MemoryMB: 65536}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"model.safetensors": safetensorsFile("cpu-portal")}
	if _, err := e.srv.Registry.RegisterVersion(ctx, system, "risk-model", registry.VersionSpec{Name: "c1", Runtime: "onnxruntime",
		Resources: registry.Resources{CPUCores: 2, MemoryMB: 3072}}, manifestOf(files), filesOf(files)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "risk-cpu", Model: "risk-model", Version: "c1",
		Settings: endpoint.Settings{MinReplicas: 2, MaxReplicas: 2, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	admin := portalSignIn(t, e, "admin@example.com")
	r := admin.get("/fleet")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet = %d\n%s", r.StatusCode, r.Body)
	}
	doc := r.doc(t)
	portalCheckMarkup(t, "/fleet", doc)
	got := nodeRowText(doc.Find(`#nodes tr[data-node="cpu-01"]`))
	for k, v := range map[string]string{"state": "ready", "gpus": "0", "cpu": "4 / 16 cores · 6 GB / 64 GB"} {
		if got[k] != v {
			t.Errorf("fleet row cpu-01: %s = %q, want %q", k, got[k], v)
		}
	}
	page := admin.get("/fleet/cpu-01")
	if page.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet/cpu-01 = %d\n%s", page.StatusCode, page.Body)
	}
	if s := portalText(page.doc(t).Find("#node-summary")); !strings.Contains(s, "CPU 4 / 16 cores · 6 GB / 64 GB") ||
		strings.Contains(s, "GPUs") || strings.Contains(s, "MIG") || strings.Contains(s, "utilisation") || regexp.MustCompile(`\S·`).MatchString(s) {
		t.Errorf("node summary = %q, want the CPU cores and memory in use, no GPU figures, a space before each ·", s)
	}
}
