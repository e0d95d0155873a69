package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/h1"
	"modelplane/sockio"
)

// unaryClient calls replicas over plain HTTP/1.1 for requests whose answer
// is not a stream: the request goes out in one write from the
// connection's own buffer, and the answer is read on the caller's
// goroutine. net/http's Transport hands every call to a write goroutine
// and every answer from a read goroutine of the connection; on one core
// those hand-offs and its header map cost about as much as the gateway's
// policies (docs/gateway.md, "Own client for unary calls"). Streams, TLS
// and a Transport given in Config stay on net/http.
//
// Its semantics are the Transport's as the proxy uses them: keep-alive
// connections per replica address, a request on a reused connection the
// replica had closed is sent again once on a fresh one (the call carries
// an idempotency key), a failed dial is a *net.OpError with Op "dial", and
// the request's context ending cuts the call (the connection's deadline
// is moved into the past, and the connection is not reused).
//
// A call's own deadline is the connection's. The cut on the context is
// registered only once the call has run cutAfter: registering and
// removing it on every call was, with the context and timer the
// deadline took, a tenth of the gateway's own CPU a request, and nearly
// every call ends sooner (a context ended before then is seen then).
type unaryClient struct {
	dialer net.Dialer
	clock  quartz.Clock
	// maxIdle bounds the idle connections kept per replica address;
	// idleTimeout is how long one is kept unused, as the Transport's
	// IdleConnTimeout: a replica stopped for good leaves its connections
	// half-closed, holding a descriptor each, until they are swept.
	maxIdle     int
	idleTimeout time.Duration

	mu sync.Mutex
	// idle holds each address's idle connections, the most recently
	// used last; swept is when the last sweep ran.
	idle   map[string][]*unaryConn
	swept  time.Time
	closed bool

	// onRearm, when set (tests), is called as a call's cut is registered.
	onRearm func()
}

// unaryConn is one kept-alive connection to a replica with its buffers.
type unaryConn struct {
	nc net.Conn
	// io reads and writes nc (sockio).
	io   io.ReadWriter
	br   *bufio.Reader
	wbuf []byte
	addr string
	// since is when it was put back idle; fresh is true for a call on a
	// new connection or one idle for less than sendWaitIdle.
	since time.Time
	fresh bool

	// send's: nc's descriptor (nil when it has none), sendStep as a
	// function, and the write in progress.
	rc      syscall.RawConn
	sendFn  func(uintptr) bool
	out     []byte
	written bool
	werr    error

	// The call in progress: its context and deadline; arming is true
	// while the connection's deadline is cutAfter's rather than the
	// call's, and stop removes the cut once it is registered.
	ctx      context.Context
	deadline time.Time
	arming   bool
	stop     func() bool
	onRearm  func()
}

// cutAfter is how long a call runs before its context's end is watched:
// h1 notices a caller that leaves only after 50 ms (h1.watchAfter).
const cutAfter = 50 * time.Millisecond

// begin starts a call on conn that ctx's end or deadline (none when zero)
// cuts.
func (conn *unaryConn) begin(ctx context.Context, deadline time.Time) {
	conn.ctx, conn.deadline, conn.stop, conn.arming = ctx, deadline, nil, false
	// The context's Done is not asked for here: a request's makes its
	// channel when first asked.
	d := deadline
	if a := time.Now().Add(cutAfter); d.IsZero() || a.Before(d) {
		d, conn.arming = a, true
	}
	_ = conn.nc.SetDeadline(d)
}

// rearm is called with the error of a read or write: when it is the
// passing of cutAfter, it gives the connection the call's own deadline,
// registers the cut on the context and reports that the I/O goes on.
func (conn *unaryConn) rearm(err error) bool {
	if !conn.arming || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	conn.arming = false
	// The deadline first: a context already ended runs the cut at once,
	// whose deadline in the past must be the last.
	_ = conn.nc.SetDeadline(conn.deadline)
	nc := conn.nc
	conn.stop = context.AfterFunc(conn.ctx, func() { _ = nc.SetDeadline(aLongTimeAgo) })
	if conn.onRearm != nil {
		conn.onRearm()
	}
	return true
}

// end ends the call, reporting false when its cut ran or runs: the
// connection's deadline is then in the past.
func (conn *unaryConn) end() bool {
	ok := conn.stop == nil || conn.stop()
	conn.ctx, conn.stop, conn.arming = nil, nil, false
	return ok
}

