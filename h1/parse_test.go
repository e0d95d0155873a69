package h1

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// headCases are request heads, each with whether h1 serves it (plain) or
// hands it to net/http. They seed FuzzParseHead too.
var headCases = []struct {
	name  string
	head  string
	plain bool
}{
	// What h1 serves: parsed exactly as net/http parses it.
	{"simple get", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", true},
	{"get with path", "GET /v1/models/risk:predict HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test\r\nAccept: */*\r\n\r\n", true},
	{"post with length", "POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n", true},
	{"length with leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n", true},
	{"zero length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", true},
	{"lower-case names", "GET / HTTP/1.1\r\nhost: a\r\nuser-agent: x\r\ncontent-length: 0\r\nx-custom-thing: v\r\nconnection: keep-alive\r\n\r\n", true},
	{"mixed-case names", "GET / HTTP/1.1\r\nHOST: a\r\nX-FOO-bar: 1\r\nx_under_score: 2\r\nCONTENT-length: 0\r\n\r\n", true},
	{"repeated headers in order", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-B: q\r\nX-A: 2\r\nx-a: 3\r\nAccept: a\r\naccept: b\r\n\r\n", true},
	{"query string", "GET /p/q?a=1&b=two&c=%20 HTTP/1.1\r\nHost: a\r\n\r\n", false}, // % is an escape: net/http's
	{"plain query string", "GET /p/q?a=1&b=two&c=x/y:z HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"empty query", "GET /p? HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"empty header value", "GET / HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Blank: \r\n\r\n", true},
	{"trailing whitespace", "GET / HTTP/1.1\r\nHost: a \t\r\nX-A: v \t \r\nX-B:\t w\t\r\n\r\n", true},
	{"no space after colon", "GET / HTTP/1.1\r\nHost:a\r\nX-A:v\r\n\r\n", true},
	{"connection close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", true},
	{"connection close upper case", "GET / HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n", true},
	{"host with port", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", true},
	{"ipv6 host", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", true},
	{"sub-delims in path", "GET /a;b,c=d:e@f$g&h+i~j_k-l.m HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"path net/url keeps raw", "GET /a!b'c(d)e*f HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"query net/url keeps raw", "GET /a?b!c'd(e)f*g HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"dot inside a segment", "GET /a/b.json HTTP/1.1\r\nHost: a\r\n\r\n", true},
	{"common and rare names", "POST /x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\nCookie: a=b\r\nX-Request-Id: r1\r\nX-Model-Version: v2\r\nTraceparent: 00-1\r\nX-Other: o\r\nContent-Length: 2\r\n\r\n", true},

	// What h1 hands to net/http.
	{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\n", false},
	{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
	{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	{"chunked lower case", "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\n\r\n", false},
	{"expect continue", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", false},
	{"two content lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", false},
	{"content length with plus", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", false},
	{"content length negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", false},
	{"content length empty", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", false},
	{"content length too long", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n", false},
	{"content length with space inside", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", false},
	{"missing host", "GET / HTTP/1.1\r\nUser-Agent: x\r\n\r\n", false},
	{"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", false},
	{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
	{"host with odd bytes", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", false},
	{"escaped path", "GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"dot segment", "GET /a/../b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"single dot segment", "GET /./a HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"double slash", "GET //a HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"absolute form", "GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", false},
	{"host space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", false},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", false},
	{"obs-fold with tab", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", false},
	{"non-ASCII value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n", false},
	{"control byte in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01b\r\n\r\n", false},
	{"non-token name", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", false},
	{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", false},
	{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n", false},
	{"PUT", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
	{"HEAD", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"lower-case method", "get / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"connection upgrade", "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
	{"connection upgrade alone", "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", false},
	{"connection list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n", false},
	{"two connection lines", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false},
	{"te header", "GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n", false},
	{"trailer header", "POST / HTTP/1.1\r\nHost: a\r\nTrailer: X-A\r\nContent-Length: 1\r\n\r\n", false},
	{"pragma", "GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n", false},
	{"bare LF lines", "GET / HTTP/1.1\nHost: a\n\n", false},
	{"bare LF in a header", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", false},
	{"bare CR in a header", "GET / HTTP/1.1\r\nHost: a\rX-A: b\r\n\r\n", false},
	{"two spaces after method", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"space after proto", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", false},
	{"leading empty line", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"leading space on first header", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", false},
}

// parsedByH1 is the request h1 gives a handler for head, or nil when
// parseHead hands head over.
func parsedByH1(b []byte) *http.Request {
	var h head
	if !parseHead(b, &h) {
		return nil
	}
	return (&conn{}).request(&h, context.Background())
}

// parsedByNetHTTP is the request net/http's server gives a handler for
// head: http.ReadRequest's, which keeps the Host in Request.Host alone as
// the server does.
func parsedByNetHTTP(head []byte) (*http.Request, error) {
	return http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
}

// requestDiff lists where got (h1's) and want (net/http's) differ.
func requestDiff(got, want *http.Request) []string {
	var diff []string
	check := func(field string, g, w any) {
		if !reflect.DeepEqual(g, w) {
			diff = append(diff, fmt.Sprintf("%s = %#v, want %#v", field, g, w))
		}
	}
	check("Method", got.Method, want.Method)
	check("URL", got.URL.String(), want.URL.String())
	check("URL.Path", got.URL.Path, want.URL.Path)
	check("URL.RawPath", got.URL.RawPath, want.URL.RawPath)
	check("URL.RawQuery", got.URL.RawQuery, want.URL.RawQuery)
	check("URL.ForceQuery", got.URL.ForceQuery, want.URL.ForceQuery)
	check("URL.EscapedPath()", got.URL.EscapedPath(), want.URL.EscapedPath())
	check("Proto", got.Proto, want.Proto)
	check("ProtoMajor", got.ProtoMajor, want.ProtoMajor)
	check("ProtoMinor", got.ProtoMinor, want.ProtoMinor)
	check("Header", got.Header, want.Header)
	check("Host", got.Host, want.Host)
	check("ContentLength", got.ContentLength, want.ContentLength)
	check("Close", got.Close, want.Close)
	check("RequestURI", got.RequestURI, want.RequestURI)
	check("TransferEncoding", got.TransferEncoding, want.TransferEncoding)
	return diff
}

// netHTTPServes reports whether net/http's server takes r, which
// http.ReadRequest parsed: the server adds that an HTTP/1.1 request has a
// Host and that header names are tokens and values have no control
// bytes but tabs.
func netHTTPServes(r *http.Request) bool {
	if r.Host == "" {
		return false // no Host line (an empty one h1 hands over too)
	}
	for k, vs := range r.Header {
		if k == "" || !tokenName([]byte(k)) {
			return false
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
					return false
				}
			}
		}
	}
	return true
}

func TestParseHeadMatchesNetHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range headCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			head := []byte(tc.head)
			got := parsedByH1(head)
			if plain := got != nil; plain != tc.plain {
				t.Fatalf("parseHead(%q) = %v, want %v", tc.head, plain, tc.plain)
			}
			if got == nil {
				return
			}
			want, err := parsedByNetHTTP(head)
			if err != nil {
				t.Fatalf("parseHead accepts %q, http.ReadRequest: %v", tc.head, err)
			}
			if !netHTTPServes(want) {
				t.Errorf("parseHead accepts %q, which net/http's server refuses", tc.head)
			}
			for _, d := range requestDiff(got, want) {
				t.Error(d)
			}
		})
	}
}

// The strings of a parsed head do not share the caller's buffer: the
// connection reuses it for the next request.
func TestParseHeadCopiesBuffer(t *testing.T) {
	t.Parallel()
	b := []byte("POST /p?q=1 HTTP/1.1\r\nHost: a.example\r\nX-Custom-Thing: value\r\nContent-Length: 1\r\n\r\n")
	var h head
	if !parseHead(b, &h) {
		t.Fatalf("parseHead(%q) = false, want true", b)
	}
	for i := range b {
		b[i] = 'Z'
	}
	if got, want := h.target, "/p?q=1"; got != want {
		t.Errorf("target = %q, want %q", got, want)
	}
	if got, want := h.host, "a.example"; got != want {
		t.Errorf("host = %q, want %q", got, want)
	}
	if got, want := h.header.Get("X-Custom-Thing"), "value"; got != want {
		t.Errorf("X-Custom-Thing = %q, want %q", got, want)
	}
}

// One head struct serves a connection's requests in turn: nothing of a
// request stays for the next.
func TestParseHeadResetsHead(t *testing.T) {
	t.Parallel()
	var h head
	first := "POST /a?x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
	if !parseHead([]byte(first), &h) {
		t.Fatalf("parseHead(%q) = false, want true", first)
	}
	second := "GET /b HTTP/1.1\r\nHost: b\r\n\r\n"
	if !parseHead([]byte(second), &h) {
		t.Fatalf("parseHead(%q) = false, want true", second)
	}
	type fields struct {
		method, target, path, query, host string
		contentLength                     int64
		close                             bool
	}
	got := fields{h.method, h.target, h.path, h.query, h.host, h.contentLength, h.close}
	want := fields{method: "GET", target: "/b", path: "/b", host: "b"}
	if got != want {
		t.Errorf("second head = %+v, want %+v", got, want)
	}
	if len(h.header) != 0 {
		t.Errorf("second header = %v, want none", h.header)
	}
}

func TestParseHeadTooManyHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n     int
		plain bool
	}{{maxHeaders - 1, true}, {maxHeaders, false}, {maxHeaders + 50, false}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			b.WriteString("GET / HTTP/1.1\r\nHost: a\r\n")
			for i := range tc.n {
				fmt.Fprintf(&b, "X-H%d: %d\r\n", i, i)
			}
			b.WriteString("\r\n")
			var h head
			if got := parseHead([]byte(b.String()), &h); got != tc.plain {
				t.Errorf("parseHead of %d more headers = %v, want %v", tc.n, got, tc.plain)
			}
		})
	}
}
