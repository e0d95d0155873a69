package drift

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window parameters of the report (GET …/drift?reference=…&current=…):
//
//	DURATION            the DURATION before now, e.g. 1h, 90m, 7d (Go
//	                    durations plus a whole number of days "d")
//	FROM/TO             a pinned period, two RFC 3339 times, e.g.
//	                    2026-11-01T00:00:00Z/2026-11-08T00:00:00Z
//	VERSION@…           (reference only) the reference's version, e.g.
//	                    v23@7d; without it the stable version
//
// A window is at least a minute and at most MaxWindow long.
const MaxWindow = 92 * 24 * time.Hour

// Span is a parsed window parameter: a pinned period (From, To) or a
// length ending at the time of the request.
type Span struct {
	Version  string
	From, To time.Time
	Last     time.Duration
}

// ParseSpan parses a window parameter; versioned allows the VERSION@
// prefix. The empty string is the zero Span (callers apply defaults).
func ParseSpan(s string, versioned bool) (Span, error) {
	var sp Span
	if s == "" {
		return sp, nil
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		if !versioned {
			return Span{}, fmt.Errorf("%q: only the reference names a version", s)
		}
		sp.Version, s = s[:i], s[i+1:]
		if sp.Version == "" || len(sp.Version) > 128 {
			return Span{}, fmt.Errorf("%q: empty or overlong version before @", sp.Version)
		}
	}
	if from, to, ok := strings.Cut(s, "/"); ok {
		f, err := time.Parse(time.RFC3339, from)
		if err != nil {
			return Span{}, fmt.Errorf("%q: start is not an RFC 3339 time", from)
		}
		t, err := time.Parse(time.RFC3339, to)
		if err != nil {
			return Span{}, fmt.Errorf("%q: end is not an RFC 3339 time", to)
		}
		if d := t.Sub(f); d < time.Minute || d > MaxWindow {
			return Span{}, fmt.Errorf("%q: the period must be between a minute and %d days", s, MaxWindow/(24*time.Hour))
		}
		sp.From, sp.To = f.UTC(), t.UTC()
		return sp, nil
	}
	d, err := parseLength(s)
	if err != nil {
		return Span{}, err
	}
	if d < time.Minute || d > MaxWindow {
		return Span{}, fmt.Errorf("%q: the length must be between a minute and %d days", s, MaxWindow/(24*time.Hour))
	}
	sp.Last = d
	return sp, nil
}

func parseLength(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 || days > 366 {
			return 0, fmt.Errorf("%q: not a whole number of days", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: not a duration (1h, 90m, 7d) or a FROM/TO period", s)
	}
	return d, nil
}

// window turns sp into [From, To) ending at end when it is a length.
func (sp Span) window(version string, end time.Time) Window {
	if sp.Last > 0 {
		return Window{Version: version, From: end.Add(-sp.Last), To: end}
	}
	return Window{Version: version, From: sp.From, To: sp.To}
}
