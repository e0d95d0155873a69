package bus

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Rotating is a credential a live connection can change: the connection
// asks it for the user JWT and signs the server's nonce with it at every
// (re)connect, so after Set a reconnect (nats.Conn.ForceReconnect) comes
// back as the new user without closing the connection, its subscriptions
// or its watches. The inbox prefix is fixed at the first credential's: a
// node's credentials all share theirs.
type Rotating struct {
	mu  sync.RWMutex
	cur Credential
}

// NewRotating holds c.
func NewRotating(c Credential) *Rotating { return &Rotating{cur: c} }

// Set makes c the credential of every connect from now on.
func (r *Rotating) Set(c Credential) {
	r.mu.Lock()
	r.cur = c
	r.mu.Unlock()
}

// Current is the credential held now.
func (r *Rotating) Current() Credential {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cur
}

// String keeps the seed out of prints.
func (r *Rotating) String() string { return "<secret>" }

// Options authenticate each connect as the credential held then.
func (r *Rotating) Options() []nats.Option {
	opts := []nats.Option{nats.UserJWT(
		func() (string, error) { return r.Current().jwt, nil },
		func(nonce []byte) ([]byte, error) {
			kp, err := nkeys.FromSeed(r.Current().seed)
			if err != nil {
				return nil, fmt.Errorf("nats credential: %w", err)
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		})}
	if inbox := r.Current().inbox; inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	return opts
}
