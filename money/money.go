package money

import (
	"fmt"
	"strconv"
	"strings"
)

// USD writes micro-USD as an exact decimal of dollars with six places
// ("1234.500000"), the form the API and the CSV carry.
func USD(uusd int64) string {
	neg := uusd < 0
	if neg {
		uusd = -uusd
	}
	s := fmt.Sprintf("%d.%06d", uusd/1_000_000, uusd%1_000_000)
	if neg {
		s = "-" + s
	}
	return s
}

// Dollars writes micro-USD for people to read: dollars and cents, rounded
// half up (half a cent away from zero), with thousands separators and no
// currency sign ("1,234.57"); callers put the "$" where the text needs it.
// It is the one display rounding of the portal, the budget alerts and the
// fleet's budget holds; USD is the exact figure the API and the CSV carry.
func Dollars(uusd int64) string {
	neg := uusd < 0
	u := uint64(uusd)
	if neg {
		u = -u
	}
	cents := (u + 5_000) / 10_000
	whole := strconv.FormatUint(cents/100, 10)
	var b strings.Builder
	if neg && cents > 0 {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	fmt.Fprintf(&b, ".%02d", cents%100)
	return b.String()
}
