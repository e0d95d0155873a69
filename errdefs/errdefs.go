package errdefs

import "errors"

// ErrNotFound means the object does not exist or is not visible to the
// caller's teams; callers cannot and must not tell the two apart (both answer
// 404).
var ErrNotFound = errors.New("not found")

// ErrConflict means the change collides with an object that already exists,
// typically a unique constraint refusing the write (409).
var ErrConflict = errors.New("already exists")
