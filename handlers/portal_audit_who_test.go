package handlers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// TestPortalAuditNamesThePerson: a change made with an API key is shown in
// the audit log under the person who created the key, with the key's
// prefix as the way they acted, not under the key's prefix alone (a change
// in a session is shown under the person as before); so is a rollout
// started with the key, in the rollouts list.
func TestPortalAuditNamesThePerson(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	sam := portalSignIn(t, e, "search-admin@example.com")
	r := sam.post("/team/keys", sam.form("team", "search", "name", "ci", "key_role", "engineer"))
	key := strings.TrimSpace(r.doc(t).Find("#new-key").Text())
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(key, "mpk_") {
		t.Fatalf("create key = %d, key %q\n%s", r.StatusCode, key, r.Body)
	}
	if got := e.call(t, key, http.MethodPost, "/models", jsonPayload(map[string]any{"team": "search", "name": "keyed-model", "task": "classification"})); got.status != http.StatusCreated {
		t.Fatalf("create model with the key = %d %s", got.status, got)
	}
	admin := portalSignIn(t, e, "search-admin@example.com")
	doc := admin.page("/audit?action=model.create&object_type=model")
	var who []string
	doc.Find("#audit tbody tr").Each(func(_ int, tr *goquery.Selection) {
		if strings.Contains(tr.Find("td").Eq(4).Text(), "keyed-model") {
			who = append(who, strings.Join(strings.Fields(tr.Find("td").Eq(2).Text()), " "))
		}
	})
	prefix := key[:len("mpk_")+12]
	if len(who) != 1 || who[0] != "search-admin@example.com via "+prefix+" (api-key)" {
		t.Errorf("who created keyed-model: %q, want search-admin@example.com via %s (api-key)", who, prefix)
	}

	// A rollout started with the key names the person too, in the
	// rollouts list and on its page.
	if got := e.call(t, key, http.MethodPost, "/endpoints/search-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2"})); got.status != http.StatusCreated {
		t.Fatalf("start a rollout with the key = %d %s", got.status, got)
	}
	list := admin.page("/rollouts")
	if got := strings.Join(strings.Fields(list.Find("#rollouts-list tbody tr").First().Find("td").Eq(5).Text()), " "); got != "search-admin@example.com via "+prefix {
		t.Errorf("rollouts list: started by %q, want search-admin@example.com via %s", got, prefix)
	}
}
