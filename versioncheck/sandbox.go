package versioncheck

import (
	"fmt"
	"os"

	"modelplane/runtime/onnx"
)

// DefaultSandboxID is the uid and gid a validation child runs as when the
// control plane runs as root and Config names none: nobody/nogroup on
// Debian, which owns no file of the control plane.
const DefaultSandboxID = 65534

// The descriptors a child is handed its files on: the model directory
// (its --model-dir is /proc/self/fd/3), the ONNX Runtime library
// (/proc/self/fd/4) and the modelplane binary itself (/proc/self/fd/5). A /proc/self/fd link reaches the open file itself,
// not through its path, so the child needs neither a path its own user
// may traverse (the work directory's parents, the default library under
// the control plane's home) nor the control plane's environment.
// The binary is run through its descriptor too, so it may live where the
// sandbox user cannot reach (a test binary in a 0700 build directory,
// `go run`'s cache under the home directory).
const (
	childDirFD     = 3
	childLibraryFD = 4
	childBinaryFD  = 5
)

// childDir is the model directory as the child names it.
var childDir = fmt.Sprintf("/proc/self/fd/%d", childDirFD)

// Limits of the child besides its address space (RunChild sets them on
// itself before it reads any file of the version).
const (
	childMaxFiles     = 128     // RLIMIT_NOFILE: the model's files, the library, pipes
	childMaxProcesses = 256     // RLIMIT_NPROC: threads count; the child's own user only
	childMaxFileBytes = 1 << 20 // RLIMIT_FSIZE: the child writes no file
)

// childEnv is the whole environment of a validation child: nothing of the
// control plane's (MP_DATABASE_URL, MP_OIDC_CLIENT_SECRET, MP_AGENT_TOKEN,
// MP_NATS_*), only where the ONNX Runtime library is when lib is open.
func childEnv(lib *os.File) []string {
	if lib == nil {
		return []string{}
	}
	return []string{fmt.Sprintf("%s=/proc/self/fd/%d", onnx.LibraryEnv, childLibraryFD)}
}

// openLibrary opens the ONNX Runtime library the control plane would load,
// to hand to the child; nil when there is none (the child then reports
// ONNX models as unavailable, as the control plane would).
func openLibrary() *os.File {
	p, err := onnx.LibraryPath()
	if err != nil {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	return f
}
