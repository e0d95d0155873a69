package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/quartz"
)

// Server serves Handler on listeners, as net/http's Server does.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's head once its first
	// byte came; IdleTimeout bounds the wait for the next request on a
	// kept-alive connection.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Log receives handler panics; nil discards them.
	Log *slog.Logger
	// Clock times the watch of a running request (watchAfter); nil is the
	// real clock. Deadlines are the kernel's, on real time.
	Clock quartz.Clock

	once     sync.Once
	fallback *http.Server
	handoff  *handoffListener

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
	done      chan struct{}
}

// ErrServerClosed is http.ErrServerClosed: Serve's error after Shutdown or
// Close, which callers already compare with.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) init() {
	s.once.Do(func() {
		if s.Clock == nil {
			s.Clock = quartz.NewReal()
		}
		s.listeners, s.conns, s.done = map[net.Listener]struct{}{}, map[*conn]struct{}{}, make(chan struct{})
		s.handoff = &handoffListener{conns: make(chan net.Conn), done: s.done}
		s.fallback = &http.Server{Handler: s.Handler, ReadHeaderTimeout: s.ReadHeaderTimeout, IdleTimeout: s.IdleTimeout}
		if s.Log != nil {
			s.fallback.ErrorLog = slog.NewLogLogger(s.Log.Handler(), slog.LevelError)
		}
		go func() { _ = s.fallback.Serve(s.handoff) }()
	})
}

// Serve accepts connections on ln and serves each until ln is closed or
// the server shuts down; it returns ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if transient(err) {
				// As net/http: a passing failure (too many open files)
				// waits and tries again rather than ending the server.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if _, ok := nc.(*tls.Conn); ok {
			// TLS (and HTTP/2 over it) is net/http's.
			s.handoff.give(nc)
			continue
		}
		c := newConn(s, nc)
		if !s.track(c, true) {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// transient reports whether an Accept error passes with time: a timeout,
// the process or the system out of descriptors or memory, or a connection
// aborted before it was accepted (the errors net/http's Temporary covers).
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// track adds or removes c, reporting false when the server is closing.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing.Load() {
			return false
		}
		s.conns[c] = struct{}{}
		return true
	}
	delete(s.conns, c)
	return true
}

// Shutdown stops accepting, closes idle connections, lets every request
// in flight finish (its connection then closes), and returns when all
// have, or with ctx's error when ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.beginClose()
	ferr := make(chan error, 1)
	go func() { ferr <- s.fallback.Shutdown(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() {
			return <-ferr
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.init()
	s.beginClose()
	err := s.fallback.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
		c.cancelRequest()
	}
	s.mu.Unlock()
	return err
}

func (s *Server) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Swap(true) {
		return
	}
	close(s.done)
	for ln := range s.listeners {
		ln.Close()
	}
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

// handoffListener gives net/http's server the connections h1 hands over.
type handoffListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *handoffListener) give(nc net.Conn) {
	select {
	case l.conns <- nc:
	case <-l.done:
		nc.Close()
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error { return nil }

func (l *handoffListener) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "h1" }
func (handoffAddr) String() string  { return "handoff" }
