package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"modelplane/busapi"
	"modelplane/fleet"
	"modelplane/money"
	"modelplane/web"
)

// portalFleet shows every node to platform admins; others get the forbidden
// page, as fleet.Nodes refuses them. With ?fragment=nodes it renders only the
// table the page re-fetches. The fragment is a query rather than a path like
// /fleet/nodes, which would shadow the page of a node called "nodes".
func (s *Server) portalFleet(w http.ResponseWriter, r *http.Request) {
	t, err := s.fleetTable(r)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if r.URL.Query().Get("fragment") == "nodes" {
		s.render(w, r, http.StatusOK, web.FleetTable(t))
		return
	}
	l := pageFrame(r).layout(w, "Fleet", "fleet")
	s.render(w, r, http.StatusOK, web.FleetPage(web.FleetProps{Layout: l, Table: t, Enrollment: s.enrollmentProps(r, l.CSRF)}))
}

// fleetTable fills the nodes table.
func (s *Server) fleetTable(r *http.Request) (web.FleetTableProps, error) {
	ns, err := s.Fleet.Nodes(r.Context(), pageFrame(r).user)
	if err != nil {
		return web.FleetTableProps{}, err
	}
	t := web.FleetTableProps{Nodes: make([]web.NodeRow, len(ns))}
	for i, n := range ns {
		t.Nodes[i] = nodeRow(n)
	}
	if s.Meter != nil {
		day := s.Clock.Now().UTC().Truncate(24 * time.Hour)
		if m, err := s.Meter.Since(r.Context(), pageFrame(r).user, day); err == nil {
			t.Metered = fmt.Sprintf("%s GPU-seconds and %s CPU core-seconds metered today (UTC), $%s", groupedInt(m.GPUSeconds),
				groupedInt(m.CPUCoreSeconds), money.Dollars(m.CostMicroUSD))
		} else {
			// ClickHouse is for reports, never for the fleet's state: say it
			// is unavailable rather than failing the page.
			t.Metered = "metered usage unavailable"
		}
	}
	return t, nil
}

// portalNode shows one node's GPUs and who uses each slice.
func (s *Server) portalNode(w http.ResponseWriter, r *http.Request) {
	props, err := s.nodeProps(r, chi.URLParam(r, "node"))
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	props.Layout = pageFrame(r).layout(w, props.Node.Name, "fleet")
	s.render(w, r, http.StatusOK, web.NodePage(props))
}

// portalNodeGPUs is the node page's live fragment.
func (s *Server) portalNodeGPUs(w http.ResponseWriter, r *http.Request) {
	props, err := s.nodeProps(r, chi.URLParam(r, "node"))
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, web.NodeGPUs(props))
}

func (s *Server) nodeProps(r *http.Request, name string) (web.NodeProps, error) {
	n, err := s.Fleet.Node(r.Context(), pageFrame(r).user, name)
	if err != nil {
		return web.NodeProps{}, err
	}
	props := web.NodeProps{Node: nodeRow(n)}
	for _, g := range n.GPUs {
		gv := web.GPUView{Index: g.Index, Type: g.Type, Memory: gigabytes(g.MemoryMB), MIG: yesNo(g.MIG),
			Util: percent(g.UtilPct), MemUsed: gigabytes(g.MemoryUsedMB)}
		for _, sl := range g.Slices {
			gv.Slices = append(gv.Slices, web.SliceBox{Profile: sl.Profile, Size: sliceSize(sl.Profile), Memory: gigabytes(sl.MemoryMB),
				Used: sl.Replica != "", Team: sl.Team, Endpoint: sl.Endpoint, Version: sl.Version, Replica: sl.Replica, ReplicaState: sl.ReplicaState})
		}
		props.GPUs = append(props.GPUs, gv)
	}
	for _, r := range n.Replicas {
		m, c := r.Metrics, r.Metrics.ColdStart
		requests := "–" // a runtime without a request counter (llama-server)
		if m.Reports(busapi.MetricRequests) {
			requests = strconv.FormatInt(m.Requests, 10)
		}
		props.Replicas = append(props.Replicas, web.NodeReplicaRow{Name: r.Name, Team: r.Team, Endpoint: r.Endpoint, Version: r.Version,
			State: r.State, Reason: r.Reason, Failures: r.Failures, QueueDepth: m.QueueDepth, InFlight: m.InFlight,
			Batch: fmt.Sprintf("%.1f", m.BatchSize), Requests: requests,
			TokensPerSecond: dashIfZero(m.TokensPerSecond, "%.0f"), TTFT: dashIfZero(m.TTFTMS, "%.0f ms"),
			ColdStart: millis(c.TotalMS()), Download: millis(c.DownloadMS), Verify: millis(c.VerifyMS), Load: millis(c.LoadMS), Warmup: millis(c.WarmupMS)})
	}
	return props, nil
}

