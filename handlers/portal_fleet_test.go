package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/fleet"
)

// testGPUs is an inventory of n A100s, each split into the MIG profiles
// given, or whole when there are none; every GPU reports util and memory.
func testGPUs(n int, util float64, memUsedMB int, mig ...string) []busapi.GPU {
	out := make([]busapi.GPU, n)
	for i := range out {
		g := busapi.GPU{Index: i, Type: "A100-80GB", MemoryMB: 81920, MIG: len(mig) > 0, UtilPct: util, MemoryUsedMB: memUsedMB}
		if len(mig) == 0 {
			g.Slices = []busapi.Slice{{Index: 0, Profile: busapi.ProfileFull}}
		}
		for j, p := range mig {
			g.Slices = append(g.Slices, busapi.Slice{Index: j, Profile: p})
		}
		out[i] = g
	}
	return out
}

// testFleet are the nodes seedFleet registers, by name.
var testFleet = map[string][]busapi.GPU{
	// Two A100s in seven 1g.10gb slices each: the seeded endpoints' replicas land here.
	"gpu-mig-01": testGPUs(2, 40, 12800, "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb", "mig-1g.10gb"),
	// One whole A100.
	"gpu-full-01": testGPUs(1, 0, 0),
	// Silent for an hour: lost.
	"gpu-old-01": testGPUs(1, 0, 0),
}

// seedFleet registers the nodes of testFleet as their agents would and runs
// a placement pass, which marks gpu-old-01 lost and places the seeded
// endpoints (risk-endpoint and search-endpoint, one mig-1g.10gb replica
// each).
func (e *testEnv) seedFleet(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	clock := quartz.NewMock(t)
	clock.Set(time.Now().Add(-time.Hour))
	hourAgo := fleet.New(e.pool, fleet.Options{Clock: clock, Log: slog.New(slog.DiscardHandler)})
	if _, err := hourAgo.Observe(ctx, busapi.NodeStatus{Node: "gpu-old-01", BootID: "b1", LeaseSeconds: 15, GPUs: testFleet["gpu-old-01"]}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gpu-mig-01", "gpu-full-01"} {
		e.heartbeat(t, n)
	}
	e.reconcile(t)
}

// heartbeat sends a node's heartbeat with the same inventory, reporting the
// replicas given.
func (e *testEnv) heartbeat(t testing.TB, node string, reps ...busapi.ReplicaStatus) {
	t.Helper()
	if _, err := e.srv.Fleet.Observe(context.Background(), busapi.NodeStatus{Node: node, BootID: "b1", LeaseSeconds: 15,
		GPUs: testFleet[node], Replicas: reps}); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) reconcile(t testing.TB) {
	t.Helper()
	if _, err := e.srv.Fleet.Reconcile(context.Background(), time.Time{}); err != nil {
		t.Fatal(err)
	}
}

// replicas returns an endpoint's replicas as a platform admin sees them.
func (e *testEnv) replicas(t testing.TB, name string) []endpoint.Replica {
	t.Helper()
	ep, err := e.srv.Endpoints.Get(context.Background(), system, name)
	if err != nil {
		t.Fatal(err)
	}
	return ep.Replicas
}

// nodeRowText is the text of each cell of a fleet table row, by class.
func nodeRowText(row *goquery.Selection) map[string]string {
	out := map[string]string{}
	row.Find("td[class]").Each(func(_ int, td *goquery.Selection) {
		for _, c := range strings.Fields(td.AttrOr("class", "")) {
			out[c] = portalText(td)
		}
	})
	return out
}

var agoText = regexp.MustCompile(`^\d+ (s|min) ago$`)

