package h1

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of a request: an answer is held
// until it ends or outgrows maxPending (it is then framed with a
// Content-Length), or until it is flushed or outgrows it (chunked, unless
// the handler set a Content-Length).
type response struct {
	c      *conn
	header http.Header
	status int
	// head is the header lines as they were at WriteHeader (net/http
	// ignores later changes too), framing and Date aside.
	head []byte
	// sent: the head is written; chunked: the body is framed in chunks.
	sent, chunked bool
	// length is the Content-Length the handler set, -1 for none; written
	// counts the body bytes written.
	length, written int64
	// typed, dated: the handler set a Content-Type (or an encoding, which
	// nothing sniffs) and a Date.
	typed, dated bool
	pending      []byte
	closeAfter   bool
	err          error
}

func (w *response) reset(c *conn, out *outBuffers) {
	h := w.header
	if h == nil {
		h = make(http.Header, 8)
	}
	clear(h)
	*w = response{c: c, header: h, length: -1, pending: out.pending, head: out.head}
}

func (w *response) Header() http.Header { return w.header }

// WriteHeader takes the status and the header lines as they are now.
func (w *response) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	if status < 100 || status > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(status))
	}
	if status < 200 {
		// 1xx: net/http writes them at once and keeps the handler's
		// status to come; nothing h1 serves sends one.
		return
	}
	w.status = status
	h := w.header
	if cl := h["Content-Length"]; len(cl) > 0 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			w.length = n
		}
	}
	_, w.typed = h["Content-Type"]
	w.typed = w.typed || h.Get("Content-Encoding") != ""
	_, w.dated = h["Date"]
	if strings.EqualFold(h.Get("Connection"), "close") {
		w.closeAfter = true
	}
	var keys [32]string
	ks := keys[:0]
	for k := range h {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue
		case "Content-Type":
			// net/http drops a Content-Type from a 304
			// (suppressedHeaders, RFC 7232 section 4.1).
			if status == http.StatusNotModified {
				continue
			}
		}
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		if !validName(k) {
			continue
		}
		for _, v := range h[k] {
			w.head = append(w.head, k...)
			w.head = append(w.head, ": "...)
			w.head = appendValue(w.head, v)
			w.head = append(w.head, "\r\n"...)
		}
	}
}

// errBodyNotAllowed and errContentLength are net/http's words for the
// same misuse.
var (
	errBodyNotAllowed = http.ErrBodyNotAllowed
	errContentLength  = http.ErrContentLength
)

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, errBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, errContentLength
	}
	w.written += int64(len(p))
	if !w.sent {
		if len(w.pending)+len(p) <= maxPending {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.writeHead(false, p)
		if w.err != nil {
			return 0, w.err
		}
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// WriteString lets io.WriteString skip a copy.
func (w *response) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

// FlushError sends what is written so far.
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	if !w.sent {
		w.writeHead(false, nil)
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
	return w.err
}

// Flush is http.Flusher's.
func (w *response) Flush() { _ = w.FlushError() }

// SetReadDeadline sets the deadline of the reads from the connection
// from now on: a body already in the buffer is read whatever it says.
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.setReadDeadline(t)
	return nil
}

func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// EnableFullDuplex is accepted: h1 never reads a body behind the handler's
// back, so reading and writing may already interleave.
func (w *response) EnableFullDuplex() error { return nil }

// finish ends the answer after the handler returned, reporting whether it
// went out whole; keep says whether the connection serves another request.
func (w *response) finish(keep bool) bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return false
	}
	w.closeAfter = w.closeAfter || !keep
	if !w.sent {
		w.writeHead(true, nil)
	}
	if w.chunked {
		w.writeRaw("0\r\n\r\n")
	}
	if w.length >= 0 && w.written != w.length && bodyAllowed(w.status) {
		// Fewer bytes than the Content-Length promised: the client
		// would wait for the rest, so the connection ends.
		w.closeAfter = true
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
	return w.err == nil
}

