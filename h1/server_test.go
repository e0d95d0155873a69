package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"

	iwait "modelplane/internal/wait"
)

// waitLimit bounds every wait for something that must happen; a test
// fails only when it never does.
const waitLimit = 10 * time.Second

// testServer is an h1.Server serving on a real listener on 127.0.0.1.
type testServer struct {
	s        *Server
	addr     string
	url      string
	accepted *atomic.Int32
	served   chan error // Serve's result

	once     sync.Once
	serveErr error
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startServer serves h on a new listener, configured by configure; at the
// end of the test it closes the server and checks Serve's result.
func startServer(t *testing.T, h http.Handler, configure ...func(*Server)) *testServer {
	t.Helper()
	return startServerOn(t, listen(t), h, configure...)
}

func startServerOn(t *testing.T, ln net.Listener, h http.Handler, configure ...func(*Server)) *testServer {
	t.Helper()
	ts := &testServer{s: &Server{Handler: h}, addr: ln.Addr().String(), accepted: new(atomic.Int32), served: make(chan error, 1)}
	ts.url = "http://" + ts.addr
	for _, f := range configure {
		f(ts.s)
	}
	go func() { ts.served <- ts.s.Serve(countingListener{ln, ts.accepted}) }()
	t.Cleanup(func() {
		ts.s.Close()
		if err := ts.serveResult(t); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v, want %v", err, http.ErrServerClosed)
		}
	})
	return ts
}

// withClock has the server time its watch by clk.
func withClock(clk quartz.Clock) func(*Server) { return func(s *Server) { s.Clock = clk } }

// peeked reports whether a connection's watch holds a byte it read of the
// next request.
func (ts *testServer) peeked() bool {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	for c := range ts.s.conns {
		c.mu.Lock()
		p := c.peeked >= 0
		c.mu.Unlock()
		if p {
			return true
		}
	}
	return false
}

// serveResult waits for Serve to return and gives its error.
func (ts *testServer) serveResult(t *testing.T) error {
	t.Helper()
	ts.once.Do(func() {
		select {
		case ts.serveErr = <-ts.served:
		case <-time.After(waitLimit):
			ts.serveErr = errors.New("Serve did not return")
		}
	})
	return ts.serveErr
}

// newClient is a client of its own connection pool.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// rawConn is a client connection written and read byte for byte.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	// No read or write may block a failing test for ever.
	_ = nc.SetDeadline(time.Now().Add(waitLimit))
	return &rawConn{Conn: nc, br: bufio.NewReader(nc)}
}

func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// answer reads one answer to a request of method and its whole body.
func (c *rawConn) answer(t *testing.T, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	resp.Body.Close()
	return resp, string(body)
}

// wantEOF checks that the server closed the connection: a read gets EOF
// (eventually; the deadline of dialRaw bounds the wait).
func (c *rawConn) wantEOF(t *testing.T) {
	t.Helper()
	b, err := c.br.ReadByte()
	if err != io.EOF {
		t.Errorf("read after the last answer = %q, %v; want EOF", b, err)
	}
}

// get is a plain GET request of path.
func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: test.example\r\n\r\n" }

// echoHandler answers with the method, path and body it got.
var echoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, body)
})

// wait waits for ch, failing the test when it never comes.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s never happened", what)
		panic("unreachable")
	}
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler)
	client := newClient(t)
	for i := range 5 {
		var reused atomic.Bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused.Store(info.Reused) }}
		path := fmt.Sprintf("/req/%d", i)
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, ts.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(body), "GET "+path+" "; got != want {
			t.Errorf("request %d: body = %q, want %q", i, got, want)
		}
		if i > 0 && !reused.Load() {
			t.Errorf("request %d: connection reused = false, want true", i)
		}
	}
	if got := ts.accepted.Load(); got != 1 {
		t.Errorf("accepted connections = %d, want 1", got)
	}
}

