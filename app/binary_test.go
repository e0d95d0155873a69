package app

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The modelplane binary, built once per test run into a directory any user
// may enter: runtimes run as nobody when the tests run as root.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// modelplaneBinary builds cmd/modelplane once and returns its path.
func modelplaneBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "modelplane-bin-"); binErr != nil {
			return
		}
		if binErr = os.Chmod(binDir, 0o755); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "modelplane")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/modelplane").CombinedOutput(); err != nil {
			binErr = &buildError{err: err, out: string(out)}
		}
	})
	if binErr != nil {
		t.Fatalf("build modelplane: %v", binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// removeBinary removes what modelplaneBinary built; TestMain calls it.
func removeBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}