// writeHead writes the status line and headers, then what is pending;
// final says the handler is done, so that a length can be given; next is
// the body written after what is pending, if any.
func (w *response) writeHead(final bool, next []byte) {
	w.sent = true
	bw := w.c.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_, _ = bw.WriteString(statusLine(w.status))
	_, _ = bw.Write(w.head)
	allowed := bodyAllowed(w.status)
	if sniff := w.pending; allowed && len(sniff)+len(next) > 0 && !w.typed {
		// net/http sniffs the body's first sniffLen bytes, also
		// when they came in a write too large to be held (pending was
		// empty and the answer went out with no Content-Type) or that
		// completes a short pending start.
		if len(sniff) < sniffLen && len(next) > 0 {
			sniff = append(sniff[:len(sniff):len(sniff)], next[:min(len(next), sniffLen-len(sniff))]...)
		}
		_, _ = bw.WriteString("Content-Type: ")
		_, _ = bw.WriteString(http.DetectContentType(sniff))
		_, _ = bw.WriteString("\r\n")
	}
	switch {
	case !allowed:
	case w.length >= 0:
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], w.length, 10))
		_, _ = bw.WriteString("\r\n")
	case final:
		w.length = int64(len(w.pending))
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], w.length, 10))
		_, _ = bw.WriteString("\r\n")
	default:
		w.chunked = true
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !w.dated {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.WriteString(date())
		_, _ = bw.WriteString("\r\n")
	}
	if w.closeAfter || w.c.s.closing.Load() {
		w.closeAfter = true
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		w.writeBody(w.pending)
		w.pending = w.pending[:0]
	}
}

// sniffLen is the most of a body http.DetectContentType looks at.
const sniffLen = 512

// writeBody writes p as the body, in a chunk when chunked.
func (w *response) writeBody(p []byte) {
	bw := w.c.bw
	if w.chunked {
		_, _ = bw.Write(strconv.AppendInt(w.c.num[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.Write(p)
	if w.chunked {
		_, _ = bw.WriteString("\r\n")
	}
	// A bufio.Writer keeps its first error.
	if _, err := bw.Write(nil); err != nil {
		w.err = err
	}
}

func (w *response) writeRaw(s string) {
	if _, err := w.c.bw.WriteString(s); err != nil {
		w.err = err
	}
}

// bodyAllowed reports whether an answer of status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// statusLine is the rest of the status line of code, CRLF included.
func statusLine(code int) string {
	if code >= 0 && code < len(statusLines) && statusLines[code] != "" {
		return statusLines[code]
	}
	// statusLines holds every code with a text; net/http writes
	// "299 status code 299" for one with none, not "299 " (its
	// writeStatusLine).
	return fmt.Sprintf("%03d status code %d\r\n", code, code)
}

var statusLines = func() []string {
	s := make([]string, 600)
	for code := range s {
		if text := http.StatusText(code); text != "" {
			s[code] = strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return s
}()

// validName reports whether k may be written as a header name.
func validName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenByte[k[i]] {
			return false
		}
	}
	return true
}

// appendValue appends v with CR, LF and NUL as spaces, then trimmed, as
// net/http writes values, so that no value can end the head.
func appendValue(b []byte, v string) []byte {
	start := len(b)
	b = append(b, v...)
	for i := start; i < len(b); i++ {
		if c := b[i]; c == '\r' || c == '\n' || c == 0 {
			b[i] = ' '
		}
	}
	end := len(b)
	for end > start && (b[end-1] == ' ' || b[end-1] == '\t') {
		end--
	}
	lead := start
	for lead < end && (b[lead] == ' ' || b[lead] == '\t') {
		lead++
	}
	n := copy(b[start:], b[lead:end])
	return b[:start+n]
}

// date is the Date header's value, formatted once a second.
func date() string {
	now := time.Now()
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &dateText{sec: sec, text: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var lastDate atomic.Pointer[dateText]
