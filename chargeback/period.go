package chargeback

import (
	"time"

	"modelplane/field"
)

// ParseTime reads a period bound: RFC 3339 ("2026-10-01T00:00:00Z") or a
// date ("2026-10-01", midnight UTC).
func ParseTime(name, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	var errs field.Errors
	errs.Add(name, "must be an RFC 3339 time or a date (2026-10-01)")
	return time.Time{}, errs
}

// Month returns the calendar month (UTC) that contains t, as [from, to).
func Month(t time.Time) (from, to time.Time) {
	t = t.UTC()
	from = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return from, from.AddDate(0, 1, 0)
}

// ThisMonth is the month to date: from the first of now's month to now,
// rounded down to the second.
func ThisMonth(now time.Time) (from, to time.Time) {
	from, _ = Month(now)
	return from, now.UTC().Truncate(time.Second)
}

// LastMonth is the whole calendar month before now's.
func LastMonth(now time.Time) (from, to time.Time) {
	cur, _ := Month(now)
	return Month(cur.Add(-time.Second))
}
