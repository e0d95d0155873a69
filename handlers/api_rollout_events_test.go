package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/internal/wait"
)

// sseEvent is one server-sent event as read off the wire.
type sseEvent struct {
	id, event, data string
}

// readSSE sends the events of the stream at url, read with key, on the
// returned channel, which closes when the stream ends.
func readSSE(t *testing.T, ctx context.Context, url, key string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" || ev.data != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out, resp
}

// TestRolloutEventStream follows a rollout with a viewer's key: the events
// so far come first, a rollback made meanwhile by an engineer arrives as
// it commits (the stream is woken by the change, not by a clock: the
// handlers' clock here is never moved) with the candidate's percent back
// at 0, and an end event with the final state closes the stream. A
// reconnect with Last-Event-ID sends only what came after, and another
// team's key gets the 404 of a rollout that does not exist.
func TestRolloutEventStream(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	eng, viewer := e.Keys["risk-engineer"], e.Keys["risk-viewer"]
	got := e.call(t, eng, http.MethodPost, "/endpoints/risk-endpoint/rollouts", jsonPayload(map[string]any{"version": "v2",
		"steps": []map[string]any{{"percent": 10, "bake_seconds": 600}, {"percent": 100, "bake_seconds": 600}}}))
	if got.status != http.StatusCreated {
		t.Fatalf("start = %d %s", got.status, got)
	}
	var r struct{ ID int64 }
	if err := json.Unmarshal(got.body, &r); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/api/v1/rollouts/%d/events", e.URL, r.ID)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	evs, resp := readSSE(t, ctx, url, viewer)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s = %d %s; want an event stream", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	first := <-evs
	if first.event != "rollout" || !strings.Contains(first.data, `"decision":"start"`) {
		t.Fatalf("first event = %+v; want the start", first)
	}
	// The stream now waits; the rollback wakes it.
	if got := e.call(t, eng, http.MethodPost, fmt.Sprintf("/rollouts/%d/rollback", r.ID), jsonPayload(map[string]any{"comment": "on-call"})); got.status != http.StatusOK {
		t.Fatalf("rollback = %d %s", got.status, got)
	}
	var all []sseEvent
	wait.Eventually(t, time.Minute, func() bool {
		ev, ok := <-evs
		if ok {
			all = append(all, ev)
		}
		return !ok
	}, "the stream did not end after the rollback: %v", wait.Show(func() any { return all }))
	if len(all) < 2 {
		t.Fatalf("events after the start = %+v; want the rollback and the end", all)
	}
	var rb struct {
		Kind, Decision, State, Message string
		Percent                        int
	}
	rbEv := all[len(all)-2]
	if err := json.Unmarshal([]byte(rbEv.data), &rb); err != nil {
		t.Fatal(err)
	}
	if rb.Decision != "rollback" || rb.State != "rolled_back" || rb.Percent != 0 || !strings.Contains(rb.Message, "on-call") {
		t.Errorf("rollback event = %s; want the rollback to 0 percent with the comment", rbEv.data)
	}
	end := all[len(all)-1]
	if end.event != "end" || !strings.Contains(end.data, `"state":"rolled_back"`) {
		t.Errorf("last event = %+v; want end with rolled_back", end)
	}

	// A reconnect after the rollback's id gets only the end.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+viewer)
	req.Header.Set("Last-Event-ID", rbEv.id)
	again, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(again.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	again.Body.Close()
	if strings.Contains(b.String(), "event: rollout") || !strings.Contains(b.String(), "event: end") {
		t.Errorf("reconnect after %s = %q; want only the end", rbEv.id, b.String())
	}

	other := e.call(t, e.Keys["search-admin"], http.MethodGet, fmt.Sprintf("/rollouts/%d/events", r.ID), nil)
	problem(t, "search admin's stream", other, http.StatusNotFound)
	bad := e.call(t, viewer, http.MethodGet, fmt.Sprintf("/rollouts/%d/events?after=x", r.ID), nil)
	if doc := problem(t, "a bad after", bad, http.StatusBadRequest); !doc.names("query.after") {
		t.Errorf("a bad after names %v; want query.after", doc.locations())
	}
}
