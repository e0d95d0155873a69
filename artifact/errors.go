package artifact

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// ErrRejected is wrapped by every refusal of an upload for its content or its
// manifest: a format that is not accepted, pickle content, a bad manifest
// path, a digest mismatch, a missing or extra file, an unsafe archive entry.
// Callers answer it with 400 or 422 and the error's message.
var ErrRejected = errors.New("artifact rejected")

// ErrTooLarge is wrapped when a file or a whole upload exceeds its size limit.
// Callers answer it with 413 and the error's message.
var ErrTooLarge = errors.New("artifact too large")

// ErrNotFound is wrapped when a blob is not in the store.
var ErrNotFound = errors.New("blob not found")

// ErrCorrupt is wrapped when a stored blob no longer hashes to its digest.
var ErrCorrupt = errors.New("blob corrupt")

// A Rejection is a refusal caused by what was uploaded. Its message is
// lower-case and names the file, for example
// "model.safetensors: pickle content is not accepted (raw pickle protocol 4)",
// and is safe to show to the uploader. It wraps ErrRejected or ErrTooLarge.
type Rejection struct {
	// Path is the file, manifest entry or archive entry concerned; it is
	// empty when the refusal is about the manifest or the upload as a whole.
	Path string
	// Reason says what is wrong, without the path.
	Reason string

	kind error
}

// Error returns "path: reason", quoting the path when it holds characters
// that should not reach a log line or a page unescaped.
func (r *Rejection) Error() string {
	if r.Path == "" {
		return r.Reason
	}
	return displayPath(r.Path) + ": " + r.Reason
}

// Unwrap returns ErrRejected or ErrTooLarge.
func (r *Rejection) Unwrap() error { return r.kind }

func reject(path, format string, args ...any) error {
	return &Rejection{Path: path, Reason: fmt.Sprintf(format, args...), kind: ErrRejected}
}

func tooLarge(path, format string, args ...any) error {
	return &Rejection{Path: path, Reason: fmt.Sprintf(format, args...), kind: ErrTooLarge}
}

// withPath sets the path of a rejection that was made without one.
func withPath(err error, path string) error {
	var r *Rejection
	if errors.As(err, &r) && r.Path == "" {
		c := *r
		c.Path = path
		return &c
	}
	return err
}

func displayPath(p string) string {
	if p == "" || strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) || r == '"' }) >= 0 {
		return strconv.Quote(p)
	}
	return p
}