// write writes b, going on past cutAfter.
func (conn *unaryConn) write(b []byte) error {
	for {
		n, err := conn.io.Write(b)
		if err == nil || !conn.rearm(err) {
			return err
		}
		b = b[n:]
	}
}

// send writes the request b and, once it went out whole, waits until the
// answer can be read. The runtime's read tries the connection before it
// waits, and right after a request that try finds nothing (EAGAIN) on
// nearly every call, since no replica answers within the microseconds a
// write takes: a system call a call for nothing. Here the write is made
// inside the wait (syscall.RawConn.Read, which arms the wait for
// readiness before it first calls its function), so the answer cannot
// come between the write and the wait, and the read that follows finds
// it.
//
// What came before the wait is not seen by it: a connection idle for
// longer than sendWaitIdle, whose replica may have closed it meanwhile,
// is written and read as usual, and so is one whose buffer holds bytes.
// A write that does not go out whole in one system call goes on through
// write, and the read then waits as usual.
func (conn *unaryConn) send(b []byte) error {
	if !conn.fresh || conn.rc == nil || conn.br.Buffered() > 0 {
		return conn.write(b)
	}
	conn.out, conn.written, conn.werr = b, false, nil
	err := conn.rc.Read(conn.sendFn)
	b, werr := conn.out, conn.werr
	conn.out, conn.werr = nil, nil
	switch {
	case werr != nil:
		return werr
	case !conn.written || len(b) > 0:
		return conn.write(b) // it meets err again, if any
	case err != nil && !conn.rearm(err):
		return err
	}
	return nil
}

// sendStep is send's function for RawConn.Read: first the write, then,
// once the connection is readable, closed or reset, the end of the wait
// (the read that follows tells which).
func (conn *unaryConn) sendStep(fd uintptr) bool {
	if conn.written {
		return true
	}
	conn.written = true
	n, err := sockio.Write(fd, conn.out)
	conn.out = conn.out[n:]
	if err != 0 && err != syscall.EAGAIN {
		conn.werr = &net.OpError{Op: "write", Net: "tcp", Source: conn.nc.LocalAddr(), Addr: conn.nc.RemoteAddr(), Err: os.NewSyscallError("write", err)}
	}
	return conn.werr != nil || len(conn.out) > 0
}

// sendWaitIdle is how long a connection may have been idle for send to
// wait for its answer without a read first: a replica that closes a kept
// connection does so after seconds of idleness, not within one.
const sendWaitIdle = time.Second

// unaryReader reads a call's answer, going on past cutAfter.
type unaryReader struct{ conn *unaryConn }

func (r unaryReader) Read(p []byte) (int, error) {
	for {
		n, err := r.conn.io.Read(p)
		if n > 0 || err == nil || !r.conn.rearm(err) {
			return n, err
		}
	}
}

// unaryBufSize is the read buffer of a connection; answers larger than it
// stream through it.
const unaryBufSize = 16 << 10

// maxKeptWriteBuf is the largest request buffer a connection keeps between
// calls, so that one big body does not pin its memory.
const maxKeptWriteBuf = 64 << 10

func newUnaryClient(clock quartz.Clock) *unaryClient {
	return &unaryClient{dialer: net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}, clock: clock,
		maxIdle: 512, idleTimeout: 90 * time.Second, idle: map[string][]*unaryConn{}, swept: clock.Now()}
}

// unaryRequest is what a call sends besides its body: the path, and the
// header lines, each value already checked by plainValue.
type unaryRequest struct {
	path   string
	accept string // "" for none
	id     string
	token  string // "" for none
	team   string
	// traceparent is the request span's, "" for none: the gateway made
	// it (tracing.Traceparent, lowercase hex and dashes), so plain need
	// not look at it. tracestate is the caller's, "" for none.
	traceparent, tracestate string
	// extra are further header lines (a shadow's mark), name then value.
	extra []string
}

// errUnaryInformational is a 1xx answer, which no replica sends.
var errUnaryInformational = errors.New("replica answered with an informational status")

