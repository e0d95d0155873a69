package scenario

import (
	"errors"
	"testing"
)

// FuzzParse checks that any input either fails with ErrInvalidScenario or
// gives a valid scenario that Marshal writes back to the same scenario.
// The corpus under testdata/fuzz/FuzzParse holds the example file, the
// built-ins and some near misses; minimal is added here.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("error %v does not wrap ErrInvalidScenario", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed scenario fails Validate: %v", err)
		}
		pages := 0
		for _, v := range s.Versions {
			pages += v.GPUs * v.Profile.Pages()
		}
		if s.GPUs() <= 8 && pages <= 1<<16 && s.Arrivals.Rate*s.Duration.Seconds() <= 1e5 {
			if _, err := newFleet(s); err != nil {
				t.Fatalf("a valid scenario builds no fleet: %v", err)
			}
		}
		roundTrip(t, s)
	})
}
