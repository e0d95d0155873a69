package money_test

import (
	"math"
	"testing"

	"modelplane/money"
)

func TestUSD(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "0.000000", 1: "0.000001", 1_234_567_890: "1234.567890", -5: "-0.000005"} {
		if got := money.USD(in); got != want {
			t.Errorf("USD(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestDollars: the display figure rounds half a cent up (away from zero),
// groups thousands, and shows no sign for what rounds to zero.
func TestDollars(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		0: "0.00", 4_999: "0.00", 5_000: "0.01", 8_500_000: "8.50", 10_254_999: "10.25", 10_255_000: "10.26",
		1_234_567_890: "1,234.57", 999_999_995_000: "1,000,000.00", -5_000: "-0.01", -4_999: "0.00",
		-1_234_567_890: "-1,234.57", math.MinInt64: "-9,223,372,036,854.78",
	} {
		if got := money.Dollars(in); got != want {
			t.Errorf("Dollars(%d) = %q, want %q", in, got, want)
		}
	}
}
