package h1

import (
	"bytes"
	"net/http"
)

// parseFields parses the header lines of a head: rest, a suffix of b
// (whose copy is all), from the first line through the empty one. Each
// field goes to check first, which rejects what it does not take; a field
// named drop is checked but left out of the map. It reports false for a
// line outside the plain case: a name that is not a token, a value of
// other than visible ASCII, spaces and tabs, a continued line, or more
// than maxHeaders lines. Names and values are substrings of all.
func parseFields(b, rest []byte, all, drop string, check func(name, value string) bool) (http.Header, bool) {
	n := bytes.Count(rest, crlf) - 1
	if n < 0 || n > maxHeaders {
		return nil, false
	}
	vals := make([]string, n)
	hdr := make(http.Header, n)
	for i := 0; ; i++ {
		field, next, ok := bytes.Cut(rest, crlf)
		if !ok {
			return nil, false
		}
		if len(field) == 0 {
			return hdr, true
		}
		start := len(b) - len(rest)
		rest = next
		colon := bytes.IndexByte(field, ':')
		if colon <= 0 || !tokenName(field[:colon]) {
			return nil, false
		}
		vs, ve := colon+1, len(field)
		for vs < ve && (field[vs] == ' ' || field[vs] == '\t') {
			vs++
		}
		for ve > vs && (field[ve-1] == ' ' || field[ve-1] == '\t') {
			ve--
		}
		if !plainValue(field[vs:ve]) {
			return nil, false
		}
		name := canonicalName(field[:colon], all[start:start+colon])
		value := all[start+vs : start+ve]
		if !check(name, value) {
			return nil, false
		}
		if name == drop {
			continue
		}
		vals[i] = value
		if prev, ok := hdr[name]; ok {
			hdr[name] = append(prev, value)
		} else {
			hdr[name] = vals[i : i+1 : i+1]
		}
	}
}

// parseLength is the value of a Content-Length that digits accepted.
func parseLength(s string) int64 {
	var n int64
	for i := 0; i < len(s); i++ {
		n = n*10 + int64(s[i]-'0')
	}
	return n
}