// roundTrip sends req with body to the replica at addr and returns its
// answer, whose Body must be closed; it keeps the connection alive when the
// body was read to its end and the replica did not ask to close. The call,
// answer included, ends at ctx's end or at deadline (none when zero).
func (uc *unaryClient) roundTrip(ctx context.Context, deadline time.Time, addr string, req *unaryRequest, body []byte) (*http.Response, error) {
	conn, reused, err := uc.get(ctx, deadline, addr)
	for attempt := 0; ; attempt++ {
		if err != nil {
			return nil, err
		}
		var resp *http.Response
		var silent bool
		resp, silent, err = uc.exchange(ctx, deadline, conn, req, body)
		if err == nil {
			return resp, nil
		}
		conn.nc.Close()
		// A reused connection the replica closed or reset before any byte
		// of an answer came is what a replica's idle timeout leaves
		// behind: the call is sent once more on a fresh connection, as
		// net/http's Transport does for a replayable request. A broken
		// answer is not sent again here. What closed it (an idle timeout:
		// nginx's 75 s, vLLM's 5 s; a guard or runtime restarting) closed
		// every connection idle as long or longer too, so those are
		// dropped rather than tried one by one: taking the next idle one
		// instead failed a few calls of the first burst after it with a
		// 502.
		if reused && silent && attempt == 0 && ctx.Err() == nil && !passed(deadline) && unanswered(err) {
			uc.dropIdle(addr, conn.since)
			reused = false
			conn, err = uc.dial(ctx, deadline, addr)
			continue
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("call replica %s: %w (%w)", addr, ctx.Err(), err)
		}
		return nil, fmt.Errorf("call replica %s: %w", addr, err)
	}
}

// exchange writes the request on conn and reads the answer's status line
// and headers; the body is read by the caller through the answer. silent
// reports, with an error, that no byte of an answer had come.
func (uc *unaryClient) exchange(ctx context.Context, deadline time.Time, conn *unaryConn, req *unaryRequest, body []byte) (resp *http.Response, silent bool, err error) {
	conn.begin(ctx, deadline)
	conn.wbuf = appendRequest(conn.wbuf[:0], conn.addr, req, body)
	if err := conn.send(conn.wbuf); err != nil {
		conn.end()
		return nil, true, err
	}
	if cap(conn.wbuf) > maxKeptWriteBuf {
		conn.wbuf = nil
	}
	// Peek first: an EOF here, with nothing read, is a closed connection
	// rather than a broken answer.
	if _, err := conn.br.Peek(1); err != nil {
		conn.end()
		return nil, true, err
	}
	resp, err = h1.ReadResponse(conn.br)
	if err == nil && resp.StatusCode < 200 {
		resp.Body.Close()
		err = errUnaryInformational
	}
	if err != nil {
		conn.end()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // something was read: a broken answer
		}
		return nil, false, err
	}
	resp.Body = &unaryBody{uc: uc, conn: conn, body: resp.Body, keep: !resp.Close, eof: resp.ContentLength == 0}
	return resp, false, nil
}

// aLongTimeAgo is a deadline in the past, which ends a blocked read or
// write at once.
var aLongTimeAgo = time.Unix(1, 0)

// passed reports whether deadline (none when zero) has passed.
func passed(deadline time.Time) bool { return !deadline.IsZero() && !time.Now().Before(deadline) }

// appendRequest appends the request's bytes to b.
func appendRequest(b []byte, host string, req *unaryRequest, body []byte) []byte {
	b = append(b, "POST "...)
	b = append(b, req.path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if req.accept != "" {
		b = append(b, "\r\nAccept: "...)
		b = append(b, req.accept...)
	}
	b = append(b, "\r\nX-Request-Id: "...)
	b = append(b, req.id...)
	b = append(b, "\r\nX-Idempotency-Key: "...)
	b = append(b, req.id...)
	if req.traceparent != "" {
		b = append(b, "\r\nTraceparent: "...)
		b = append(b, req.traceparent...)
		if req.tracestate != "" {
			b = append(b, "\r\nTracestate: "...)
			b = append(b, req.tracestate...)
		}
	}
	for i := 0; i+1 < len(req.extra); i += 2 {
		b = append(b, "\r\n"...)
		b = append(b, req.extra[i]...)
		b = append(b, ": "...)
		b = append(b, req.extra[i+1]...)
	}
	if req.token != "" {
		b = append(b, "\r\n"+busapi.ReplicaTokenHeader+": "...)
		b = append(b, req.token...)
	}
	b = append(b, "\r\n"+busapi.TeamHeader+": "...)
	b = append(b, req.team...)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// plain reports whether every part of req can be written as it is
// (plainPath, plainValue); net/http checks any other.
func (req *unaryRequest) plain() bool {
	ok := plainPath(req.path) && plainValue(req.accept) && plainValue(req.id) && plainValue(req.token) && plainValue(req.team) &&
		plainValue(req.tracestate)
	for _, s := range req.extra {
		ok = ok && plainValue(s)
	}
	return ok
}

// plainValue reports whether s can be written as a header value as it is:
// visible ASCII, spaces and tabs. Anything else goes through net/http,
// which rejects what is invalid.
func plainValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c > '~' {
			return false
		}
	}
	return true
}