func TestResponseFraming(t *testing.T) {
	t.Parallel()
	write := func(chunks ...[]byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for _, c := range chunks {
				if _, err := w.Write(c); err != nil {
					panic(err)
				}
			}
		}
	}
	repeat := func(n int, b []byte) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = b
		}
		return out
	}
	kib := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for _, tc := range []struct {
		name    string
		handler http.Handler
		body    string
		chunked bool // else a Content-Length of len(body)
	}{
		{"small body", write([]byte("hello, world")), "hello, world", false},
		{"empty body", write(), "", false},
		{"two small writes", write([]byte("hello, "), []byte("world")), "hello, world", false},
		{"exactly maxPending", write(repeat(maxPending/len(kib), kib)...), strings.Repeat(string(kib), maxPending/len(kib)), false},
		{"beyond maxPending in small writes", write(repeat(20, kib)...), strings.Repeat(string(kib), 20), true},
		{"beyond maxPending in one write", write(bytes.Repeat(kib, 40)), strings.Repeat(string(kib), 40), true},
		{"declared length beyond maxPending", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(30*len(kib)))
			for range 30 {
				w.Write(kib)
			}
		}), strings.Repeat(string(kib), 30), false},
		{"declared small length", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}), "hello", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					io.WriteString(w, "next")
					return
				}
				tc.handler.ServeHTTP(w, r)
			}))
			c := dialRaw(t, ts.addr)
			c.send(t, get("/"))
			resp, body := c.answer(t, http.MethodGet)
			if body != tc.body {
				t.Errorf("body of %d bytes, want %d", len(body), len(tc.body))
			}
			if tc.chunked {
				if got, want := resp.TransferEncoding, []string{"chunked"}; !reflect.DeepEqual(got, want) {
					t.Errorf("Transfer-Encoding = %q, want %q", got, want)
				}
				if got := resp.Header["Content-Length"]; got != nil {
					t.Errorf("Content-Length = %q, want none", got)
				}
			} else {
				if got := resp.TransferEncoding; got != nil {
					t.Errorf("Transfer-Encoding = %q, want none", got)
				}
				if got, want := resp.Header.Get("Content-Length"), strconv.Itoa(len(tc.body)); got != want {
					t.Errorf("Content-Length = %q, want %q", got, want)
				}
			}
			// The answer ended where its framing said: the connection
			// serves the next request.
			c.send(t, get("/next"))
			if _, body := c.answer(t, http.MethodGet); body != "next" {
				t.Errorf("next answer's body = %q, want %q", body, "next")
			}
			if got := ts.accepted.Load(); got != 1 {
				t.Errorf("accepted connections = %d, want 1", got)
			}
		})
	}
}

// A handler that sets a Content-Length and writes less has its connection
// closed, as the client would wait for the rest.
func TestResponseShorterThanDeclared(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "short")
	}))
	c := dialRaw(t, ts.addr)
	c.send(t, get("/"))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.ContentLength, int64(10); got != want {
		t.Errorf("ContentLength = %d, want %d", got, want)
	}
	body, err := io.ReadAll(resp.Body)
	if string(body) != "short" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("body = %q, %v; want %q, %v", body, err, "short", io.ErrUnexpectedEOF)
	}
}

func TestFlushSendsBeforeHandlerEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		if err := http.NewResponseController(w).Flush(); err != nil {
			io.WriteString(w, "|flush: "+err.Error())
			return
		}
		select {
		case <-release:
			io.WriteString(w, "|second")
		case <-t.Context().Done():
			io.WriteString(w, "|the client never read the first part")
		}
	}))
	resp, err := newClient(t).Get(ts.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("first"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(first)+string(rest), "first|second"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
	if got, want := resp.TransferEncoding, []string{"chunked"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Transfer-Encoding = %q, want %q", got, want)
	}
}

func TestContentTypeAndDate(t *testing.T) {
	t.Parallel()
	html := "<!DOCTYPE html><html><body>hi</body></html>"
	binary := "\x00\x01\x02\x03binary"
	big := strings.Repeat("<p>x</p>", 5000) // 40000 bytes
	for _, tc := range []struct {
		name     string
		handler  http.HandlerFunc
		wantType string // "" for none
	}{
		{"html sniffed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, html) }, http.DetectContentType([]byte(html))},
		{"text sniffed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain words") }, http.DetectContentType([]byte("plain words"))},
		{"binary sniffed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, binary) }, http.DetectContentType([]byte(binary))},
		{"large single write sniffed", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }, http.DetectContentType([]byte(big))},
		{"small then large write sniffed as a whole", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello")
			w.Write(bytes.Repeat([]byte{0}, 20000))
		}, http.DetectContentType(append([]byte("hello"), make([]byte, 20000)...))},
		{"set type kept", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, html)
		}, "application/json"},
		{"encoding not sniffed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, html)
		}, ""},
		{"nil type not sniffed", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, html)
		}, ""},
		{"empty body not sniffed", func(w http.ResponseWriter, r *http.Request) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, tc.handler)
			c := dialRaw(t, ts.addr)
			c.send(t, get("/"))
			resp, _ := c.answer(t, http.MethodGet)
			if got := resp.Header.Get("Content-Type"); got != tc.wantType {
				t.Errorf("Content-Type = %q, want %q", got, tc.wantType)
			}
			if got := resp.Header.Values("Date"); len(got) != 1 {
				t.Errorf("Date = %q, want one", got)
			} else if _, err := http.ParseTime(got[0]); err != nil {
				t.Errorf("Date %q: %v", got[0], err)
			}
		})
	}
}

