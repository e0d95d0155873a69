package gateway_test

import (
	"runtime/debug"
	"testing"

	"modelplane/gateway"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, tc := range []struct {
		name, env string
		set       int // the percent in force before, as GOGC would have set it
		want      int
	}{
		{"GOGC unset", "", 100, gateway.DefaultGCPercent},
		{"GOGC set", "150", 150, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			debug.SetGCPercent(tc.set)
			if got := gateway.TuneGC(); got != tc.want {
				t.Errorf("TuneGC() = %d, want %d", got, tc.want)
			}
			if got := debug.SetGCPercent(tc.want); got != tc.want {
				t.Errorf("GC percent in force = %d, want %d", got, tc.want)
			}
		})
	}
}
