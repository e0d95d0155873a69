package handlers

import (
	"net/http"
	"testing"

	"modelplane/busapi"
	"modelplane/fleet"
)

// TestNodeNamedLikeARouteWord: node names may be any word the agent picks,
// including the fixed words of the routes beside /nodes/{node}, and
// GET /nodes/{node} still answers that node to a platform admin and 401
// without a credential. Join tokens lived at /nodes/join-tokens, which
// answered the token list to GET /nodes/join-tokens whatever node bore that
// name (Redocly's no-ambiguous-paths found it), and the agents' routes were
// let by without a credential by path alone, so GET /nodes/enroll reached
// node-get with no caller: 500.
func TestNodeNamedLikeARouteWord(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, name := range []string{"join-tokens", "enroll", "rotate"} {
		if _, err := e.srv.Fleet.Observe(t.Context(), busapi.NodeStatus{Node: name, BootID: "b1", LeaseSeconds: 15,
			GPUs: testGPUs(1, 0, 0)}); err != nil {
			t.Fatal(err)
		}
		problem(t, "GET /nodes/"+name+" without a credential", e.call(t, "", http.MethodGet, "/nodes/"+name, nil), http.StatusUnauthorized)
		r := e.call(t, e.Keys["platform-admin"], http.MethodGet, "/nodes/"+name, nil)
		if r.status != http.StatusOK {
			t.Errorf("GET /nodes/%s = %d %s; want 200", name, r.status, r)
			continue
		}
		var n fleet.Node
		e.getJSON(t, e.Keys["platform-admin"], "/nodes/"+name, &n)
		if n.Name != name {
			t.Errorf("GET /nodes/%s answered node %q; want the node %s", name, n.Name, name)
		}
	}
}
