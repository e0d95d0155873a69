package handlers

import (
	"net/http"
	"strings"
	"testing"
)

// TestPortalReplicaLogPage: each replica of the endpoint page links to its
// log page, which says why it shows nothing when the control plane cannot
// reach nodes (no NATS here; the dev-stack test reads a real node's log
// through the same reader), and another team's replica is not found.
func TestPortalReplicaLogPage(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	rep := e.riskReplica(t)
	viewer := e.signIn(t, "risk-viewer@example.com")
	page := e.portal(t, viewer, http.MethodGet, "/endpoints/risk-endpoint", nil)
	link := `href="/endpoints/risk-endpoint/replicas/` + rep + `/log"`
	if !strings.Contains(page.String(), link) {
		t.Errorf("endpoint page lacks the link %s", link)
	}
	log := e.portal(t, viewer, http.MethodGet, "/endpoints/risk-endpoint/replicas/"+rep+"/log", nil)
	if log.status != http.StatusOK || !strings.Contains(log.String(), `id="replica-log-problem"`) || !strings.Contains(log.String(), "no NATS connection") {
		t.Errorf("log page = %d:\n%.2000s; want the page saying logs are unavailable", log.status, log)
	}
	frag := e.portal(t, viewer, http.MethodGet, "/endpoints/risk-endpoint/replicas/"+rep+"/log?fragment=1", nil)
	if frag.status != http.StatusOK || strings.Contains(frag.String(), "<html") || !strings.Contains(frag.String(), `id="replica-log"`) {
		t.Errorf("fragment = %d:\n%.1000s; want the log section alone", frag.status, frag)
	}
	other := e.portal(t, e.signIn(t, "search-admin@example.com"), http.MethodGet, "/endpoints/risk-endpoint/replicas/"+rep+"/log", nil)
	if other.status != http.StatusNotFound {
		t.Errorf("search admin reads risk's replica log page: %d", other.status)
	}
}
