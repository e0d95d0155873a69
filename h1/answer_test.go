package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// answerCases are answers as a replica sends them, each followed by the
// next answer's first bytes ("NEXT"), which both readers must leave
// unread.
var answerCases = []struct {
	name, answer string
	plain        bool // read by parseAnswer itself, not by http.ReadResponse
}{
	{"json", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\":[1,2]}", true},
	{"no reason", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", true},
	{"odd reason", "HTTP/1.1 299 Fine By Us\r\nContent-Length: 0\r\n\r\n", true},
	{"empty body", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nX-Request-Id: r1\r\n\r\n", true},
	{"lower-case and repeated names", "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-a: 1\r\nX-A: 2\r\nx-b:  spaced \t\r\n\r\nabc", true},
	{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", true},
	{"keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", true},
	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
	{"no length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", false},
	{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", false},
	{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", false},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"204", "HTTP/1.1 204 No Content\r\n\r\n", false},
	{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false},
	{"100 continue", "HTTP/1.1 100 Continue\r\n\r\n", false},
	{"folded line", "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 1\r\n\r\nx", false},
	{"bad name", "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 1\r\n\r\nx", false},
	{"non-ASCII value", "HTTP/1.1 200 OK\r\nX-A: \xc3\xa9\r\nContent-Length: 1\r\n\r\nx", false},
	{"connection upgrade", "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 1\r\n\r\nx", false},
	{"trailer", "HTTP/1.1 200 OK\r\nTrailer: X-T\r\nContent-Length: 1\r\n\r\nx", false},
	{"short status", "HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"status word", "HTTP/1.1 2OO OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", true},
	{"head cut short", "HTTP/1.1 200 OK\r\nContent-Len", false},
}

// read is what a reader made of an answer: its fields, body and what it
// left unread, or its error.
type read struct {
	status        string
	code          int
	proto         string
	header        http.Header
	contentLength int64
	close         bool
	body          string
	bodyErr       bool
	rest          string
	err           bool
}

func readWith(b []byte, readResponse func(*bufio.Reader) (*http.Response, error)) read {
	br := bufio.NewReaderSize(bytes.NewReader(b), 64)
	resp, err := readResponse(br)
	if err != nil {
		return read{err: true}
	}
	body, berr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	rest, _ := io.ReadAll(br)
	r := read{status: resp.Status, code: resp.StatusCode, proto: resp.Proto, header: resp.Header,
		contentLength: resp.ContentLength, close: resp.Close, body: string(body), bodyErr: berr != nil}
	if berr == nil {
		r.rest = string(rest)
	}
	return r
}

func netHTTPRead(br *bufio.Reader) (*http.Response, error) { return http.ReadResponse(br, nil) }

func TestReadResponseIsNetHTTPs(t *testing.T) {
	t.Parallel()
	for _, tc := range answerCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := []byte(tc.answer + "NEXT")
			got, want := readWith(b, ReadResponse), readWith(b, netHTTPRead)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ReadResponse read\n%+v\nhttp.ReadResponse read\n%+v", got, want)
			}
			end := bytes.Index(b, headEnd)
			_, plain := parseAnswer(b[:max(end+len(headEnd), 0)])
			if end < 0 {
				plain = false
			}
			if plain != tc.plain {
				t.Errorf("parseAnswer took it: %v, want %v", plain, tc.plain)
			}
		})
	}
}

// TestReadResponseHeadLongerThanBuffer: a head that does not fit the
// reader's buffer is http.ReadResponse's.
func TestReadResponseHeadLongerThanBuffer(t *testing.T) {
	t.Parallel()
	b := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\nokNEXT", bytes.Repeat([]byte("a"), 200))
	got, want := readWith(b, ReadResponse), readWith(b, netHTTPRead)
	if !reflect.DeepEqual(got, want) || got.body != "ok" {
		t.Errorf("ReadResponse read\n%+v\nhttp.ReadResponse read\n%+v", got, want)
	}
}

// FuzzReadResponse holds ReadResponse to http.ReadResponse on any input.
func FuzzReadResponse(f *testing.F) {
	for _, tc := range answerCases {
		f.Add([]byte(tc.answer + "NEXT"))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := readWith(b, ReadResponse), readWith(b, netHTTPRead)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("on %q ReadResponse read\n%+v\nhttp.ReadResponse read\n%+v", b, got, want)
		}
	})
}
