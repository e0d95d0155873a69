package handlers

import (
	"crypto/sha256"
	"io"
	"testing"
)

// endless is a body that never ends, counting what was read of it.
type endless struct{ read int64 }

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= 64<<20 {
		return 0, io.ErrUnexpectedEOF // a guard for the test, not a bound
	}
	for i := range p {
		p[i] = 'x'
	}
	e.read += int64(len(p))
	return len(p), nil
}

func (e *endless) Close() error { return nil }

// TestIdempotencyDrainBounded checks that after a handler answered without
// reading its whole body, the idempotency middleware reads at most its
// limit of the rest to hash it, and then stores nothing: a caller cannot
// keep the server reading (and hashing) a body without end.
func TestIdempotencyDrainBounded(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	src := &endless{}
	b := &hashingBody{rc: src, h: sha256.New(), limit: limit}
	if b.drain() {
		t.Errorf("drain of an endless body reported the whole body read")
	}
	if src.read > limit+32<<10 {
		t.Errorf("drain read %d bytes, want at most the limit %d (and one buffer)", src.read, limit)
	}

	small := &hashingBody{rc: io.NopCloser(io.LimitReader(&endless{}, 1000)), h: sha256.New(), limit: limit}
	if !small.drain() {
		t.Errorf("drain of a 1000-byte body under the limit reported it unread")
	}
}
