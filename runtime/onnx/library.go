package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"modelplane/serveapi"
)

// Version is the ONNX Runtime release scripts/install-deps.sh installs and
// the default library path is named after.
const Version = "1.30.0"

// LibraryEnv names the environment variable that overrides the library's
// path.
const LibraryEnv = "MP_ONNXRUNTIME_LIB"

// ErrNoLibrary means the ONNX Runtime shared library is not where this
// package looks for it.
var ErrNoLibrary = errors.New("onnx runtime library not found")

// LibraryPath is the ONNX Runtime shared library this process opens:
// $MP_ONNXRUNTIME_LIB when set, otherwise the file install-deps.sh writes
// under the user's cache directory.
func LibraryPath() (string, error) {
	if p := os.Getenv(LibraryEnv); p != "" {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("onnx runtime library: %w (set %s)", err, LibraryEnv)
	}
	return filepath.Join(dir, "modelplane", "onnxruntime-"+Version, "libonnxruntime.so.1"), nil
}

// checkLibrary turns a missing library file into ErrNoLibrary with the
// command that installs it, before dlopen would report it less clearly.
func checkLibrary(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w at %s (run scripts/install-deps.sh, or set %s): %v",
			ErrNoLibrary, path, LibraryEnv, err)
	}
	return nil
}

// Options tune a loaded model's session.
type Options struct {
	// IntraOpThreads is ONNX Runtime's thread count within one operator;
	// 0 means 1, since the runtime process is pinned to its cores and
	// batches, not threads, are its parallelism.
	IntraOpThreads int
}

// Load opens the ONNX model at path with the default Options.
func Load(path string) (serveapi.Model, error) {
	return LoadWithOptions(path, Options{})
}
