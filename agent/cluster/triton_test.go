package cluster_test

import (
	"slices"
	"testing"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/cluster"
	"modelplane/busapi"
	"modelplane/internal/kubetest"
)

// TestTritonPodLaysOutItsRepositoryInTheVolume: a Triton version's pod
// runs Triton's image on the repository its init container lays out in
// the pod's volume, with the process driver's arguments and Triton's V2
// endpoints as probes: the model's readiness, the server's liveness.
func TestTritonPodLaysOutItsRepositoryInTheVolume(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	d, _ := pool(t, c, cluster.KindGPU, gpuNode())
	if !slices.Contains(d.Runtimes(), catalog.Triton) {
		t.Errorf("runtimes = %v, want %s offered", d.Runtimes(), catalog.Triton)
	}
	spec := migSpec("fraud-v1-r1", 0)
	spec.Runtime = "onnxruntime" // on a GPU: Triton
	spec.Profile, spec.Slots = busapi.ProfileFull, []busapi.Slot{{GPU: 0}}
	spec.Settings = []byte(`{"batching":{"max_batch_size":8,"max_queue_delay_us":500}}`)
	if _, err := d.Start(t.Context(), spec, agent.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, c, spec, d)
	if len(pod.Spec.Containers) != 2 || len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("containers = %d, init containers = %d, want 2 (the runtime and its guard) and 1", len(pod.Spec.Containers), len(pod.Spec.InitContainers))
	}
	ctr := pod.Spec.Containers[0]
	if ctr.Image != catalog.Default()[catalog.Triton].Image {
		t.Errorf("image = %q, want %q", ctr.Image, catalog.Default()[catalog.Triton].Image)
	}
	// Behind the guard sidecar: HTTP and metrics on the pod's loopback.
	want := catalog.TritonArgs(cluster.ModelsPath+"/repository", catalog.Launch{Host: "127.0.0.1", Port: cluster.DefaultInnerPort,
		MetricsPort: cluster.TritonMetricsPort})
	if got := append(slices.Clone(ctr.Command), ctr.Args...); !slices.Equal(got, want) {
		t.Errorf("command line = %q, want %q", got, want)
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/v2/models/fraud/ready" ||
		ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet.Path != "/v2/health/live" ||
		ctr.StartupProbe == nil || ctr.StartupProbe.HTTPGet.Path != "/v2/health/live" {
		t.Errorf("probes = %+v / %+v / %+v, want Triton's V2 model readiness and server liveness", ctr.ReadinessProbe, ctr.LivenessProbe, ctr.StartupProbe)
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != cluster.ModelsPath || !ctr.VolumeMounts[0].ReadOnly {
		t.Errorf("runtime mounts = %+v, want the volume read-only at %s", ctr.VolumeMounts, cluster.ModelsPath)
	}
	init := pod.Spec.InitContainers[0]
	wantArgs := []string{"fetch", "--manifest", manifest, "--replica", spec.ID, "--dir", cluster.ModelsPath,
		"--settings", string(spec.Settings), "--triton-model", "fraud", "--gpus", "1"}
	if !slices.Equal(init.Args, wantArgs) {
		t.Errorf("init args = %q, want %q", init.Args, wantArgs)
	}
	if len(init.VolumeMounts) != 1 || init.VolumeMounts[0].MountPath != cluster.ModelsPath || init.VolumeMounts[0].ReadOnly {
		t.Errorf("init mounts = %+v, want the volume writable at %s", init.VolumeMounts, cluster.ModelsPath)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].EmptyDir == nil || pod.Spec.Volumes[0].Name != init.VolumeMounts[0].Name {
		t.Errorf("volumes = %+v, want one emptyDir the containers share", pod.Spec.Volumes)
	}
}