// plainPath reports whether path can be written in a request line as it
// is, the same as net/http would write it: it starts with a slash and has
// no byte that URL parsing would change (no escapes, query or fragment).
func plainPath(path string) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/-._~:@", c) >= 0) {
			return false
		}
	}
	return true
}

// get returns an idle connection to addr, or a new one; reused says
// which.
func (uc *unaryClient) get(ctx context.Context, deadline time.Time, addr string) (*unaryConn, bool, error) {
	uc.mu.Lock()
	now := uc.sweep()
	if conns := uc.idle[addr]; len(conns) > 0 {
		conn := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		uc.idle[addr] = conns[:len(conns)-1]
		uc.mu.Unlock()
		conn.fresh = now.Sub(conn.since) < sendWaitIdle
		return conn, true, nil
	}
	uc.mu.Unlock()
	conn, err := uc.dial(ctx, deadline, addr)
	return conn, false, err
}

// dial opens a new connection to addr.
func (uc *unaryClient) dial(ctx context.Context, deadline time.Time, addr string) (*unaryConn, error) {
	d := uc.dialer
	d.Deadline = deadline
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := &unaryConn{nc: nc, io: sockio.New(nc), addr: addr, onRearm: uc.onRearm, fresh: true}
	if sc, ok := nc.(syscall.Conn); ok {
		conn.rc, _ = sc.SyscallConn()
		conn.sendFn = conn.sendStep
	}
	conn.br = bufio.NewReaderSize(unaryReader{conn}, unaryBufSize)
	return conn, nil
}

// dropIdle closes addr's idle connections put back no later than since.
func (uc *unaryClient) dropIdle(addr string, since time.Time) {
	uc.mu.Lock()
	conns := uc.idle[addr]
	var stale []*unaryConn
	kept := conns[:0]
	for _, conn := range conns {
		if conn.since.After(since) {
			kept = append(kept, conn)
		} else {
			stale = append(stale, conn)
		}
	}
	clear(conns[len(kept):])
	if len(kept) == 0 {
		delete(uc.idle, addr)
	} else {
		uc.idle[addr] = kept
	}
	uc.mu.Unlock()
	for _, conn := range stale {
		conn.nc.Close()
	}
}

// put keeps conn for the next call to its address, or closes it when the
// client is closed or enough are kept.
func (uc *unaryClient) put(conn *unaryConn) {
	uc.mu.Lock()
	if uc.closed || len(uc.idle[conn.addr]) >= uc.maxIdle {
		uc.mu.Unlock()
		conn.nc.Close()
		return
	}
	conn.since = uc.clock.Now()
	uc.idle[conn.addr] = append(uc.idle[conn.addr], conn)
	uc.mu.Unlock()
}

// sweep closes the connections idle for longer than idleTimeout, at most
// once in half that time, with mu held, and returns the time it read. It
// runs on calls rather than on a ticker: connections are only left idle
// after calls.
func (uc *unaryClient) sweep() time.Time {
	now := uc.clock.Now()
	if now.Sub(uc.swept) < uc.idleTimeout/2 {
		return now
	}
	uc.swept = now
	for addr, conns := range uc.idle {
		// The oldest come first: keep from the first one still fresh.
		i := 0
		for i < len(conns) && now.Sub(conns[i].since) > uc.idleTimeout {
			conns[i].nc.Close()
			i++
		}
		switch {
		case i == len(conns):
			delete(uc.idle, addr)
		case i > 0:
			uc.idle[addr] = append(conns[:0], conns[i:]...)
			clear(conns[len(conns)-i:])
		}
	}
	return now
}

// close closes the idle connections and every connection put back later.
func (uc *unaryClient) close() {
	uc.mu.Lock()
	idle := uc.idle
	uc.idle, uc.closed = map[string][]*unaryConn{}, true
	uc.mu.Unlock()
	for _, conns := range idle {
		for _, conn := range conns {
			conn.nc.Close()
		}
	}
}

// unaryBody is an answer's body: closing it after reading it to its end
// puts the connection back for the next call; closing it earlier, or
// after the call was cut, closes the connection.
type unaryBody struct {
	uc   *unaryClient
	conn *unaryConn
	body io.ReadCloser
	keep bool
	eof  bool
	done bool
}

func (b *unaryBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *unaryBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.conn.end() && b.eof && b.keep {
		b.uc.put(b.conn)
		return nil
	}
	return b.conn.nc.Close()
}