// cacheView shows a node's artifact cache; nil when its agent keeps none.
func cacheView(c *busapi.CacheStatus) *web.CacheView {
	if c == nil {
		return nil
	}
	used := bytesSize(c.BytesUsed) + " (no limit)"
	if c.BytesLimit > 0 {
		used = fmt.Sprintf("%s / %s (%.0f%%)", bytesSize(c.BytesUsed), bytesSize(c.BytesLimit), 100*float64(c.BytesUsed)/float64(c.BytesLimit))
	}
	return &web.CacheView{Used: used, Versions: c.Versions, Hits: c.Hits, Misses: c.Misses, Evicted: c.Evictions}
}

// bytesSize shows a size in bytes the way a person reads it.
func bytesSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// millis shows a duration in milliseconds; "–" for none or unknown.
func millis(ms int64) string {
	switch {
	case ms <= 0:
		return "–"
	case ms < 10_000:
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

// dashIfZero formats v, or "–" when the runtime reports none.
func dashIfZero(v float64, format string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func nodeRow(n fleet.Node) web.NodeRow {
	return web.NodeRow{Name: n.Name, State: n.State, Lost: n.State == "lost", GPUCount: n.GPUCount, GPUTypes: strings.Join(n.GPUTypes, ", "),
		MIG: yesNo(n.MIG), Slices: fmt.Sprintf("%d / %d", n.SlicesUsed, n.Slices), Util: percent(n.UtilPct),
		Heartbeat:  ago(time.Duration(n.HeartbeatAgeSeconds * float64(time.Second))),
		Generation: fmt.Sprintf("%d / %d", n.Generation, n.AppliedGeneration), Behind: n.AppliedGeneration < n.Generation,
		CPU: cpuUse(n), Cache: cacheView(n.Cache), Runtimes: runtimesText(n.Runtimes)}
}

// runtimesText shows the runtimes a node reports it can run.
func runtimesText(rs []string) string {
	switch {
	case rs == nil:
		return "not reported"
	case len(rs) == 0:
		return "none"
	case slices.Contains(rs, busapi.AnyRuntime):
		return "every runtime (simulated)"
	}
	return strings.Join(rs, ", ")
}

// cpuUse shows a CPU node's cores and memory in use of its inventory; ""
// for a GPU node.
func cpuUse(n fleet.Node) string {
	if n.CPUCores == 0 {
		return ""
	}
	return fmt.Sprintf("%d / %d cores · %s / %s", n.CPUCoresUsed, n.CPUCores, gigabytes(n.MemoryUsedMB), gigabytes(n.MemoryMB))
}

// sliceSize is the CSS class that sizes a slice's box by its share of the
// GPU: g1 to g7 for MIG profiles by their compute slices, g7 for a whole GPU.
func sliceSize(profile string) string {
	rest, ok := strings.CutPrefix(profile, busapi.MIGPrefix)
	if !ok {
		return "g7"
	}
	g, _, _ := strings.Cut(rest, "g.")
	if n, err := strconv.Atoi(g); err == nil && n >= 1 && n <= 7 {
		return "g" + g
	}
	return "g1"
}

// ago says how long ago, the way a person reads it: "3 s ago", "4 min ago".
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s ago"
	case d < 2*time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d d ago", int(d.Hours()/24))
}

// gigabytes shows a size in MB as GB, with one decimal when it is not whole.
func gigabytes(mb int) string {
	if mb%1024 == 0 {
		return fmt.Sprintf("%d GB", mb/1024)
	}
	return fmt.Sprintf("%.1f GB", float64(mb)/1024)
}

func percent(p float64) string { return fmt.Sprintf("%.0f%%", p) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