// TestPortalFleet checks the fleet page, a node page and their live
// fragments as a platform admin, and that nobody else may open them.
func TestPortalFleet(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	admin := portalSignIn(t, e, "admin@example.com")

	r := admin.get("/fleet")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET /fleet as platform admin = %d\n%s", r.StatusCode, r.Body)
	}
	doc := r.doc(t)
	portalCheckMarkup(t, "/fleet", doc)
	if doc.Find(`header nav a[href="/fleet"].active`).Length() != 1 {
		t.Errorf("/fleet: no active Fleet link in the navigation")
	}
	rows := doc.Find("#nodes tbody tr[data-node]")
	var names []string
	rows.Each(func(_ int, s *goquery.Selection) { names = append(names, s.AttrOr("data-node", "")) })
	if got := strings.Join(names, " "); got != "gpu-full-01 gpu-mig-01 gpu-old-01" {
		t.Fatalf("fleet lists nodes %q, want gpu-full-01 gpu-mig-01 gpu-old-01", got)
	}
	for node, want := range map[string]map[string]string{
		"gpu-mig-01":  {"state": "ready", "gpus": "2", "types": "A100-80GB", "mig": "yes", "slices": "2 / 14", "util": "40%"},
		"gpu-full-01": {"state": "ready", "gpus": "1", "types": "A100-80GB", "mig": "no", "slices": "0 / 1", "util": "0%"},
		"gpu-old-01":  {"state": "lost", "gpus": "1", "mig": "no", "slices": "0 / 1", "heartbeat": "60 min ago"},
	} {
		row := doc.Find(`#nodes tr[data-node="` + node + `"]`)
		got := nodeRowText(row)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("fleet row %s: %s = %q, want %q", node, k, got[k], v)
			}
		}
		if node != "gpu-old-01" && !agoText.MatchString(got["heartbeat"]) {
			t.Errorf("fleet row %s: heartbeat = %q, want like \"3 s ago\"", node, got["heartbeat"])
		}
		if href := row.Find("td a").AttrOr("href", ""); href != "/fleet/"+node {
			t.Errorf("fleet row %s links to %q", node, href)
		}
		if lost := row.HasClass("lost"); lost != (node == "gpu-old-01") {
			t.Errorf("fleet row %s highlighted as lost: %v", node, lost)
		}
	}
	if g := nodeRowText(doc.Find(`#nodes tr[data-node="gpu-mig-01"]`))["generation"]; !regexp.MustCompile(`^[1-9]\d* / 0$`).MatchString(g) {
		t.Errorf("gpu-mig-01 generation = %q, want a desired generation and 0 applied", g)
	}

	// The table re-fetches itself, and the fragment is the page's table.
	sec := doc.Find("section#fleet")
	if sec.AttrOr("hx-get", "") != "/fleet?fragment=nodes" || sec.AttrOr("hx-trigger", "") != "every 5s" || sec.AttrOr("hx-swap", "") != "outerHTML" {
		t.Errorf("fleet table polls %q on %q swapping %q", sec.AttrOr("hx-get", ""), sec.AttrOr("hx-trigger", ""), sec.AttrOr("hx-swap", ""))
	}
	fr := admin.get("/fleet?fragment=nodes")
	if fr.StatusCode != http.StatusOK || bytes.Contains(fr.Body, []byte("<html")) || !bytes.HasPrefix(fr.Body, []byte(`<section id="fleet"`)) {
		t.Errorf("fleet fragment = %d, want the table section alone:\n%.300s", fr.StatusCode, fr.Body)
	}
	if got, want := fragmentRows(t, fr.doc(t)), fragmentRows(t, doc); got != want {
		t.Errorf("fleet fragment rows\n%s\nwant the page's\n%s", got, want)
	}

	// A node page: every GPU, its slices as boxes sized by profile, who uses
	// each, and the free ones.
	doc = admin.page("/fleet/gpu-mig-01")
	portalCheckMarkup(t, "/fleet/gpu-mig-01", doc)
	if n := doc.Find(".gpu[data-gpu]").Length(); n != 2 {
		t.Fatalf("node page shows %d GPUs, want 2", n)
	}
	if s := portalText(doc.Find("#node-summary")); !strings.Contains(s, "2 GPUs") || !strings.Contains(s, "GPU utilisation") || regexp.MustCompile(`\S·`).MatchString(s) {
		t.Errorf("node summary = %q, want its GPUs and their utilisation, a space before each ·", s)
	}
	gpu0 := portalText(doc.Find(`.gpu[data-gpu="0"] p`))
	for _, want := range []string{"80 GB", "MIG yes", "utilisation 40%", "memory used 12.5 GB"} {
		if !strings.Contains(gpu0, want) {
			t.Errorf("GPU 0 reads %q, want %q in it", gpu0, want)
		}
	}
	if n := doc.Find(".slice.g1").Length(); n != 14 || doc.Find(".slice").Length() != 14 {
		t.Errorf("node page shows %d g1 slices of %d, want 14 of 14", n, doc.Find(".slice").Length())
	}
	if n := doc.Find(".slice.free").Length(); n != 12 {
		t.Errorf("node page shows %d free slices, want 12", n)
	}
	for _, team := range []string{"risk", "search"} {
		rep := e.replicas(t, team+"-endpoint")
		if len(rep) != 1 || rep[0].Node != "gpu-mig-01" {
			t.Fatalf("%s-endpoint replicas = %+v, want one on gpu-mig-01", team, rep)
		}
		box := doc.Find(`.slice.used[title="` + rep[0].Name + `"]`)
		if box.Length() != 1 {
			t.Errorf("no used slice for replica %s", rep[0].Name)
			continue
		}
		if got := portalText(box.Find(".team")); got != team {
			t.Errorf("slice of %s: team %q", rep[0].Name, got)
		}
		if a := box.Find(".endpoint a"); a.AttrOr("href", "") != "/endpoints/"+team+"-endpoint" || portalText(a) != team+"-endpoint" {
			t.Errorf("slice of %s: endpoint link %q %q", rep[0].Name, a.AttrOr("href", ""), portalText(a))
		}
		if got := portalText(box.Find(".version")); got != "v1" {
			t.Errorf("slice of %s: version %q", rep[0].Name, got)
		}
		if got := portalText(box.Find(".replica-state")); got != rep[0].State || got == "" {
			t.Errorf("slice of %s: replica state %q, want %q", rep[0].Name, got, rep[0].State)
		}
	}
	// A replica's requests, or a dash where its runtime counts none
	// (llama-server reports the counter absent): not a measured 0.
	risk, search := e.replicas(t, "risk-endpoint")[0], e.replicas(t, "search-endpoint")[0]
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: risk.Name, State: busapi.StateReady, Requests: 41},
		busapi.ReplicaStatus{ID: search.Name, State: busapi.StateReady, Runtime: "llama-server", Absent: []string{busapi.MetricRequests}})
	doc = admin.page("/fleet/gpu-mig-01")
	for name, want := range map[string]string{risk.Name: "41", search.Name: "–"} {
		row := doc.Find("#node tbody tr").FilterFunction(func(_ int, s *goquery.Selection) bool { return portalText(s.Find("td").First()) == name })
		if got := portalText(row.Find("td.requests")); got != want {
			t.Errorf("replica %s: requests %q, want %q", name, got, want)
		}
	}
	if doc := admin.page("/fleet/gpu-full-01"); doc.Find(".slice.g7.free").Length() != 1 {
		t.Errorf("whole-GPU node: want one free g7 box:\n%s", portalText(doc.Find("#node")))
	}
	if sec := doc.Find("section#node"); sec.AttrOr("hx-get", "") != "/fleet/gpu-mig-01/gpus" || sec.AttrOr("hx-trigger", "") != "every 5s" {
		t.Errorf("node section polls %q on %q", sec.AttrOr("hx-get", ""), sec.AttrOr("hx-trigger", ""))
	}
	fr = admin.get("/fleet/gpu-mig-01/gpus")
	if fr.StatusCode != http.StatusOK || !bytes.HasPrefix(fr.Body, []byte(`<section id="node"`)) || fr.doc(t).Find(".slice.used").Length() != 2 {
		t.Errorf("node fragment = %d, want the node section with 2 used slices:\n%.300s", fr.StatusCode, fr.Body)
	}
	if r := admin.get("/fleet/no-such-node"); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /fleet/no-such-node = %d, want 404", r.StatusCode)
	}

	// Nobody else sees the fleet: no link, and 403 on every page and call.
	for _, who := range []string{"risk-admin@example.com", "finance@example.com"} {
		u := portalSignIn(t, e, who)
		for _, path := range []string{"/fleet", "/fleet?fragment=nodes", "/fleet/gpu-mig-01", "/fleet/gpu-mig-01/gpus", "/fleet/no-such-node"} {
			r := u.get(path)
			if r.StatusCode != http.StatusForbidden || bytes.Contains(r.Body, []byte("gpu-mig-01</")) {
				t.Errorf("%s GET %s = %d, want the 403 page without node data", who, path, r.StatusCode)
			}
		}
		if u.page("/endpoints").Find(`a[href="/fleet"]`).Length() != 0 {
			t.Errorf("%s sees a Fleet link", who)
		}
	}
	for _, key := range []string{"risk-admin", "search-viewer", "finance"} {
		for _, path := range []string{"/nodes", "/nodes/gpu-mig-01", "/nodes/no-such-node"} {
			got := e.call(t, e.Keys[key], http.MethodGet, path, nil)
			problem(t, key+" GET "+path, got, http.StatusForbidden)
		}
	}
}

