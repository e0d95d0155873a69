package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"

	"modelplane/sockio"
)

// readBufSize is the read buffer of a connection: a head that does not
// fit is net/http's.
const readBufSize = 8 << 10

// writeBufSize is the write buffer of an answer.
const writeBufSize = 8 << 10

// maxPending is what an answer may write before its head must go out:
// an answer that ends within it gets a Content-Length.
const maxPending = 16 << 10

// maxDrain is the most of an unread request body read away after the
// answer so that the connection can serve the next request, as net/http.
const maxDrain = 256 << 10

// watchAfter is how long a request runs before its connection is read
// beside it, to notice a caller that leaves. net/http reads beside every
// request; for the gateway's answers, most done in well under this, that
// was a goroutine, a system call and a wake-up a request.
const watchAfter = 50 * time.Millisecond

// conn is one client connection served by h1.
type conn struct {
	s          *Server
	nc         net.Conn
	io         io.ReadWriter // reads and writes nc (sockio)
	remoteAddr string
	br         *bufio.Reader
	bw         *bufio.Writer
	// idle is true while the connection waits for a request's first
	// byte; Shutdown closes it then.
	idle atomic.Bool

	res  response
	num  [20]byte
	body body
	tmpl http.Request

	// The watch: mu guards running (a request is in the handler),
	// watching (the watch's read is in progress), peeked (a byte that
	// read took) and cancel (the request's).
	//
	// It also guards the read deadline: deadline is the one asked for,
	// applied the one the connection has. A deadline is applied only
	// when a read goes to the connection: most requests set one for their
	// body and clear it again with the body already read from the
	// buffer, and each change of a connection's deadline is a change of
	// a runtime timer.
	mu       sync.Mutex
	deadline time.Time
	applied  time.Time
	cond     sync.Cond
	watch    *quartz.Timer
	running  bool
	watching bool
	peeked   int // -1 for none
	gone     bool
	cancel   context.CancelFunc
	watchBuf [1]byte
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, io: sockio.New(nc), remoteAddr: nc.RemoteAddr().String(), peeked: -1}
	c.cond.L = &c.mu
	c.br = bufio.NewReaderSize(connReader{c}, readBufSize)
	c.watch = s.Clock.AfterFunc(time.Hour, c.watchRead, "h1", "watch")
	c.watch.Stop("h1", "watch")
	return c
}

// connReader reads the connection, the watch's byte first.
type connReader struct{ c *conn }

func (r connReader) Read(p []byte) (int, error) {
	c := r.c
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	if c.peeked >= 0 {
		p[0] = byte(c.peeked)
		c.peeked = -1
		c.mu.Unlock()
		return 1, nil
	}
	c.applyDeadline()
	c.mu.Unlock()
	return c.io.Read(p)
}

// setReadDeadline asks for t as the read deadline of the next read from
// the connection, at once when the watch is reading it.
func (c *conn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	if c.watching {
		c.applyDeadline()
	}
	c.mu.Unlock()
}

// applyDeadline gives the connection the read deadline asked for, with mu
// held.
func (c *conn) applyDeadline() {
	if !c.deadline.Equal(c.applied) {
		_ = c.nc.SetReadDeadline(c.deadline)
		c.applied = c.deadline
	}
}

