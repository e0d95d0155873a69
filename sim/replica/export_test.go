package replica

// NewTestEngine exposes the test double to the external tests, which run it
// through enginetest.Check (an internal test cannot: enginetest imports
// replica).
func NewTestEngine() Engine { return newTestEngine() }