func TestHeadersAfterWriteHeaderNotSent(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Before", "1")
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-After", "1")
		w.Header().Set("Content-Type", "application/x-late")
		io.WriteString(w, "body")
		w.Header().Set("X-After-Write", "1")
	}))
	c := dialRaw(t, ts.addr)
	c.send(t, get("/"))
	resp, body := c.answer(t, http.MethodGet)
	if resp.StatusCode != http.StatusAccepted || body != "body" {
		t.Errorf("answer = %d %q, want %d %q", resp.StatusCode, body, http.StatusAccepted, "body")
	}
	if got := resp.Header.Get("X-Before"); got != "1" {
		t.Errorf("X-Before = %q, want %q", got, "1")
	}
	for _, k := range []string{"X-After", "X-After-Write"} {
		if got, ok := resp.Header[k]; ok {
			t.Errorf("%s = %q, want none", k, got)
		}
	}
	if got, want := resp.Header.Get("Content-Type"), http.DetectContentType([]byte("body")); got != want {
		t.Errorf("Content-Type = %q, want %q (sniffed, the late one ignored)", got, want)
	}
}

func TestNoBodyStatuses(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNoContent, http.StatusNotModified} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			writeErr := make(chan error, 1)
			ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					io.WriteString(w, "next")
					return
				}
				w.Header().Set("Content-Length", "4")
				w.Header().Set("ETag", `"v1"`)
				w.WriteHeader(status)
				_, err := io.WriteString(w, "body")
				writeErr <- err
			}))
			c := dialRaw(t, ts.addr)
			c.send(t, get("/"))
			resp, body := c.answer(t, http.MethodGet)
			if resp.StatusCode != status || body != "" {
				t.Errorf("answer = %d %q, want %d with no body", resp.StatusCode, body, status)
			}
			for _, k := range []string{"Content-Length", "Transfer-Encoding", "Content-Type"} {
				if got, ok := resp.Header[k]; ok {
					t.Errorf("%s = %q, want none", k, got)
				}
			}
			if resp.TransferEncoding != nil {
				t.Errorf("Transfer-Encoding = %q, want none", resp.TransferEncoding)
			}
			if got := resp.Header.Get("ETag"); got != `"v1"` {
				t.Errorf("ETag = %q, want %q", got, `"v1"`)
			}
			if err := wait(t, writeErr, "the handler's write"); !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("Write = %v, want %v", err, http.ErrBodyNotAllowed)
			}
			// No body bytes went out: the next answer reads cleanly.
			c.send(t, get("/next"))
			if _, body := c.answer(t, http.MethodGet); body != "next" {
				t.Errorf("next answer's body = %q, want %q", body, "next")
			}
		})
	}
}

// Answers of h1 carry what net/http's server would send for the same
// handler: status, headers (but Date), framing and body.
func TestAnswersMatchNetHTTP(t *testing.T) {
	t.Parallel()
	kib := strings.Repeat("0123456789abcdef", 64)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }},
		{"empty", func(w http.ResponseWriter, r *http.Request) {}},
		{"error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) }},
		{"redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) }},
		{"headers", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Trim", "  padded\t")
			w.Header().Set("Bad Name", "dropped")
			io.WriteString(w, `{"ok":true}`)
		}},
		{"value with newlines", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Evil", "a\r\nInjected: yes")
			io.WriteString(w, "x")
		}},
		{"204", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNoContent)
		}},
		{"304", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("ETag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		}},
		{"declared length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "abc")
		}},
		{"large", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat(kib, 40)) }},
		{"small then large binary", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello")
			w.Write(make([]byte, 20000))
		}},
		{"flushed", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		}},
		{"connection close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}},
		{"status 299 and custom text", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(299)
			io.WriteString(w, "odd")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours := startServer(t, tc.handler)
			theirs := httptest.NewServer(tc.handler)
			t.Cleanup(theirs.Close)
			answer := func(addr string) (*http.Response, string) {
				c := dialRaw(t, addr)
				c.send(t, get("/"))
				return c.answer(t, http.MethodGet)
			}
			got, gotBody := answer(ours.addr)
			want, wantBody := answer(theirs.Listener.Addr().String())
			got.Header.Del("Date")
			want.Header.Del("Date")
			if got.Status != want.Status {
				t.Errorf("status = %q, want %q", got.Status, want.Status)
			}
			if !reflect.DeepEqual(got.Header, want.Header) {
				t.Errorf("header = %v, want %v", got.Header, want.Header)
			}
			if got.ContentLength != want.ContentLength || !reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) || got.Close != want.Close {
				t.Errorf("framing = %d %q close %v, want %d %q close %v", got.ContentLength, got.TransferEncoding, got.Close,
					want.ContentLength, want.TransferEncoding, want.Close)
			}
			if gotBody != wantBody {
				t.Errorf("body = %q, want %q", gotBody, wantBody)
			}
		})
	}
}

