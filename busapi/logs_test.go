package busapi_test

import (
	"strings"
	"testing"

	"modelplane/busapi"
)

// TestCrashedContainerReadsContainerReason holds the cluster driver's
// wording and the portal's reading of it to one another: every container
// whose log may be asked for reads back from a crash loop's reason, init
// or not, and no other reason names a crash.
func TestCrashedContainerReadsContainerReason(t *testing.T) {
	t.Parallel()
	for _, name := range busapi.LogContainers {
		for _, initContainer := range []bool{false, true} {
			for _, why := range []string{"CrashLoopBackOff", "CrashLoopBackOff (last exit 1, Error: model.onnx: sha256 mismatch): back-off 40s"} {
				got, ok := busapi.CrashedContainer(busapi.ContainerReason(initContainer, name, why))
				if !ok || got != name {
					t.Errorf("CrashedContainer(ContainerReason(%v, %q, %q)) = %q, %v; want %q", initContainer, name, why, got, ok, name)
				}
			}
		}
	}
	for _, reason := range []string{
		"",
		busapi.ContainerReason(false, busapi.LogContainerRuntime, "OOMKilled (exit 137)"),
		busapi.ContainerReason(true, busapi.LogContainerFetch, "ImagePullBackOff"),
		busapi.ContainerReason(false, "sidecar", "CrashLoopBackOff"), // not a container whose log is served
		"runtime exited: CrashLoopBackOff",                           // not a container's reason
		"Unschedulable: 0/3 nodes are available",
		strings.TrimSuffix(busapi.ContainerReason(false, busapi.LogContainerRuntime, "CrashLoopBackOff"), ": CrashLoopBackOff"),
	} {
		if got, ok := busapi.CrashedContainer(reason); ok {
			t.Errorf("CrashedContainer(%q) = %q; want no crash", reason, got)
		}
	}
}
