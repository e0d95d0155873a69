package cli

import "testing"

// TestHasEveryCommandAndGlobalFlag: main hands the command line to the
// client when Has says so, so every command of the root (help aside) and
// every global flag placed first must be known, or the binary would refuse
// a verb the client has (as it did `chat` and `--key K nodes list`).
func TestHasEveryCommandAndGlobalFlag(t *testing.T) {
	root := (&app{env: Env{Getenv: func(string) string { return "" }}}).root()
	for _, c := range root.Commands() {
		if c.Name() != "help" && !Has(c.Name()) {
			t.Errorf("command %q is not one main hands to the client", c.Name())
		}
	}
	for _, w := range []string{"--key", "--key=mpk_x", "--api", "-o", "--output=json", "--context", "--gateway", "--tls-ca"} {
		if !Has(w) {
			t.Errorf("global flag %q first is not handed to the client", w)
		}
	}
	for _, w := range []string{"dev", "server", "agent", "runtime", "bench", "-h", "--help", "--port"} {
		if Has(w) {
			t.Errorf("%q is handed to the client; it is the platform's", w)
		}
	}
}