func TestHeaderValueCannotSplitHead(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Evil", "a\r\nInjected: yes")
		w.Header().Set("X-Lf", "b\nSet-Cookie: s=1")
		w.Header().Set("X-End", "c\r\n\r\nHTTP/1.1 200 OK")
		io.WriteString(w, "body")
	}))
	c := dialRaw(t, ts.addr)
	c.send(t, get("/"))
	resp, body := c.answer(t, http.MethodGet)
	for k, want := range map[string]string{"X-Evil": "a  Injected: yes", "X-Lf": "b Set-Cookie: s=1", "X-End": "c    HTTP/1.1 200 OK"} {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", k, got, want)
		}
	}
	for _, k := range []string{"Injected", "Set-Cookie"} {
		if got, ok := resp.Header[k]; ok {
			t.Errorf("%s = %q, want none", k, got)
		}
	}
	if body != "body" {
		t.Errorf("body = %q, want %q", body, "body")
	}
}

// protoHandler answers with what the request was and its body.
var protoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s %s te=%q body=%q", r.Method, r.URL.Path, r.Proto, r.TransferEncoding, body)
})

func TestHandOff(t *testing.T) {
	t.Parallel()
	t.Run("HTTP/1.0 after a plain request", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, protoHandler)
		c := dialRaw(t, ts.addr)
		c.send(t, get("/one"))
		if _, body := c.answer(t, http.MethodGet); body != `GET /one HTTP/1.1 te=[] body=""` {
			t.Errorf("first body = %q", body)
		}
		c.send(t, "GET /two HTTP/1.0\r\nHost: test.example\r\n\r\n")
		resp, body := c.answer(t, http.MethodGet)
		if want := `GET /two HTTP/1.0 te=[] body=""`; body != want {
			t.Errorf("second body = %q, want %q", body, want)
		}
		if resp.ProtoMinor != 0 {
			t.Errorf("second answer's proto = %q, want HTTP/1.0", resp.Proto)
		}
		c.wantEOF(t) // HTTP/1.0 without keep-alive
	})
	t.Run("chunked POST after a plain request", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, protoHandler)
		c := dialRaw(t, ts.addr)
		c.send(t, get("/one"))
		if _, body := c.answer(t, http.MethodGet); body != `GET /one HTTP/1.1 te=[] body=""` {
			t.Errorf("first body = %q", body)
		}
		c.send(t, "POST /two HTTP/1.1\r\nHost: test.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		if _, body := c.answer(t, http.MethodPost); body != `POST /two HTTP/1.1 te=["chunked"] body="hello world"` {
			t.Errorf("second body = %q", body)
		}
		c.send(t, get("/three"))
		if _, body := c.answer(t, http.MethodGet); body != `GET /three HTTP/1.1 te=[] body=""` {
			t.Errorf("third body = %q", body)
		}
		if got := ts.accepted.Load(); got != 1 {
			t.Errorf("accepted connections = %d, want 1", got)
		}
	})
	t.Run("expect 100-continue", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, protoHandler)
		tr := &http.Transport{ExpectContinueTimeout: waitLimit}
		t.Cleanup(tr.CloseIdleConnections)
		var got100 atomic.Bool
		trace := &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, ts.url+"/upload", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		resp, err := (&http.Client{Transport: tr, Timeout: waitLimit}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := `POST /upload HTTP/1.1 te=[] body="payload"`; string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
		if !got100.Load() {
			t.Error("no 100 Continue came")
		}
	})
	t.Run("bare LF head", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, protoHandler)
		c := dialRaw(t, ts.addr)
		c.send(t, "GET /lf HTTP/1.1\nHost: test.example\n\n")
		if _, body := c.answer(t, http.MethodGet); body != `GET /lf HTTP/1.1 te=[] body=""` {
			t.Errorf("body = %q", body)
		}
	})
	t.Run("head larger than the read buffer", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%d", len(r.Header.Get("X-Big")))
		}))
		client := newClient(t)
		big := strings.Repeat("v", 20<<10)
		for _, path := range []string{"/small", "/big", "/small-again"} {
			req, err := http.NewRequest(http.MethodGet, ts.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := "0"
			if path == "/big" {
				req.Header.Set("X-Big", big)
				want = strconv.Itoa(len(big))
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != want {
				t.Errorf("%s: answer = %d %q, want 200 %q", path, resp.StatusCode, body, want)
			}
		}
	})
}

func TestPipelining(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler)
	c := dialRaw(t, ts.addr)
	c.send(t, get("/a")+get("/b")+"POST /c HTTP/1.1\r\nHost: test.example\r\nContent-Length: 3\r\n\r\nabc"+get("/d"))
	for _, tc := range []struct{ method, body string }{
		{"GET", "GET /a "}, {"GET", "GET /b "}, {"POST", "POST /c abc"}, {"GET", "GET /d "},
	} {
		if _, body := c.answer(t, tc.method); body != tc.body {
			t.Errorf("body = %q, want %q", body, tc.body)
		}
	}
}

