package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/outbox"
)

// TestPortalWebhooks: a team admin adds a webhook on the team's webhooks
// page and sees its secret once, on a page never cached, and never again;
// a refused URL and a form without events are 422 with the field named; the
// delivery log shows each delivery's state, attempts and the receiver's
// last status code, and a dead one can be sent again from its first try;
// the team's viewer reads the page and the log without a form or a button;
// the admin deletes the webhook.
func TestPortalWebhooks(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := portalSignIn(t, e, "risk-admin@example.com")

	r := admin.post("/team/webhooks", admin.form("team", "risk", "url", "https://hooks.example.com/portal", "event_types", "rollout.state", "event_types", "budget.alert"))
	doc := r.doc(t)
	secret := strings.TrimSpace(doc.Find("#new-secret").Text())
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(secret, "whsec_") || !strings.Contains(r.Header.Get("Cache-Control"), "no-store") {
		t.Fatalf("add webhook = %d, secret %q, Cache-Control %q; want 200 with a whsec_ secret, no-store\n%s", r.StatusCode, secret, r.Header.Get("Cache-Control"), r.Body)
	}
	row := doc.Find(`#webhooks tbody tr`).FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(s.Text(), "https://hooks.example.com/portal")
	})
	id, _ := row.Attr("data-webhook")
	if row.Length() != 1 || !strings.Contains(row.Text(), "rollout.state, budget.alert") || !strings.Contains(row.Text(), "risk-admin@example.com") {
		t.Fatalf("webhooks table row = %q; want the URL, its events and who added it", row.Text())
	}
	list := admin.get("/team/webhooks")
	if list.StatusCode != http.StatusOK || strings.Contains(string(list.Body), secret) || list.doc(t).Find("#new-secret").Length() != 0 {
		t.Errorf("webhooks page again = %d; want the secret gone", list.StatusCode)
	}

	for _, c := range []struct {
		name, field string
		form        []string
	}{
		{"metadata address", "url", []string{"url", "https://169.254.169.254/latest", "event_types", "*"}},
		{"no events", "event_types", []string{"url", "https://hooks.example.com/none"}},
		{"unknown event", "event_types", []string{"url", "https://hooks.example.com/odd", "event_types", "rollout.exploded"}},
	} {
		r := admin.post("/team/webhooks", admin.form(append([]string{"team", "risk"}, c.form...)...))
		msg := strings.TrimSpace(r.doc(t).Find(fmt.Sprintf(`[data-field=%q]`, c.field)).Text())
		if r.StatusCode != http.StatusUnprocessableEntity || msg == "" || r.doc(t).Find("#new-secret").Length() != 0 {
			t.Errorf("%s: add = %d, %s error %q; want 422 naming the field, no secret\n%.600s", c.name, r.StatusCode, c.field, msg, r.Body)
		}
	}

	// Two events reach the webhook; the sender (package notify, tested
	// there against real receivers) gave up on one after a 503 and
	// delivered the other.
	ctx := context.Background()
	for i, state := range []string{"80", "100"} {
		if err := db.InTx(ctx, e.pool, func(q *db.Queries) error {
			return outbox.Event(ctx, q, "risk", busapi.Event{Kind: "budget", ID: int64(i + 1), Name: "risk-endpoint", Type: "alert", State: state, At: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(ctx, `UPDATE deliveries SET state = CASE WHEN event->>'state' = '80' THEN 'dead' ELSE 'delivered' END,
		attempts = CASE WHEN event->>'state' = '80' THEN 8 ELSE 1 END,
		last_status = CASE WHEN event->>'state' = '80' THEN 503 ELSE 204 END WHERE webhook_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	logPath := "/team/webhooks/" + id
	deliveries := func(u *portalUser) map[string][]string {
		out := map[string][]string{}
		u.page(logPath).Find("#deliveries tbody tr").Each(func(_ int, tr *goquery.Selection) {
			cells := tr.Find("td")
			state := strings.TrimSpace(cells.Eq(2).Text())
			out[state] = append(out[state], strings.Join(strings.Fields(cells.Eq(1).Text()), " "), strings.TrimSpace(cells.Eq(3).Text()),
				strings.TrimSpace(cells.Eq(4).Text()), fmt.Sprint(tr.Find("form button").Length()))
		})
		return out
	}
	got := deliveries(admin)
	want := map[string][]string{"dead": {"budget.alert risk-endpoint 80", "8", "503", "1"}, "delivered": {"budget.alert risk-endpoint 100", "1", "204", "1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delivery log = %v; want %v (event, attempts, last status, redeliver buttons)", got, want)
	}
	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	if got := deliveries(viewer); len(got["dead"]) != 4 || got["dead"][3] != "0" {
		t.Errorf("viewer's delivery log = %v; want the dead delivery without a redeliver button", got)
	}
	if v := viewer.page("/team/webhooks"); v.Find("#webhook-form").Length() != 0 || v.Find("#webhooks form").Length() != 0 ||
		!strings.Contains(v.Find("#webhooks").Text(), "https://hooks.example.com/portal") {
		t.Errorf("viewer's webhooks page shows forms, or not the webhook")
	}

	action, _ := admin.page(logPath).Find("#deliveries tbody tr").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(s.Text(), "dead")
	}).Find("form").Attr("action")
	if r := admin.post(action, admin.form()); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != logPath {
		t.Fatalf("redeliver %s = %d to %q; want 303 back to the log", action, r.StatusCode, r.Header.Get("Location"))
	}
	if got := deliveries(admin); len(got["pending"]) != 4 || got["pending"][1] != "0" || got["pending"][3] != "0" || len(got["dead"]) != 0 {
		t.Errorf("after redeliver the log = %v; want the dead delivery pending from its first try", got)
	}

	if r := admin.post(logPath+"/delete", admin.form()); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete = %d; want 303", r.StatusCode)
	}
	if r := admin.get(logPath); r.StatusCode != http.StatusNotFound {
		t.Errorf("log of the deleted webhook = %d; want 404", r.StatusCode)
	}
}
