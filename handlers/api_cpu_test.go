package handlers

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestCPUVersionsAndEndpointsOverTheAPI: a version that needs no GPU is
// registered with its CPU size (or the defaults) and bad CPU resources are
// 400 naming the field; an endpoint of it takes the cpu profile and the
// version's runtime when it names neither.
func TestCPUVersionsAndEndpointsOverTheAPI(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	key := e.Keys["risk-engineer"]
	files := map[string][]byte{"model.safetensors": safetensorsFile("cpu")}
	version := func(name string, resources map[string]any) *payload {
		return jsonPayload(map[string]any{
			"metadata": map[string]any{"name": name, "runtime": "onnxruntime", "format": "onnx", "artifact_uri": "s3://bucket/" + name,
				"resources": resources},
			"manifest": json.RawMessage(manifestOf(files)),
		})
	}
	for _, c := range []struct {
		name      string
		resources map[string]any
		location  string
	}{
		{"negative cores", map[string]any{"gpu_count": 0, "cpu_cores": -2, "memory_mb": 2048}, "body.metadata.resources.cpu_cores"},
		{"too many cores", map[string]any{"cpu_cores": 100000}, "body.metadata.resources.cpu_cores"},
		{"negative memory", map[string]any{"cpu_cores": 2, "memory_mb": -1}, "body.metadata.resources.memory_mb"},
		{"GPU memory without a GPU", map[string]any{"gpu_count": 0, "gpu_memory_mb": 4096}, "body.metadata.resources.gpu_memory_mb"},
		{"fractional cores", map[string]any{"cpu_cores": 0.5}, ""}, // whole cores only: the decoder refuses it
	} {
		got := e.call(t, key, "POST", "/models/risk-model/versions", version("bad-cpu", c.resources))
		doc := problem(t, c.name, got, http.StatusBadRequest)
		if c.location != "" && !doc.names(c.location) {
			t.Errorf("%s: errors at %v; want %s", c.name, doc.locations(), c.location)
		}
	}

	got := e.call(t, key, "POST", "/models/risk-model/versions", version("cpu-default", map[string]any{"gpu_count": 0}))
	var v struct {
		Resources struct {
			GPUCount int `json:"gpu_count"`
			CPUCores int `json:"cpu_cores"`
			MemoryMB int `json:"memory_mb"`
		} `json:"resources"`
	}
	if got.status != http.StatusCreated || json.Unmarshal(got.body, &v) != nil || v.Resources.CPUCores != 1 || v.Resources.MemoryMB != 1024 {
		t.Fatalf("version without CPU size = %d %s; want 201 with the defaults, 1 core and 1024 MiB", got.status, got)
	}

	got = e.call(t, key, "POST", "/endpoints", jsonPayload(map[string]any{"name": "cpu-endpoint", "model": "risk-model", "version": "cpu-default",
		"min_replicas": 1, "max_replicas": 2, "tier": "standard"}))
	var ep struct {
		Runtime         string `json:"runtime"`
		InstanceProfile string `json:"instance_profile"`
	}
	if got.status != http.StatusCreated || json.Unmarshal(got.body, &ep) != nil || ep.Runtime != "onnxruntime" || ep.InstanceProfile != "cpu" {
		t.Fatalf("endpoint without runtime and profile = %d %s; want 201 with runtime onnxruntime and profile cpu", got.status, got)
	}
	got = e.call(t, key, "POST", "/endpoints", jsonPayload(map[string]any{"name": "cpu-endpoint-2", "model": "risk-model", "version": "cpu-default",
		"runtime": "vllm", "min_replicas": 1, "max_replicas": 2, "tier": "standard"}))
	if doc := problem(t, "endpoint with another runtime", got, http.StatusBadRequest); !doc.names("body.runtime") {
		t.Errorf("endpoint with another runtime: errors at %v; want runtime", doc.locations())
	}
}