func TestUnreadBody(t *testing.T) {
	t.Parallel()
	for _, size := range []int{11, 100 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path) // the body is left unread
			}))
			c := dialRaw(t, ts.addr)
			body := strings.Repeat("x", size)
			// The server reads away the unread body (before its answer,
			// as net/http): write beside reading.
			sent := make(chan error, 1)
			go func() {
				_, err := io.WriteString(c, "POST /ignore HTTP/1.1\r\nHost: test.example\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n"+body)
				sent <- err
			}()
			if _, got := c.answer(t, http.MethodPost); got != "POST /ignore" {
				t.Errorf("first body = %q, want %q", got, "POST /ignore")
			}
			if err := wait(t, sent, "the write of the request"); err != nil {
				t.Fatal(err)
			}
			c.send(t, get("/next"))
			if _, got := c.answer(t, http.MethodGet); got != "GET /next" {
				t.Errorf("next body = %q, want %q", got, "GET /next")
			}
		})
	}
}

// TestBodyThatNeverComes: a body whose read fails (its deadline passed, as
// the gateway bounds body reads) is not waited for again: the handler's
// answer goes out, with Connection: close, and the connection ends.
func TestBodyThatNeverComes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := io.ReadAll(r.Body); err == nil {
			t.Error("reading a body that never comes succeeded")
		}
		http.Error(w, "slow body", http.StatusBadRequest)
	}))
	c := dialRaw(t, ts.addr)
	c.send(t, "POST /slow HTTP/1.1\r\nHost: test.example\r\nContent-Length: 1000\r\n\r\n{\"a\"")
	resp, got := c.answer(t, http.MethodPost)
	if resp.StatusCode != http.StatusBadRequest || got != "slow body\n" || !resp.Close {
		t.Errorf("answer = %d %q, close %v; want 400 %q, close", resp.StatusCode, got, resp.Close, "slow body\n")
	}
	c.wantEOF(t)
}

// A handler that refuses a large body without reading it gets its answer
// to the client, not a connection reset (the unread body makes the
// connection close).
func TestUnreadLargeBodyAnswered(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no key", http.StatusUnauthorized)
	}))
	client := newClient(t)
	body := make([]byte, 4<<20)
	for i := range 10 {
		resp, err := client.Post(ts.url+"/predict", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: reading body: %v", i, err)
		}
		if resp.StatusCode != http.StatusUnauthorized || string(got) != "no key\n" {
			t.Errorf("request %d: answer = %d %q, want %d %q", i, resp.StatusCode, got, http.StatusUnauthorized, "no key\n")
		}
	}
}

func TestLargeRequestBody(t *testing.T) {
	t.Parallel()
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x", len(body), sha256.Sum256(body))
	}))
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	resp, err := newClient(t).Post(ts.url+"/upload", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); string(got) != want {
		t.Errorf("answer = %q, want %q", got, want)
	}
}

func TestRequestFields(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, remoteAddr, host, requestURI, path, rawQuery, proto string
		header                                                      http.Header
		contentLength                                               int64
		body                                                        string
		ctxErr                                                      error
		ctx                                                         context.Context
	}
	got := make(chan seen, 1)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RemoteAddr, r.Host, r.RequestURI, r.URL.Path, r.URL.RawQuery, r.Proto,
			r.Header.Clone(), r.ContentLength, string(body), r.Context().Err(), r.Context()}
		io.WriteString(w, "ok")
	}))
	c := dialRaw(t, ts.addr)
	c.send(t, "POST /p/a?x=1&y=2 HTTP/1.1\r\nHost: example.com:8080\r\nX-A: 1\r\nx-a: 2\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc")
	if _, body := c.answer(t, http.MethodPost); body != "ok" {
		t.Errorf("body = %q, want %q", body, "ok")
	}
	s := wait(t, got, "the handler")
	want := seen{
		method: "POST", remoteAddr: c.LocalAddr().String(), host: "example.com:8080", requestURI: "/p/a?x=1&y=2",
		path: "/p/a", rawQuery: "x=1&y=2", proto: "HTTP/1.1",
		header:        http.Header{"X-A": {"1", "2"}, "Content-Type": {"text/plain"}, "Content-Length": {"3"}},
		contentLength: 3, body: "abc",
	}
	ctx := s.ctx
	s.ctx = nil
	if !reflect.DeepEqual(s, want) {
		t.Errorf("handler saw %+v, want %+v", s, want)
	}
	// The context ends once the handler returned.
	wait(t, ctx.Done(), "the request context's end after the handler returned")
}

func TestClientConnectionClose(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler)
	c := dialRaw(t, ts.addr)
	c.send(t, "GET /bye HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")
	resp, body := c.answer(t, http.MethodGet)
	if body != "GET /bye " {
		t.Errorf("body = %q, want %q", body, "GET /bye ")
	}
	// ReadResponse takes "Connection: close" out of the header into Close.
	if !resp.Close {
		t.Errorf("answer's Close = false, want true (Connection: close)")
	}
	c.wantEOF(t)
}

