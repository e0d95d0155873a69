// Package promcheck checks what modelplane's processes expose to
// Prometheus with Prometheus's own linter, promtool (Debian's prometheus
// package; scripts/install-deps.sh installs it for `make test`): names in
// base units with _total on counters, help on every family, no invalid
// exposition. Runtime-native families that keep another project's names
// (Triton's nv_*, vLLM's vllm:*) are not modelplane's to rename, so callers
// check only modelplane's own processes.
package promcheck

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// Metrics fails t with promtool's findings on text, the body of a
// /metrics answer.
func Metrics(t testing.TB, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promcheck: promtool not found: install the prometheus package (scripts/install-deps.sh test does)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}