// fragmentRows is the fleet table's rows without the heartbeat cells, which
// move between two requests.
func fragmentRows(t *testing.T, doc *goquery.Document) string {
	t.Helper()
	var out []string
	doc.Find("#nodes tbody tr").Each(func(_ int, s *goquery.Selection) {
		c := nodeRowText(s)
		delete(c, "heartbeat")
		b, _ := json.Marshal(c)
		out = append(out, string(b))
	})
	return strings.Join(out, "\n")
}

// TestAPINodes checks GET /nodes and /nodes/{node} as a platform admin.
func TestAPINodes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	key := e.Keys["platform-admin"]

	var list struct {
		Items []fleet.Node `json:"items"`
	}
	e.getJSON(t, key, "/nodes", &list)
	states := map[string]string{}
	for _, n := range list.Items {
		states[n.Name] = n.State
		if n.Name == "gpu-mig-01" && (n.GPUCount != 2 || !n.MIG || n.Slices != 14 || n.SlicesUsed != 2 || n.UtilPct != 40) {
			t.Errorf("GET /nodes: gpu-mig-01 = %+v", n)
		}
	}
	if len(states) != 3 || states["gpu-old-01"] != "lost" || states["gpu-mig-01"] != "ready" {
		t.Errorf("GET /nodes states = %v, want 3 nodes, gpu-old-01 lost", states)
	}

	var n fleet.Node
	e.getJSON(t, key, "/nodes/gpu-mig-01", &n)
	if len(n.GPUs) != 2 || len(n.GPUs[0].Slices)+len(n.GPUs[1].Slices) != 14 {
		t.Fatalf("GET /nodes/gpu-mig-01 = %+v, want 2 GPUs with 14 slices", n)
	}
	users := map[string]string{}
	for _, g := range n.GPUs {
		for _, s := range g.Slices {
			if s.Replica != "" {
				users[s.Team] = s.Endpoint + "/" + s.Version
			}
		}
	}
	if users["risk"] != "risk-endpoint/v1" || users["search"] != "search-endpoint/v1" || len(users) != 2 {
		t.Errorf("slices used by %v, want risk-endpoint/v1 and search-endpoint/v1", users)
	}
	got := e.call(t, key, http.MethodGet, "/nodes/no-such-node", nil)
	problem(t, "GET /nodes/no-such-node", got, http.StatusNotFound)
}