func TestCallerLeaves(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	ended := make(chan error, 1)
	clk := quartz.NewMock(t)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-t.Context().Done():
			ended <- errors.New("context never ended")
		}
	}), withClock(clk))
	c := dialRaw(t, ts.addr)
	c.send(t, get("/wait"))
	wait(t, entered, "the handler's start")
	clk.Advance(watchAfter) // the watch starts reading the connection
	c.Close()
	if err := wait(t, ended, "the handler's end"); !errors.Is(err, context.Canceled) {
		t.Errorf("request context: %v, want %v", err, context.Canceled)
	}
}

// A caller that closes only its side after the request still gets the
// answer, its request's context ended, as from net/http's server.
func TestCallerHalfCloses(t *testing.T) {
	t.Parallel()
	handler := func(t *testing.T, entered chan<- struct{}) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
				fmt.Fprintf(w, "ended: %v", r.Context().Err())
			case <-t.Context().Done():
				io.WriteString(w, "context never ended")
			}
		}
	}
	// start serves h and returns its address and what moves the server's
	// clock past watchAfter (net/http reads beside every request at once).
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, h http.Handler) (addr string, watched func())
	}{
		{"h1", func(t *testing.T, h http.Handler) (string, func()) {
			clk := quartz.NewMock(t)
			return startServer(t, h, withClock(clk)).addr, func() { clk.Advance(watchAfter) }
		}},
		{"net/http", func(t *testing.T, h http.Handler) (string, func()) {
			ts := httptest.NewServer(h)
			t.Cleanup(ts.Close)
			return ts.Listener.Addr().String(), func() {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entered := make(chan struct{})
			addr, watched := tc.start(t, handler(t, entered))
			c := dialRaw(t, addr)
			c.send(t, get("/wait"))
			wait(t, entered, "the handler's start")
			watched()
			if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_, body := c.answer(t, http.MethodGet)
			if want := "ended: " + context.Canceled.Error(); body != want {
				t.Errorf("body = %q, want %q", body, want)
			}
			c.wantEOF(t)
		})
	}
}

// A request that comes while the one before runs (and its connection is
// watched) is served after it, whole.
func TestPipelinedWhileWatched(t *testing.T) {
	t.Parallel()
	entered, proceed := make(chan struct{}), make(chan struct{})
	clk := quartz.NewMock(t)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			select {
			case <-proceed:
			case <-r.Context().Done():
				io.WriteString(w, "cancelled ")
			case <-t.Context().Done():
				io.WriteString(w, "never released ")
			}
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.URL.Path, body)
	}), withClock(clk))
	c := dialRaw(t, ts.addr)
	c.send(t, get("/slow"))
	wait(t, entered, "the handler's start")
	clk.Advance(watchAfter) // the watch starts reading the connection
	c.send(t, "POST /next HTTP/1.1\r\nHost: test.example\r\nContent-Length: 4\r\n\r\nbody")
	// The watch takes the next request's first byte, which h1 must give
	// back to that request.
	iwait.Eventually(t, waitLimit, func() bool { return ts.peeked() }, "the watch never read the next request's first byte")
	close(proceed)
	if _, body := c.answer(t, http.MethodGet); body != "/slow " {
		t.Errorf("first body = %q, want %q", body, "/slow ")
	}
	if _, body := c.answer(t, http.MethodPost); body != "/next body" {
		t.Errorf("second body = %q, want %q", body, "/next body")
	}
	c.send(t, get("/last"))
	if _, body := c.answer(t, http.MethodGet); body != "/last " {
		t.Errorf("third body = %q, want %q", body, "/last ")
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort":
			io.WriteString(w, "partial")
			panic(http.ErrAbortHandler)
		case "/boom":
			panic("boom in the handler")
		}
		io.WriteString(w, "ok")
	}), func(s *Server) { s.Log = slog.New(slog.NewTextHandler(&logs, nil)) })

	for _, path := range []string{"/abort", "/boom"} {
		c := dialRaw(t, ts.addr)
		c.send(t, get(path))
		if resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet}); err == nil {
			t.Errorf("%s: got an answer %q, want the connection closed", path, resp.Status)
		}
	}
	// The server goes on serving.
	c := dialRaw(t, ts.addr)
	c.send(t, get("/ok"))
	if _, body := c.answer(t, http.MethodGet); body != "ok" {
		t.Errorf("body after panics = %q, want %q", body, "ok")
	}
	log := logs.String()
	if strings.Contains(log, http.ErrAbortHandler.Error()) {
		t.Errorf("log has http.ErrAbortHandler:\n%s", log)
	}
	if !strings.Contains(log, "boom in the handler") {
		t.Errorf("log has no panic:\n%s", log)
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	t.Run("waits for the request in flight", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				close(entered)
				select {
				case <-release:
				case <-t.Context().Done():
					io.WriteString(w, "never released ")
				}
			}
			io.WriteString(w, "done")
		}))
		busy := dialRaw(t, ts.addr)
		busy.send(t, get("/block"))
		wait(t, entered, "the handler's start")
		idle := dialRaw(t, ts.addr)
		idle.send(t, get("/quick"))
		if _, body := idle.answer(t, http.MethodGet); body != "done" {
			t.Errorf("idle connection's body = %q, want %q", body, "done")
		}

		shut := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			shut <- ts.s.Shutdown(ctx)
		}()
		idle.wantEOF(t) // the idle connection is closed ...
		select {
		case err := <-shut: // ... while the request in flight holds Shutdown
			t.Fatalf("Shutdown = %v with a request in flight", err)
		default:
		}
		if err := ts.serveResult(t); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v, want %v", err, http.ErrServerClosed)
		}

		close(release)
		resp, body := busy.answer(t, http.MethodGet)
		if body != "done" {
			t.Errorf("body in flight = %q, want %q", body, "done")
		}
		if !resp.Close {
			t.Errorf("answer's Close = false, want true (Connection: close)")
		}
		busy.wantEOF(t)
		if err := wait(t, shut, "Shutdown's return"); err != nil {
			t.Errorf("Shutdown = %v, want nil", err)
		}
	})
	t.Run("expired context", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-release:
			case <-t.Context().Done():
			}
		}))
		t.Cleanup(func() { close(release) }) // before the server's Close
		c := dialRaw(t, ts.addr)
		c.send(t, get("/block"))
		wait(t, entered, "the handler's start")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := ts.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Shutdown = %v, want %v", err, context.Canceled)
		}
	})
	t.Run("idle server", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, echoHandler)
		c := dialRaw(t, ts.addr)
		c.send(t, get("/"))
		c.answer(t, http.MethodGet)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := ts.s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v, want nil", err)
		}
		c.wantEOF(t)
		if err := ts.serveResult(t); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v, want %v", err, http.ErrServerClosed)
		}
		// Serve on a closed server refuses at once.
		ln := listen(t)
		defer ln.Close()
		if err := ts.s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Shutdown = %v, want %v", err, http.ErrServerClosed)
		}
	})
}

