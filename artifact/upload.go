package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Default limits, used for a Limits field left at zero.
const (
	DefaultMaxFileBytes  int64 = 64 << 30
	DefaultMaxTotalBytes int64 = 256 << 30
)

// Limits bound the size of one upload. A zero field means its default.
type Limits struct {
	// MaxFileBytes is the largest single file.
	MaxFileBytes int64
	// MaxTotalBytes is the largest sum of the files of one version.
	MaxTotalBytes int64
}

func (l Limits) file() int64 {
	if l.MaxFileBytes <= 0 {
		return DefaultMaxFileBytes
	}
	return l.MaxFileBytes
}

func (l Limits) total() int64 {
	if l.MaxTotalBytes <= 0 {
		return DefaultMaxTotalBytes
	}
	return l.MaxTotalBytes
}

// An Upload collects the files of one model version against its manifest:
// each file must be listed, arrive once, pass Detect and hash to its listed
// digest. The blobs it stores are held, so that no failed upload removes
// them, until the caller ends it: with Release once a version references
// them, with Discard when no version will. An Upload is not safe for
// concurrent use.
type Upload struct {
	store    *Store
	manifest Manifest
	limits   Limits
	err      error // a manifest that does not validate
	blobs    map[string]Blob
	held     []string // digests of the blobs stored, one per Put, refused ones too
	size     int64
	done     bool
	ended    bool
}

// A Result is a complete upload.
type Result struct {
	// Files maps each manifest path to its stored blob.
	Files map[string]Blob
	// Size is the sum of the file sizes.
	Size int64
	// Format is the version's model format: the model format
	// (safetensors, onnx, gguf, xgboost-json, lightgbm) holding the most
	// bytes. When no file holds a model it is json or text, and the caller
	// decides whether a version of configs alone makes sense.
	Format Format
	// URI is the manifest's URI, "sha256-manifest:<hex>" (see Manifest.URI).
	URI string
}

// NewUpload starts an upload of the files listed in m into store. A manifest
// that does not validate makes every Add and Finish fail.
func NewUpload(store *Store, m Manifest, limits Limits) *Upload {
	return &Upload{store: store, manifest: m, limits: limits, err: m.Validate(), blobs: map[string]Blob{}}
}

var errFinished = errors.New("upload already finished")

// Add stores the file at path p, read from r. It refuses, with a *Rejection,
// a path that is not clean or not in the manifest (an extra file), a path
// added before, content that Detect refuses, and content whose sha256
// differs from the manifest's; it refuses with ErrTooLarge a file over the
// per-file limit or one that takes the upload over the total limit. A
// refused file is not part of the upload; a blob stored for it before the
// digest check goes with the upload's others when it is discarded.
func (u *Upload) Add(ctx context.Context, p string, r io.Reader) error {
	switch {
	case u.err != nil:
		return u.err
	case u.done, u.ended:
		return errFinished
	}
	if err := CheckPath(p); err != nil {
		return err
	}
	want, ok := u.manifest[p]
	if !ok {
		return reject(p, "extra file: not listed in the manifest")
	}
	if _, dup := u.blobs[p]; dup {
		return reject(p, "uploaded twice")
	}
	limit, byTotal := u.limits.file(), false
	if left := u.limits.total() - u.size; left < limit {
		limit, byTotal = left, true
	}
	b, err := u.store.put(ctx, p, r, limit, true)
	if errors.Is(err, ErrTooLarge) && byTotal {
		return tooLarge(p, "upload is larger than the total limit of %d bytes", u.limits.total())
	}
	if err != nil {
		return err
	}
	u.held = append(u.held, b.Digest)
	if b.Digest != want {
		return reject(p, "digest mismatch: manifest says sha256 %s, content is %s", want, b.Digest)
	}
	if err := u.checkExternal(p, b.External); err != nil {
		return err
	}
	u.blobs[p] = b
	u.size += b.Size
	return nil
}

