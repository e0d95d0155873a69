package h1

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
)

// head is a parsed request head of the plain case.
type head struct {
	method, target, path, query string
	host                        string
	header                      http.Header
	contentLength               int64
	close                       bool
}

// parseHead parses b, a request head through its empty line, into h, or
// reports false for anything outside the plain case (doc.go), which
// net/http then serves. The strings of h share one copy of b.
func parseHead(b []byte, h *head) bool {
	line, rest, ok := bytes.Cut(b, crlf)
	if !ok {
		return false
	}
	method, line, ok := bytes.Cut(line, sp)
	if !ok {
		return false
	}
	switch string(method) {
	case http.MethodGet:
		h.method = http.MethodGet
	case http.MethodPost:
		h.method = http.MethodPost
	default:
		return false
	}
	target, proto, ok := bytes.Cut(line, sp)
	if !ok || string(proto) != "HTTP/1.1" || !plainTarget(target) {
		return false
	}
	// One string for the whole head: every name and value below is a
	// substring of it, as net/http's reader does for values.
	all := string(b)
	h.target = all[len(method)+1 : len(method)+1+len(target)]
	h.path, h.query, _ = strings.Cut(h.target, "?")
	h.contentLength, h.close, h.host = 0, false, ""
	seenHost, seenLength, seenConnection := false, false, false
	hdr, ok := parseFields(b, rest, all, "Host", func(name, value string) bool {
		switch name {
		case "Host":
			// net/http keeps the host in Request.Host alone.
			if seenHost || !plainHost(value) {
				return false
			}
			seenHost, h.host = true, value
		case "Content-Length":
			if seenLength || !digits(value) {
				return false
			}
			seenLength, h.contentLength = true, parseLength(value)
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Pragma":
			return false
		case "Connection":
			if seenConnection {
				return false
			}
			seenConnection = true
			var ok bool
			h.close, ok = connection(value)
			return ok
		}
		return true
	})
	if !ok || !seenHost || h.host == "" {
		return false
	}
	h.header = hdr
	return true
}

// connection reads a Connection value of the plain case: "close" or
// "keep-alive" alone; ok is false for anything else (a list, an upgrade).
func connection(value string) (closes, ok bool) {
	switch {
	case strings.EqualFold(value, "close"):
		return true, true
	case strings.EqualFold(value, "keep-alive"):
		return false, true
	}
	return false, false
}

// maxHeaders is the most header lines a plain head has.
const maxHeaders = 100

// maxLength bounds a Content-Length's digits so that it fits an int64.
const maxLength = 18

var (
	crlf = []byte("\r\n")
	sp   = []byte(" ")
)

// plainTarget reports whether t is a path (and query) that url.Parse
// leaves as it is: it starts with a slash, has no escape, fragment or
// dot segment, and only bytes a path may carry unescaped.
func plainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' || len(t) > 2048 {
		return false
	}
	query := false
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '?':
			if query {
				return false
			}
			query = true
		case strings.IndexByte("/-._~$&+,;=:@", c) >= 0, query && strings.IndexByte("!'()*", c) >= 0:
			// "!'()*" stay out of the path: net/url keeps a path with
			// them as RawPath too.
			// A dot segment or a double slash is cleaned by ServeMux
			// with a redirect: net/http's path there.
			if !query && c == '/' && i+1 < len(t) && (t[i+1] == '/' || t[i+1] == '.') {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// plainHost reports whether s is a host and port of the bytes names and
// addresses use.
func plainHost(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-:[]_", c) >= 0) {
			return false
		}
	}
	return true
}

// tokenName reports whether b is a header name of token characters.
func tokenName(b []byte) bool {
	for _, c := range b {
		if !tokenByte[c] {
			return false
		}
	}
	return true
}

// plainValue reports whether b is visible ASCII, spaces and tabs.
func plainValue(b []byte) bool {
	for _, c := range b {
		if !valueByte[c] {
			return false
		}
	}
	return true
}

// tokenByte and valueByte are the bytes of a token (a header name) and of
// a plain header value.
var tokenByte, valueByte = func() (token, value [256]bool) {
	for c := range 256 {
		token[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
		value[c] = c >= ' ' && c <= '~' || c == '\t'
	}
	return token, value
}()

// digits reports whether s is a decimal of at most maxLength digits.
func digits(s string) bool {
	if len(s) == 0 || len(s) > maxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// canonicalName is name in its canonical form: s (name as a string) when
// it is canonical already, a constant for the names requests carry most
// in lower case (as HTTP/2-minded clients send them), and a new string
// otherwise.
func canonicalName(name []byte, s string) string {
	if canonical(name) {
		return s
	}
	if c, ok := commonNames[string(name)]; ok {
		return c
	}
	return http.CanonicalHeaderKey(s)
}

// canonical reports whether name is already in canonical form.
func canonical(name []byte) bool {
	upper := true
	for _, c := range name {
		if upper && c >= 'a' && c <= 'z' || !upper && c >= 'A' && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// commonNames maps the lower-case spellings of the names most requests
// and answers carry to their canonical form, so that they cost no string.
var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Connection",
		"Content-Length", "Content-Type", "Cookie", "Host", "Origin", "Referer", "Traceparent", "Tracestate",
		"User-Agent", "X-Forwarded-For", "X-Model-Version", "X-Model-Version-Shadow", "X-Request-Id", "X-User-Id",
		"Date", "Server", "Keep-Alive", "Vary", "Cache-Control", "Content-Encoding"} {
		m[strings.ToLower(n)] = n
	}
	return m
}()

// requestURL is the URL net/http parses from a plain target.
func requestURL(h *head) *url.URL {
	return &url.URL{Path: h.path, RawQuery: h.query, ForceQuery: h.query == "" && strings.HasSuffix(h.target, "?")}
}