func TestClose(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	ended := make(chan error, 1)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/block" {
			io.WriteString(w, "done")
			return
		}
		close(entered)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-t.Context().Done():
			ended <- errors.New("context never ended")
		}
	}))
	busy := dialRaw(t, ts.addr)
	busy.send(t, get("/block"))
	wait(t, entered, "the handler's start")
	idle := dialRaw(t, ts.addr)
	idle.send(t, get("/quick"))
	idle.answer(t, http.MethodGet)
	// And one handed to net/http.
	handed := dialRaw(t, ts.addr)
	handed.send(t, "GET /old HTTP/1.0\r\nHost: test.example\r\nConnection: keep-alive\r\n\r\n")
	handed.answer(t, http.MethodGet)

	if err := ts.s.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	if err := ts.serveResult(t); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve = %v, want %v", err, http.ErrServerClosed)
	}
	idle.wantEOF(t)
	handed.wantEOF(t)
	if _, err := busy.br.ReadByte(); err == nil {
		t.Error("connection in flight: read a byte, want it closed")
	}
	if err := wait(t, ended, "the handler's end"); !errors.Is(err, context.Canceled) {
		t.Errorf("request context: %v, want %v", err, context.Canceled)
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler, func(s *Server) { s.IdleTimeout = 100 * time.Millisecond })
	c := dialRaw(t, ts.addr)
	c.send(t, get("/"))
	if _, body := c.answer(t, http.MethodGet); body != "GET / " {
		t.Errorf("body = %q, want %q", body, "GET / ")
	}
	c.wantEOF(t)
}

// IdleTimeout bounds the wait for a request's first byte, not the rest
// of its head.
func TestIdleTimeoutSparesSlowHead(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler, func(s *Server) { s.IdleTimeout = 200 * time.Millisecond })
	c := dialRaw(t, ts.addr)
	req := get("/slow-head")
	c.send(t, req[:5])
	// The rest comes once the idle timeout has passed for a connection
	// opened after this one: the server closing that one says so.
	idle := dialRaw(t, ts.addr)
	idle.wantEOF(t)
	c.send(t, req[5:])
	if _, body := c.answer(t, http.MethodGet); body != "GET /slow-head " {
		t.Errorf("body = %q, want %q", body, "GET /slow-head ")
	}
}

// ReadHeaderTimeout ends a connection whose head stops coming.
func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	ts := startServer(t, echoHandler, func(s *Server) { s.ReadHeaderTimeout = 100 * time.Millisecond })
	c := dialRaw(t, ts.addr)
	c.send(t, "GET / HTTP/1.1\r\n")
	c.wantEOF(t)
}

