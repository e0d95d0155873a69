package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"

	"modelplane/auth"
	"modelplane/bus"
	"modelplane/enrollment"
	"modelplane/trust"
)

// nodeCredsFile is where an enrolled agent keeps its credentials, in its
// state directory, readable by its user alone.
const nodeCredsFile = "credentials.json"

// DefaultRotateEvery is how often an enrolled agent rotates its
// credentials.
const DefaultRotateEvery = 24 * time.Hour

// loadNodeCreds reads the credentials an earlier enrollment stored in dir;
// ok is false when there are none.
func loadNodeCreds(dir string) (c enrollment.Credentials, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, nodeCredsFile))
	if errors.Is(err, os.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("node credentials: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, false, fmt.Errorf("node credentials %s: %w", filepath.Join(dir, nodeCredsFile), err)
	}
	return c, true, nil
}

// saveNodeCreds stores c in dir, mode 0600, replacing what was there in one
// rename so that a crash leaves the old or the new credentials, never half.
// A state directory it creates is 0711: the process driver's runtimes,
// running as another user, pass through it to their model directories.
func saveNodeCreds(dir string, c enrollment.Credentials) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("node credentials: %w", err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return bus.WritePrivateFile(filepath.Join(dir, nodeCredsFile), b)
}

// credentialSource is where an agent gets its credentials: the control
// plane over HTTP (controlPlaneSource), or, in `modelplane dev`, the
// enrollment service in the same process (localSource).
type credentialSource interface {
	Join(ctx context.Context, token string) (enrollment.Credentials, error)
	Rotate(ctx context.Context, artifactToken string) (enrollment.Credentials, error)
}

// controlPlaneSource calls the control plane's node routes.
type controlPlaneSource struct {
	url    string
	client *http.Client
}

// roots, when set, are the CAs the control plane's certificate chains to
// (MP_TLS_CA).
func newControlPlaneSource(url string, roots *tls.Config) controlPlaneSource {
	c := &http.Client{Timeout: 30 * time.Second}
	if roots != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = roots
		c.Transport = t
	}
	return controlPlaneSource{url: strings.TrimRight(url, "/"), client: c}
}

// Join exchanges a join token; a refused token says why (used, expired,
// revoked) and what to do.
func (s controlPlaneSource) Join(ctx context.Context, token string) (enrollment.Credentials, error) {
	body, _ := json.Marshal(map[string]string{"token": token})
	c, err := s.call(ctx, "/api/v1/nodes/enroll", "", body)
	if err != nil {
		return c, fmt.Errorf("enroll with the join token: %w", err)
	}
	return c, nil
}

// Rotate asks for new credentials with the current artifact token.
func (s controlPlaneSource) Rotate(ctx context.Context, artifactToken string) (enrollment.Credentials, error) {
	c, err := s.call(ctx, "/api/v1/nodes/rotate", artifactToken, nil)
	if err != nil {
		return c, fmt.Errorf("rotate node credentials: %w", err)
	}
	return c, nil
}

// errRefused wraps the control plane's refusal of a token.
var errRefused = errors.New("refused")

func (s controlPlaneSource) call(ctx context.Context, path, bearer string, body []byte) (enrollment.Credentials, error) {
	var c enrollment.Credentials
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(body))
	if err != nil {
		return c, err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return c, err
	}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(b, &p)
		if p.Detail == "" {
			p.Detail = http.StatusText(resp.StatusCode)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return c, fmt.Errorf("%w: %s: ask a platform admin for a new join token (the Fleet page's Add node, or POST /api/v1/join-tokens)", errRefused, p.Detail)
		}
		return c, fmt.Errorf("%s answered %d: %s", s.url+path, resp.StatusCode, p.Detail)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", s.url+path, err)
	}
	return c, nil
}

// localSource is the enrollment service of this process: `modelplane dev`
// enrolls its nodes through it, down the same path as a remote agent
// (nodeSession) but without HTTP.
type localSource struct{ svc *enrollment.Service }

func (s localSource) Join(ctx context.Context, token string) (enrollment.Credentials, error) {
	return s.svc.Join(ctx, token, "in-process")
}