// TestEndpointReplicas checks that the endpoint page and the API show an
// endpoint's replicas, live, and why the rest could not be placed.
func TestEndpointReplicas(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	ctx := context.Background()
	// No H100 anywhere: this endpoint cannot be placed.
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "risk-h100", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	rep := e.replicas(t, "risk-endpoint")
	if len(rep) != 1 {
		t.Fatalf("risk-endpoint has %d replicas, want 1", len(rep))
	}

	// The API carries replicas and the placement error.
	var body map[string]json.RawMessage
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-endpoint", &body)
	var reps []endpoint.Replica
	if err := json.Unmarshal(body["replicas"], &reps); err != nil || len(reps) != 1 || reps[0].Node != "gpu-mig-01" ||
		reps[0].Profile != "mig-1g.10gb" || reps[0].GPUType != "A100-80GB" || len(reps[0].Slots) != 1 {
		t.Errorf("GET /endpoints/risk-endpoint replicas = %s, want one mig-1g.10gb replica on gpu-mig-01", body["replicas"])
	}
	if string(body["placement_error"]) != `""` {
		t.Errorf("GET /endpoints/risk-endpoint placement_error = %s, want \"\"", body["placement_error"])
	}
	var h100 endpoint.Endpoint
	e.getJSON(t, e.Keys["risk-viewer"], "/endpoints/risk-h100", &h100)
	if h100.PlacementError == "" || h100.Status != fleet.StatusUnplaced {
		t.Errorf("GET /endpoints/risk-h100 = status %q, placement_error %q; want unplaced with a reason", h100.Status, h100.PlacementError)
	}

	// The page: a risk engineer sees the replica, with the node as text.
	u := portalSignIn(t, e, "risk-engineer@example.com")
	doc := u.page("/endpoints/risk-endpoint")
	portalCheckMarkup(t, "/endpoints/risk-endpoint", doc)
	sec := doc.Find("section#replicas")
	if sec.AttrOr("hx-get", "") != "/endpoints/risk-endpoint/replicas" || sec.AttrOr("hx-trigger", "") != "every 2s" || sec.AttrOr("hx-swap", "") != "outerHTML" {
		t.Errorf("replicas section polls %q on %q swapping %q", sec.AttrOr("hx-get", ""), sec.AttrOr("hx-trigger", ""), sec.AttrOr("hx-swap", ""))
	}
	var cells []string
	sec.Find(`tr[data-replica="` + rep[0].Name + `"] td`).Each(func(_ int, s *goquery.Selection) { cells = append(cells, portalText(s)) })
	want := []string{"v1", rep[0].Name, "gpu-mig-01", "A100-80GB", "mig-1g.10gb", rep[0].Slots[0], "placed", "", ""}
	if strings.Join(cells, "|") != strings.Join(want, "|") {
		t.Errorf("replica row = %q, want %q", cells, want)
	}
	if sec.Find(`a[href^="/fleet/"]`).Length() != 0 {
		t.Errorf("a team engineer gets links to the fleet pages, which refuse them")
	}
	if sec.Find("#placement-error").Length() != 0 {
		t.Errorf("placed endpoint shows a placement error: %s", portalText(sec.Find("#placement-error")))
	}
	fr := u.get("/endpoints/risk-endpoint/replicas")
	if frag, _ := goquery.OuterHtml(sec); fr.StatusCode != http.StatusOK || string(fr.Body) != frag {
		t.Errorf("replicas fragment = %d\n%s\nwant the page's section\n%s", fr.StatusCode, fr.Body, frag)
	}

	// The agent reports the replica ready: the next fetch of the fragment shows it.
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: rep[0].Name, State: busapi.StateReady, Addr: "10.0.0.7:9001"})
	e.reconcile(t)
	d := u.get("/endpoints/risk-endpoint/replicas").doc(t)
	cells = nil
	d.Find(`tr[data-replica="` + rep[0].Name + `"] td`).Each(func(_ int, s *goquery.Selection) { cells = append(cells, portalText(s)) })
	if len(cells) != 9 || cells[6] != busapi.StateReady || cells[7] != "10.0.0.7:9001" {
		t.Errorf("replica after the agent reported it ready = %q, want state ready at 10.0.0.7:9001", cells)
	}
	if got := portalText(d.Find("#replicas-status")); got != fleet.StatusReady {
		t.Errorf("endpoint status in the fragment = %q, want ready", got)
	}

	// A platform admin gets the node as a link.
	admin := portalSignIn(t, e, "admin@example.com")
	if a := admin.page("/endpoints/risk-endpoint").Find(`#replicas tr[data-replica] a[href^="/fleet/"]`); a.AttrOr("href", "") != "/fleet/gpu-mig-01" {
		t.Errorf("platform admin's node link = %q, want /fleet/gpu-mig-01", a.AttrOr("href", ""))
	}

	// The placement error, shown prominently, with the status.
	doc = u.page("/endpoints/risk-h100")
	msg := portalText(doc.Find("#replicas #placement-error"))
	if !strings.HasPrefix(msg, "Cannot place: v1: ") || !strings.Contains(msg, h100.PlacementError) {
		t.Errorf("placement error shown = %q, want \"Cannot place: %s\"", msg, h100.PlacementError)
	}
	if got := portalText(doc.Find("#replicas-status")); got != fleet.StatusUnplaced {
		t.Errorf("status shown = %q, want unplaced", got)
	}
	if doc.Find("#replicas tr[data-replica]").Length() != 0 {
		t.Errorf("unplaced endpoint lists replicas")
	}

	// Another team's endpoint: the fragment answers like one that does not exist.
	s := portalSignIn(t, e, "search-admin@example.com")
	got, none := s.get("/endpoints/risk-endpoint/replicas"), s.get("/endpoints/no-such-endpoint/replicas")
	if got.StatusCode != http.StatusNotFound || !bytes.Equal(got.Body, none.Body) || bytes.Contains(got.Body, []byte(rep[0].Name)) {
		t.Errorf("search admin GET risk replicas = %d; want the same 404 as for no endpoint", got.StatusCode)
	}
}
