package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"modelplane/busapi"
)

// eventWaker wakes this process's readers of rollout events (the API's
// event stream) for every rollout event on mp.events.>: the controller
// that wrote it may run in another control plane, under its lease, and
// the outbox relay publishes each event once it committed.
type eventWaker struct {
	nc      *nats.Conn
	changed func()

	mu  sync.Mutex
	sub *nats.Subscription
}

// Start subscribes (core NATS: every control plane hears every event).
func (w *eventWaker) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		return nil
	}
	sub, err := w.nc.Subscribe(busapi.EventsSubject(">"), func(m *nats.Msg) {
		var ev busapi.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Kind == "rollout" {
			w.changed()
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe rollout events: %w", err)
	}
	w.sub = sub
	return nil
}

// Stop ends the subscription.
func (w *eventWaker) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
		w.sub = nil
	}
}