func (s localSource) Rotate(ctx context.Context, artifactToken string) (enrollment.Credentials, error) {
	return s.svc.Rotate(ctx, artifactToken)
}

// enrollDevNode enrolls node at addr in `modelplane dev` the way a platform
// admin and a remote agent would: a join token made by the enrollment
// service, exchanged once. The credentials hold the node's NATS creds and
// its artifact token (Credentials.ArtifactToken).
func enrollDevNode(ctx context.Context, svc *enrollment.Service, node string, addr trust.Address) (enrollment.Credentials, error) {
	token, _, err := svc.CreateJoinToken(ctx, auth.System("modelplane dev"), enrollment.JoinRequest{Node: node, Host: addr.Host,
		PortFirst: addr.PortFirst, PortLast: addr.PortLast, TTL: time.Minute})
	if err != nil {
		return enrollment.Credentials{}, fmt.Errorf("enroll %s: %w", node, err)
	}
	c, err := localSource{svc}.Join(ctx, token)
	if err != nil {
		return enrollment.Credentials{}, fmt.Errorf("enroll %s: %w", node, err)
	}
	return c, nil
}

// nodeSession is an enrolled agent's live credentials: the NATS credential
// its connection authenticates with at every connect, and the artifact
// token its downloads carry. Rotate swaps both without closing the
// connection or touching a replica.
type nodeSession struct {
	src credentialSource
	// dir is where the credentials are kept; "" keeps them in memory
	// (dev's simulated nodes).
	dir   string
	nats  *bus.Rotating
	creds atomic.Pointer[enrollment.Credentials]
	nc    atomic.Pointer[nats.Conn]
	log   *slog.Logger
}

// newNodeSession holds c, got from src.
func newNodeSession(src credentialSource, dir string, c enrollment.Credentials, log *slog.Logger) (*nodeSession, error) {
	cred, err := bus.ParseCredential([]byte(c.NATSCreds))
	if err != nil {
		return nil, err
	}
	s := &nodeSession{src: src, dir: dir, nats: bus.NewRotating(cred), log: log}
	s.creds.Store(&c)
	return s, nil
}

// Options authenticate a connection as the session's current credential.
func (s *nodeSession) Options() []nats.Option { return s.nats.Options() }

// Attach is the connection Rotate reconnects.
func (s *nodeSession) Attach(nc *nats.Conn) { s.nc.Store(nc) }

// Node is the node the credentials are for.
func (s *nodeSession) Node() string { return s.creds.Load().Node }

// ArtifactToken is the token downloads carry now.
func (s *nodeSession) ArtifactToken() string { return s.creds.Load().ArtifactToken }

// Rotate gets new credentials, keeps them, and moves the connection to
// them: the next connect authenticates as the new user, and a forced
// reconnect makes that now, while the previous credentials still work
// (the control plane's rotation grace). Subscriptions and watches resume
// on the same connection; replicas never notice.
func (s *nodeSession) Rotate(ctx context.Context) error {
	c, err := s.src.Rotate(ctx, s.ArtifactToken())
	if err != nil {
		return err
	}
	cred, err := bus.ParseCredential([]byte(c.NATSCreds))
	if err != nil {
		return fmt.Errorf("rotate node credentials: %w", err)
	}
	if s.dir != "" {
		if err := saveNodeCreds(s.dir, c); err != nil {
			return err
		}
	}
	s.nats.Set(cred)
	s.creds.Store(&c)
	if nc := s.nc.Load(); nc != nil {
		if err := nc.ForceReconnect(); err != nil {
			return fmt.Errorf("reconnect with the rotated credential: %w", err)
		}
	}
	return nil
}

// RotateEvery rotates on clock every interval until ctx ends, logging
// failures (the previous credentials keep working; the next tick tries
// again).
func (s *nodeSession) RotateEvery(ctx context.Context, clock quartz.Clock, every time.Duration) {
	t := clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Rotate(ctx); err != nil {
				s.log.WarnContext(ctx, "rotate node credentials", slog.String("error", err.Error()))
			} else {
				s.log.InfoContext(ctx, "rotated node credentials", slog.String("node", s.Node()))
			}
		}
	}
}