// checkExternal refuses an ONNX model at p whose tensors name external
// data that is not a file of the manifest: ONNX Runtime opens the named
// path relative to the model's directory when it loads the model (in the
// validation child, then in every replica), so a location such as
// "../../../etc/shadow" or "/proc/self/environ" would read a file of the
// machine into the model's weights.
func (u *Upload) checkExternal(p string, external []string) error {
	for _, loc := range external {
		if CheckPath(loc) != nil {
			return reject(p, "onnx external data %q is not a file of the manifest (it must be a clean relative path)", loc)
		}
		if _, ok := u.manifest[path.Join(path.Dir(p), loc)]; !ok {
			return reject(p, "onnx external data %q is not a file of the manifest", loc)
		}
	}
	return nil
}

// AddTar adds every regular file of a tar archive, optionally gzipped, as Add
// would, under its entry path (a leading "./" dropped). It refuses the
// archive at the first entry that escapes it ("..", an absolute path), is a
// symlink, hard link, device or other special file, or is refused by Add,
// and with ErrTooLarge as soon as the archive unpacks, headers included, to
// more than what the total limit leaves. Directory entries are skipped.
func (u *Upload) AddTar(ctx context.Context, r io.Reader) error {
	switch {
	case u.err != nil:
		return u.err
	case u.done, u.ended:
		return errFinished
	}
	return walkTar(r, u.limits.total()-u.size, func(name string, _ int64, body io.Reader) error {
		return u.Add(ctx, name, body)
	})
}

// Finish checks every manifest file was added and returns the result. It
// refuses, with a *Rejection, an upload with files missing. The upload
// cannot be added to afterwards.
func (u *Upload) Finish() (Result, error) {
	switch {
	case u.err != nil:
		return Result{}, u.err
	case u.done, u.ended:
		return Result{}, errFinished
	}
	var missing []string
	for _, p := range u.manifest.Paths() {
		if _, ok := u.blobs[p]; !ok {
			missing = append(missing, p)
		}
	}
	switch {
	case len(missing) == 1:
		return Result{}, reject(missing[0], "missing file: listed in the manifest but not uploaded")
	case len(missing) > 1:
		return Result{}, reject("", "missing files: %s listed in the manifest but not uploaded", listPaths(missing, 5))
	}
	u.done = true
	files := make(map[string]Blob, len(u.blobs))
	for p, b := range u.blobs {
		files[p] = b
	}
	return Result{Files: files, Size: u.size, Format: dominant(files), URI: u.manifest.URI()}, nil
}

// Release ends an upload whose version is now recorded, so its blobs are
// referenced: it lets go of them and removes nothing. The upload cannot be
// added to or finished afterwards; a second Release or Discard does nothing.
func (u *Upload) Release() {
	if u.ended {
		return
	}
	u.ended = true
	u.store.release(u.held)
	u.held = nil
}

// Discard ends an upload that will not become a version, whatever made it
// fail (a refused file, a missing one, a limit, the caller's own checks):
// it removes each blob it stored that no other upload holds and that inUse
// does not report as referenced by a version. On an error (inUse failing,
// a removal failing) the remaining blobs stay, which is safe: they are
// content-addressed. The upload cannot be used afterwards; a second Release
// or Discard does nothing.
func (u *Upload) Discard(ctx context.Context, inUse InUse) error {
	if u.ended {
		return nil
	}
	u.ended = true
	held := u.held
	u.held = nil
	return u.store.discard(ctx, held, inUse)
}

// dominant returns the model format holding the most bytes or, without a
// model file, the config format holding the most. Ties go to the format
// listed first.
func dominant(files map[string]Blob) Format {
	size := map[Format]int64{}
	for _, b := range files {
		size[b.Format] += b.Size + 1 // +1 so an empty file still counts
	}
	groups := [][]Format{
		{FormatSafetensors, FormatGGUF, FormatONNX, FormatXGBoostJSON, FormatLightGBM},
		{FormatJSON, FormatText},
	}
	for _, group := range groups {
		var best Format
		for _, f := range group {
			if n, ok := size[f]; ok && (best == "" || n > size[best]) {
				best = f
			}
		}
		if best != "" {
			return best
		}
	}
	return ""
}

func listPaths(ps []string, n int) string {
	shown := make([]string, 0, n)
	for _, p := range ps[:min(len(ps), n)] {
		shown = append(shown, displayPath(p))
	}
	s := strings.Join(shown, ", ")
	if len(ps) > n {
		s += fmt.Sprintf(" and %d more", len(ps)-n)
	}
	return s
}
