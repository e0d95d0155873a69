package rollout

import "sync"

// feed wakes the readers of rollout events (the API's event stream, the
// portal's live pages) when events may have been written: a broadcast by
// closing a channel, so that any number of readers wake at once and a
// reader that took the channel before it read the events cannot miss a
// change that committed after its read.
type feed struct {
	mu sync.Mutex
	ch chan struct{}
}

func (f *feed) next() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

func (f *feed) changed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch != nil {
		close(f.ch)
		f.ch = nil
	}
}

// Changes returns a channel that is closed at the next Changed. A reader
// takes it, reads the events it has not seen, and waits on it: whatever
// commits after the read closes the channel.
func (s *Service) Changes() <-chan struct{} { return s.feed.next() }

// Changed tells every reader of Changes that rollout events may have been
// written. The Service calls it after each change it commits; the
// assembly calls it after a controller pass that wrote, and for every
// rollout event on NATS, so that a controller in another process wakes
// this one's readers too.
func (s *Service) Changed() { s.feed.changed() }