// serve serves requests on c until it closes or is handed over.
func (c *conn) serve() {
	handed := false
	defer func() {
		c.watch.Stop()
		c.s.track(c, false)
		if !handed {
			c.nc.Close()
		}
	}()
	var h head
	for {
		c.idle.Store(true)
		if c.s.closing.Load() {
			return
		}
		if c.br.Buffered() == 0 {
			if c.s.IdleTimeout > 0 {
				c.setReadDeadline(time.Now().Add(c.s.IdleTimeout))
			}
			// The caller's next request is seldom there right
			// after the answer: a read now would find nothing and
			// the goroutine wait for the poller to wake it. Letting
			// the goroutines that are ready run first (they run
			// before this one is woken anyway) often gives the
			// request time to come (docs/gateway.md, "The read that
			// finds nothing").
			runtime.Gosched()
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		c.idle.Store(false)
		b, ok, err := c.readHead()
		if err != nil {
			return
		}
		if !ok || !parseHead(b, &h) {
			handed = true
			c.handOver()
			return
		}
		_, _ = c.br.Discard(len(b))
		c.setReadDeadline(time.Time{})
		if !c.serveOne(&h) {
			return
		}
	}
}

// readHead reads until the buffer holds a whole head and returns it, in
// the buffer (valid until the next read); ok is false when the head does
// not fit the buffer.
func (c *conn) readHead() (head []byte, ok bool, err error) {
	deadline := false
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf, headEnd); i >= 0 {
			return buf[:i+len(headEnd)], true, nil
		}
		if c.br.Buffered() == c.br.Size() || bareLF(buf) {
			// net/http ends a head at an empty line of a bare LF too
			// ("\n\n"), where waiting for "\r\n\r\n" would hang. parseHead
			// refuses any bare LF, so the head is net/http's as soon as
			// one is seen.
			return nil, false, nil
		}
		if !deadline {
			// The rest of the head is ReadHeaderTimeout's alone (none
			// without one, as net/http): IdleTimeout's deadline was for
			// the first byte.
			deadline = true
			var d time.Time
			if c.s.ReadHeaderTimeout > 0 {
				d = time.Now().Add(c.s.ReadHeaderTimeout)
			}
			c.setReadDeadline(d)
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			return nil, false, err
		}
	}
}

var headEnd = []byte("\r\n\r\n")

// bareLF reports whether b has a LF that no CR comes before.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// handOver gives the connection, with what was read of it, to net/http.
func (c *conn) handOver() {
	c.mu.Lock()
	c.deadline = time.Time{}
	c.applyDeadline()
	c.mu.Unlock()
	c.s.handoff.give(&handedConn{Conn: c.nc, r: c.br})
}

// handedConn is a connection whose first bytes are in r's buffer.
type handedConn struct {
	net.Conn
	r *bufio.Reader
}

func (h *handedConn) Read(p []byte) (int, error) {
	if h.r != nil {
		if h.r.Buffered() > 0 {
			return h.r.Read(p)
		}
		h.r = nil
	}
	return h.Conn.Read(p)
}

// serveOne runs the handler for the request of h and writes its answer,
// reporting whether the connection serves another.
func (c *conn) serveOne(h *head) (keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := c.request(h, ctx)
	out := outs.Get().(*outBuffers)
	out.w.Reset(c.io)
	c.bw = out.w
	defer c.release(out)
	c.res.reset(c, out)
	c.body.reset(c, h.contentLength)

	c.mu.Lock()
	c.running, c.gone, c.cancel = true, false, cancel
	c.mu.Unlock()
	c.watch.Reset(watchAfter)

	panicked := c.runHandler(r)

	c.watch.Stop()
	c.mu.Lock()
	c.running, c.cancel = false, nil
	if c.watching {
		// The watch's read ends at once; the deadline asked for is the
		// next read's again.
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
		c.applied = aLongTimeAgo
		for c.watching {
			c.cond.Wait()
		}
	}
	gone := c.gone
	c.mu.Unlock()
	if panicked {
		return false
	}
	// A caller that is gone (the watch read EOF) still gets the answer,
	// on a connection that then closes, as net/http does: one that only
	// half-closed its side after the request waits for it, and for one
	// that left, the write fails harmlessly.
	keep = !gone && !h.close && !c.s.closing.Load() && c.body.remaining <= maxDrain
	if keep && !c.res.sent && c.body.remaining > 0 {
		// As net/http, the rest of a small unread body is read before
		// the answer is written: a client that writes its whole request
		// before reading is never stuck against a large answer. A body
		// that failed to come (its deadline passed) is not waited for
		// again: the answer goes out and the connection ends.
		keep = c.body.err == nil
		if keep {
			if _, err := io.CopyN(io.Discard, c.br, c.body.remaining); err != nil {
				keep = false
			} else {
				c.body.remaining = 0
			}
		}
	}
	if !c.res.finish(keep) {
		return false
	}
	keep = keep && !c.res.closeAfter
	if !keep && !gone && c.body.remaining > int64(c.br.Buffered()) {
		// Closing with body bytes still coming makes the kernel reset
		// the connection, which can destroy the answer before
		// the client reads it (a 401 to a large POST came to net/http's
		// client as "connection reset by peer"). As net/http
		// (closeWriteAndWait): send a FIN, give the client a while to
		// read the answer, then close.
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		time.Sleep(rstAvoidanceDelay)
		return false
	}
	if keep && c.body.remaining > 0 {
		if _, err := io.CopyN(io.Discard, c.br, c.body.remaining); err != nil {
			return false
		}
	}
	return keep
}

