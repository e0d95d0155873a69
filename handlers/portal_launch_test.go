package handlers

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"modelplane/busapi"
	"modelplane/endpoint"
)

// TestReplicaLaunchShownInAPIAndPortal: what a node reports it runs for a
// replica (its command line and Triton's generated config.pbtxt) is listed
// by GET /endpoints/{endpoint}/replicas to the endpoint's team, refused
// to another team like the endpoint itself, and readable on the endpoint
// page, one <details> per replica with the command and each file in a
// <pre>.
func TestReplicaLaunchShownInAPIAndPortal(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	rep := e.replicas(t, "risk-endpoint")
	if len(rep) != 1 {
		t.Fatalf("risk-endpoint has %d replicas, want 1", len(rep))
	}
	name := rep[0].Name

	// Before the node reports a launch there is none to show.
	u := portalSignIn(t, e, "risk-engineer@example.com")
	if doc := u.page("/endpoints/risk-endpoint"); doc.Find("#launch details").Length() != 0 || doc.Find("#launch-none").Length() != 1 {
		t.Errorf("launch section before any launch: %q, want the note that none was reported", portalText(doc.Find("#launch")))
	}

	cfg := "name: \"risk-model\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n\ndynamic_batching {\n  preferred_batch_size: [ 4, 8 ]\n}\n"
	launch := &busapi.Launch{
		Argv: []string{"tritonserver", "--model-repository=/var/lib/mp/" + name + ".d/repository", "--http-address=127.0.0.1",
			"--http-port=40123", "--allow-grpc=false", "--allow-metrics=true", "--strict-readiness=true", `--note={"a": 1}`},
		Env:   []string{"CUDA_VISIBLE_DEVICES=MIG-abc", "MP_REPLICA_TOKEN=" + busapi.LaunchSecret},
		Dir:   "/var/lib/mp/" + name + ".d/repository",
		Files: []busapi.LaunchFile{{Path: "risk-model/1", Link: "/cache/risk-model/v1"}, {Path: "risk-model/config.pbtxt", Content: cfg}},
	}
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: name, State: busapi.StateReady, Addr: "10.0.0.7:9001", Launch: launch})

	// The API, to the endpoint's team.
	var list struct {
		Items []endpoint.Replica `json:"items"`
	}
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-endpoint/replicas", &list)
	if len(list.Items) != 1 || list.Items[0].Name != name || !reflect.DeepEqual(list.Items[0].Launch, launch) {
		t.Errorf("GET /endpoints/risk-endpoint/replicas = %+v, want %s with its launch %+v", list.Items, name, launch)
	}
	got := e.call(t, e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-endpoint/replicas", nil)
	problem(t, "GET /endpoints/risk-endpoint/replicas as another team", got, http.StatusNotFound)
	// The endpoint itself stays small: its replicas carry no launch.
	var body map[string]json.RawMessage
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-endpoint", &body)
	if strings.Contains(string(body["replicas"]), "launch") {
		t.Errorf("GET /endpoints/risk-endpoint replicas carry the launch: %s", body["replicas"])
	}

	// The page.
	doc := u.page("/endpoints/risk-endpoint")
	portalCheckMarkup(t, "/endpoints/risk-endpoint", doc)
	d := doc.Find(`#launch details[data-replica="` + name + `"]`)
	if d.Length() != 1 {
		t.Fatalf("launch section = %q, want a <details> for %s", portalText(doc.Find("#launch")), name)
	}
	if _, polled := doc.Find("#launch").Attr("hx-trigger"); polled {
		t.Error("the launch section polls, which would close what an operator opened")
	}
	wantCmd := "tritonserver --model-repository=/var/lib/mp/" + name + ".d/repository --http-address=127.0.0.1 --http-port=40123" +
		` --allow-grpc=false --allow-metrics=true --strict-readiness=true '--note={"a": 1}'`
	if got := d.Find("pre.launch-command").Text(); got != wantCmd {
		t.Errorf("command = %q, want %q", got, wantCmd)
	}
	if got := d.Find("pre.launch-env").Text(); got != "CUDA_VISIBLE_DEVICES=MIG-abc\nMP_REPLICA_TOKEN=<secret>\n" {
		t.Errorf("environment = %q", got)
	}
	if got := d.Find(`.launch-file[data-path="risk-model/config.pbtxt"] pre`).Text(); got != cfg {
		t.Errorf("config.pbtxt shown = %q, want %q", got, cfg)
	}
	if got := portalText(d.Find(`.launch-file[data-path="risk-model/1"] .launch-link`)); got != "/cache/risk-model/v1" {
		t.Errorf("version 1 link shown = %q, want /cache/risk-model/v1", got)
	}
	if d.Find(".launch-truncated").Length() != 0 {
		t.Error("a launch within its bounds is shown as truncated")
	}

	// A cut launch says so.
	big := *launch
	big.Files = []busapi.LaunchFile{{Path: "risk-model/config.pbtxt", Content: strings.Repeat("x", busapi.LaunchMaxFileBytes+1)}}
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: name, State: busapi.StateReady, Addr: "10.0.0.7:9001", Launch: &big})
	d = u.page("/endpoints/risk-endpoint").Find(`#launch details[data-replica="` + name + `"]`)
	if d.Find(`.launch-file .launch-truncated`).Length() != 1 || d.Find(`[data-launch-truncated]`).Length() != 1 {
		t.Errorf("a cut launch is not marked truncated: %q", portalText(d))
	}
}
