package cache_test

import (
	"errors"
	"testing"

	"modelplane/agent/cache"
	"modelplane/egress"
)

// loopback lets the tests' control plane, on 127.0.0.1, be reached.
var loopback = &egress.Policy{AllowLoopback: true}

// TestDownloadsKeepToTheEgressPolicy: without loopback allowed, the
// default client refuses the control plane on 127.0.0.1 at the dial, so
// the cache never reaches a loopback, link-local or metadata address the
// URL (or a redirect, or DNS) points it at.
func TestDownloadsKeepToTheEgressPolicy(t *testing.T) {
	t.Parallel()
	p := newPlane(t)
	spec := p.version("v1", map[string][]byte{"model.safetensors": weights("x", 16)})
	c, err := cache.New(cache.Config{Dir: t.TempDir(), URL: p.URL, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(t.Context(), spec); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("Prepare from a loopback control plane = %v; want egress refused", err)
	}
	if _, err := cache.New(cache.Config{Dir: t.TempDir(), URL: "no-host", Token: token}); err == nil {
		t.Error("cache with a URL without a host: nil error")
	}
}