// selfSigned is a certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "h1 test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	ln := tls.NewListener(listen(t), &tls.Config{Certificates: []tls.Certificate{cert}})
	ts := startServerOn(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		complete := r.TLS != nil && r.TLS.HandshakeComplete
		fmt.Fprintf(w, "tls=%v %s %s", complete, r.Proto, r.URL.Path)
	}))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: waitLimit}
	for _, path := range []string{"/a", "/b"} {
		resp, err := client.Get("https://" + ts.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "tls=true HTTP/1.1 " + path; string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
	}
	if got := ts.accepted.Load(); got != 1 {
		t.Errorf("accepted connections = %d, want 1", got)
	}
}

// failingListener fails its first Accepts with err, as a process out of
// descriptors does, then accepts.
type failingListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// TestAcceptOutOfDescriptors: Accept failing with EMFILE (too many open
// files) makes the server wait and try again, not stop serving.
func TestAcceptOutOfDescriptors(t *testing.T) {
	t.Parallel()
	ln := &failingListener{Listener: listen(t), err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
	ln.fails.Store(3)
	ts := startServerOn(t, ln, echoHandler)
	c := dialRaw(t, ts.addr)
	c.send(t, get("/after"))
	if _, got := c.answer(t, http.MethodGet); got != "GET /after " {
		t.Errorf("answer after EMFILE = %q, want %q", got, "GET /after ")
	}
}

// TestManyClientsMixedRequests runs clients side by side on kept-alive
// connections, each request of a random kind: small and large answers,
// flushed or not, slow enough to be watched, bodies read or left, a
// close, and HTTP/1.0 (handed to net/http). Every answer must be the one
// asked for, whole; under -race it holds the pooled buffers and the
// watch to one request at a time.
func TestManyClientsMixedRequests(t *testing.T) {
	t.Parallel()
	clk := quartz.NewMock(t)
	var advancing sync.Mutex
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		size, _ := strconv.Atoi(q.Get("size"))
		if q.Get("read") == "1" {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		if q.Get("slow") == "1" {
			// Past watchAfter: the connection is read beside it (every
			// running request's is, from the moment the clock moves).
			// Handlers move it one at a time, to the next watch due, and
			// not while the last move's watches are still firing.
			advancing.Lock()
			if d, ok := clk.Peek(); ok && d > 0 {
				clk.Advance(d)
			}
			advancing.Unlock()
		}
		w.Header().Set("X-Id", q.Get("id"))
		chunk := []byte(strings.Repeat(q.Get("id")[:1], 1000))
		for size > 0 {
			n := min(size, len(chunk))
			_, _ = w.Write(chunk[:n])
			size -= n
			if q.Get("flush") == "1" {
				_ = http.NewResponseController(w).Flush()
			}
		}
	}), withClock(clk))
	const clients, requests = 8, 30
	var wg sync.WaitGroup
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, ts.addr)
			for i := range requests {
				n := ci*requests + i
				id := string(rune('a'+n%26)) + strconv.Itoa(n)
				size := []int{0, 10, 3000, 40000}[n%4]
				flush := n%3 == 0
				slow := n%11 == 0
				read := n%2 == 0
				body := strings.Repeat("b", []int{0, 5, 70000}[n%3])
				target := fmt.Sprintf("/r?id=%s&size=%d&flush=%d&slow=%d&read=%d", id, size, b2i(flush), b2i(slow), b2i(read))
				proto, closing := "HTTP/1.1", n%17 == 16
				if n%13 == 12 {
					proto = "HTTP/1.0" // net/http's from here on this connection
				}
				head := "POST " + target + " " + proto + "\r\nHost: test.example\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
				switch {
				case closing:
					head += "Connection: close\r\n"
				case proto == "HTTP/1.0":
					head += "Connection: keep-alive\r\n"
				}
				// dialRaw's deadline bounds one request here, not the run.
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				go func() { _, _ = io.WriteString(c, head+"\r\n"+body) }()
				resp, got := c.answer(t, http.MethodPost)
				want := strings.Repeat(id[:1], size)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Id") != id || got != want {
					t.Errorf("request %s: %d, X-Id %q, %d bytes; want 200, %q, %d bytes", id, resp.StatusCode, resp.Header.Get("X-Id"), len(got), id, len(want))
					return
				}
				if closing || resp.Close {
					// Closed: an EOF, or a reset when the request's unread
					// body was still coming as the server closed (it waits
					// 500 ms for the client to read the answer, as net/http;
					// a loaded machine may not read by then).
					if b, err := c.br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
						t.Errorf("request %s (%s, read %v, body %d, size %d, flush %v, slow %v, closing %v): read after the answer = %q, %v; want EOF", id, proto, read, len(body), size, flush, slow, closing, b, err)
						return
					}
					c = dialRaw(t, ts.addr)
				}
			}
		}()
	}
	wg.Wait()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