// outBuffers are an answer's buffers, taken for a request and put back
// after it, so that a connection waiting for its next request holds none.
type outBuffers struct {
	w             *bufio.Writer
	pending, head []byte
}

var outs = sync.Pool{New: func() any { return &outBuffers{w: bufio.NewWriterSize(nil, writeBufSize)} }}

// release puts back the buffers of the answer just written.
func (c *conn) release(out *outBuffers) {
	out.w.Reset(nil)
	out.pending, out.head = c.res.pending[:0], c.res.head[:0]
	c.bw, c.res.pending, c.res.head = nil, nil, nil
	outs.Put(out)
}

// request is the *http.Request of h. It is built in the connection's
// template and copied out by WithContext, the only way to give a request
// its context: one allocation a request rather than two.
func (c *conn) request(h *head, ctx context.Context) *http.Request {
	c.tmpl = http.Request{Method: h.method, URL: requestURL(h), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h.header, ContentLength: h.contentLength, Host: h.host, RemoteAddr: c.remoteAddr,
		RequestURI: h.target, Close: h.close, Body: &c.body}
	if h.contentLength == 0 {
		c.tmpl.Body = http.NoBody
	}
	return c.tmpl.WithContext(ctx)
}

// runHandler calls the handler, reporting whether it panicked; a panic
// is logged (but http.ErrAbortHandler's) and the connection closed, as
// net/http does.
func (c *conn) runHandler(r *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler && c.s.Log != nil {
				c.s.Log.Error("h1: panic serving", slog.String("remote", c.remoteAddr), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			}
		}
	}()
	c.s.Handler.ServeHTTP(&c.res, r)
	return false
}

// watchRead runs watchAfter into a request: once its body is read, it
// reads the connection until the request ends, cancelling the request
// when the caller closed it. A byte it reads (the next request's) is kept
// for the next read.
func (c *conn) watchRead() {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return
	}
	if c.body.remaining > 0 || c.br.Buffered() > 0 || c.peeked >= 0 {
		// The body is still the handler's to read, or the next request
		// is here already: nothing to watch for now.
		if c.body.remaining > 0 {
			c.watch.Reset(watchAfter)
		}
		c.mu.Unlock()
		return
	}
	c.watching = true
	c.applyDeadline()
	c.mu.Unlock()
	n, err := c.nc.Read(c.watchBuf[:])
	c.mu.Lock()
	c.watching = false
	if n == 1 {
		c.peeked = int(c.watchBuf[0])
	} else if err != nil && c.running && !isTimeout(err) {
		c.gone = true
		if c.cancel != nil {
			c.cancel()
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// cancelRequest cancels the request in flight, if any.
func (c *conn) cancelRequest() {
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rstAvoidanceDelay is how long a connection closing with a request body
// unread waits after its FIN, as net/http's.
const rstAvoidanceDelay = 500 * time.Millisecond

// aLongTimeAgo is a deadline in the past, which ends a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// body is a request's body of a known length, read from the connection.
type body struct {
	c         *conn
	remaining int64
	closed    bool
	// err is the first error reading it, io.EOF aside.
	err error
}

func (b *body) reset(c *conn, n int64) { *b = body{c: c, remaining: n} }

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.br.Read(p)
	b.c.mu.Lock()
	b.remaining -= int64(n)
	b.c.mu.Unlock()
	if b.remaining == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *body) Close() error {
	b.closed = true
	return nil
}
