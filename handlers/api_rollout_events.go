package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/rollout"
)

// RolloutStreamEvent is one "rollout" event of GET /rollouts/{rollout}/events:
// a timeline entry (a state change, a step, a verdict with the numbers
// it judged, an approval) and the candidate's traffic percent it left.
type RolloutStreamEvent struct {
	rollout.Event
	Percent int `json:"percent" doc:"The candidate's share of traffic in percent after this event (mirrored, for a shadow): the step's percent while the rollout runs, 0 while starting and once rolled back, 100 once promoted."`
}

// RolloutStreamEnd is the "end" event that closes the stream when the
// rollout has ended: its final state and why.
type RolloutStreamEnd struct {
	ID     int64  `json:"id"`
	State  string `json:"state" doc:"promoted, completed or rolled_back."`
	Reason string `json:"reason"`
}

// streamKeepAlive is how often an idle stream sends a comment, so that
// proxies keep it open and a client notices a dead connection.
const streamKeepAlive = 15 * time.Second

// eventBatch is how many events one read of the timeline takes.
const eventBatch = 100

// rolloutEventStream serves GET /api/v1/rollouts/{rollout}/events as
// server-sent events: the rollout's timeline after Last-Event-ID (or
// ?after=, or from the start), then each new entry as it commits, woken
// by the rollout service rather than by polling; when the rollout has
// ended it sends an "end" event and closes. With follow=0 it sends what
// there is and closes. The rollout is read as the caller may see it, so
// another team's answers 404 before anything streams.
func (s *Server) rolloutEventStream(w http.ResponseWriter, r *http.Request) {
	ctx, p := r.Context(), principal(r.Context())
	var bad []*huma.ErrorDetail
	id, err := strconv.ParseInt(chi.URLParam(r, "rollout"), 10, 64)
	if err != nil {
		bad = append(bad, &huma.ErrorDetail{Location: "path.rollout", Message: "must be a rollout id"})
	}
	var last int64
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	if after != "" {
		if last, err = strconv.ParseInt(after, 10, 64); err != nil || last < 0 {
			bad = append(bad, &huma.ErrorDetail{Location: "query.after", Message: "must be an event id, 0 or more"})
		}
	}
	follow := true
	switch r.URL.Query().Get("follow") {
	case "", "1", "true":
	case "0", "false":
		follow = false
	default:
		bad = append(bad, &huma.ErrorDetail{Location: "query.follow", Message: "must be 1 or 0"})
	}
	if len(bad) > 0 {
		writeProblem(w, http.StatusBadRequest, "validation failed", bad...)
		return
	}
	ro, err := s.Rollouts.Get(ctx, p, id)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	// A stream ends after sseLifetime, so that a revoked key or token
	// stops reading at the latest then; the client reconnects with
	// Last-Event-ID.
	ctx, cancel := context.WithTimeout(ctx, sseLifetime)
	defer cancel()
	state := ro.State
	keep := s.Clock.NewTicker(streamKeepAlive, "api", "rollout_events")
	defer keep.Stop()
	for {
		// The channel is taken before the read: a change committed after
		// the read closes it, so none is missed.
		changed := s.Rollouts.Changes()
		evs, err := s.Rollouts.Events(ctx, p, id, last, eventBatch)
		if err != nil {
			return
		}
		for _, e := range evs {
			b, _ := json.Marshal(RolloutStreamEvent{Event: e, Percent: percentAfter(ro, e)})
			if _, err := fmt.Fprintf(w, "id: %d\nevent: rollout\ndata: %s\n\n", e.ID, b); err != nil {
				return
			}
			last, state = e.ID, e.State
		}
		if len(evs) == eventBatch {
			continue
		}
		if !rollout.Active(state) {
			// The last event names the final state; the reason is the row's.
			if ro, err = s.Rollouts.Get(ctx, p, id); err == nil {
				b, _ := json.Marshal(RolloutStreamEnd{ID: ro.ID, State: ro.State, Reason: ro.Reason})
				_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
			}
			_ = rc.Flush()
			return
		}
		if err := rc.Flush(); err != nil || !follow {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
	}
}

// percentAfter is the candidate's traffic percent after e.
func percentAfter(ro rollout.Rollout, e rollout.Event) int {
	switch {
	case e.State == rollout.StateRolledBack || e.State == rollout.StateStarting:
		return 0
	case e.State == rollout.StatePromoted || e.State == rollout.StateCompleted:
		return 100
	case e.StepIndex >= 0 && e.StepIndex < len(ro.Steps):
		return ro.Steps[e.StepIndex].Percent
	}
	return 0
}

// rolloutEventsOperation documents the plain chi route of a rollout's
// event stream, which is not a huma operation because it streams.
func rolloutEventsOperation(reg huma.Registry) *huma.Operation {
	str, num := &huma.Schema{Type: "string"}, &huma.Schema{Type: "integer"}
	problem := map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}
	event := reg.Schema(reflect.TypeFor[RolloutStreamEvent](), true, "RolloutStreamEvent")
	end := reg.Schema(reflect.TypeFor[RolloutStreamEnd](), true, "RolloutStreamEnd")
	return &huma.Operation{
		OperationID: "rollout-events", Method: http.MethodGet, Path: "/rollouts/{rollout}/events",
		Tags: []string{"rollouts"}, Summary: "Follow a rollout's events as server-sent events",
		Description: "text/event-stream. Each timeline entry after `Last-Event-ID` (or `after`; from the start without either) " +
			"is an `event: rollout` whose `id:` is the entry's id and whose data is a RolloutStreamEvent: steps, weights, " +
			"and each verdict with the numbers it judged, as they commit. When the rollout has ended an `event: end` " +
			"(data: RolloutStreamEnd) closes the stream. With follow=0 the stream closes after what there is. A stream " +
			"lasts at most a few minutes; reconnect with Last-Event-ID to go on.",
		Parameters: []*huma.Param{{Name: "rollout", In: "path", Required: true, Schema: num},
			{Name: "after", In: "query", Schema: num}, {Name: "follow", In: "query", Schema: str},
			{Name: "Last-Event-ID", In: "header", Schema: str}},
		Responses: map[string]*huma.Response{
			"200": {Description: "The event stream", Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{
				Type: "string", Description: "server-sent events", OneOf: []*huma.Schema{event, end}}}}},
			"400": {Description: "Bad query", Content: problem}, "401": {Description: "Unauthorized", Content: problem},
			"404": {Description: "No such rollout, or another team's", Content: problem},
		},
	}
}
