package drift

import (
	"testing"
	"time"
)

func TestParseSpan(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in        string
		versioned bool
		want      Span
		bad       bool
	}{
		{in: "", want: Span{}},
		{in: "1h", want: Span{Last: time.Hour}},
		{in: "7d", want: Span{Last: 7 * 24 * time.Hour}},
		{in: "v23@7d", versioned: true, want: Span{Version: "v23", Last: 7 * 24 * time.Hour}},
		{in: "2026-11-01T00:00:00Z/2026-11-08T00:00:00Z", want: Span{From: from, To: from.Add(7 * 24 * time.Hour)}},
		{in: "v1@2026-11-01T00:00:00+01:00/2026-11-02T00:00:00+01:00", versioned: true,
			want: Span{Version: "v1", From: from.Add(-time.Hour), To: from.Add(23 * time.Hour)}},
		{in: "v23@7d", bad: true},
		{in: "@7d", versioned: true, bad: true},
		{in: "30s", bad: true},
		{in: "100d", bad: true},
		{in: "-1h", bad: true},
		{in: "0d", bad: true},
		{in: "soon", bad: true},
		{in: "2026-11-08T00:00:00Z/2026-11-01T00:00:00Z", bad: true},
		{in: "2026-11-01/2026-11-08", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseSpan(tt.in, tt.versioned)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseSpan(%q) = %+v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSpan(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseSpan(f *testing.F) {
	for _, s := range []string{"1h", "7d", "v23@7d", "2026-11-01T00:00:00Z/2026-11-08T00:00:00Z", "@", "/", "1d/"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, versioned bool) {
		sp, err := ParseSpan(s, versioned)
		if err != nil {
			return
		}
		w := sp.window("v", time.Now())
		if s != "" && (!w.From.Before(w.To) || w.To.Sub(w.From) > MaxWindow) {
			t.Fatalf("ParseSpan(%q) accepted window %v..%v", s, w.From, w.To)
		}
		if !versioned && sp.Version != "" {
			t.Fatalf("ParseSpan(%q, false) named version %q", s, sp.Version)
		}
	})
}
