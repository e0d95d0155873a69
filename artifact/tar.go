package artifact

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
)

// CheckTar reads a tar archive, optionally gzipped (recognised by its magic,
// not its name), and checks it as AddTar would without storing anything:
// every entry is a directory or a regular file with a clean relative path
// (no "..", no absolute path), no entry is a symlink, hard link, device or
// other special file, no path appears twice, each regular file passes Detect
// under its entry path, and sizes stay within limits: the archive as it
// unpacks, headers included, is at most the total limit. It returns nil or
// a *Rejection wrapping ErrRejected or ErrTooLarge.
func CheckTar(r io.Reader, limits Limits) error {
	var total int64
	return walkTar(r, limits.total(), func(name string, size int64, body io.Reader) error {
		if size > limits.file() {
			return tooLarge(name, "file is larger than the limit of %d bytes", limits.file())
		}
		if total += size; total > limits.total() {
			return tooLarge(name, "archive is larger than the total limit of %d bytes", limits.total())
		}
		_, err := Detect(name, body, size)
		return err
	})
}

// walkTar calls fn for each regular file of a tar archive, optionally
// gzipped, after refusing unsafe entries. The tar stream, after
// decompression, may be at most limit bytes: the count runs as it is read,
// so a gzip bomb is cut off at the limit, and it includes what the
// per-entry checks never see (pax and GNU headers, of which Go's reader
// takes up to 1 MiB each, any number of them, and padding). An error
// reading the archive is reported as a rejection, since the archive is what
// the uploader sent.
func walkTar(r io.Reader, limit int64, fn func(name string, size int64, body io.Reader) error) error {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return reject("", "invalid gzip stream: %v", err)
		}
		defer zr.Close()
		src = zr
	}
	un := &unpacked{r: src, left: limit, limit: limit}
	tr := tar.NewReader(un)
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if un.err != nil {
			return un.err
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return reject("", "invalid tar archive: %v", err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		switch hdr.Typeflag {
		case tar.TypeReg:
		case tar.TypeDir:
			name = strings.TrimSuffix(name, "/")
			if name == "" || name == "." {
				continue
			}
			if err := checkEntryPath(hdr.Name, name); err != nil {
				return err
			}
			continue
		case tar.TypeXGlobalHeader: // pax metadata for the whole archive, as git archive writes
			continue
		case tar.TypeSymlink:
			return reject(hdr.Name, "archive entry is a symlink (links are not accepted)")
		case tar.TypeLink:
			return reject(hdr.Name, "archive entry is a hard link (links are not accepted)")
		case tar.TypeChar, tar.TypeBlock:
			return reject(hdr.Name, "archive entry is a device file (only regular files are accepted)")
		case tar.TypeFifo:
			return reject(hdr.Name, "archive entry is a fifo (only regular files are accepted)")
		default:
			return reject(hdr.Name, "archive entry has unsupported type %q (only regular files are accepted)", hdr.Typeflag)
		}
		if err := checkEntryPath(hdr.Name, name); err != nil {
			return err
		}
		if seen[name] {
			return reject(hdr.Name, "archive entry appears twice")
		}
		seen[name] = true
		body := &entryReader{r: tr}
		if err := fn(name, hdr.Size, body); err != nil {
			if un.err != nil { // whatever fn made of it, the archive is too large
				return un.err
			}
			if body.err != nil && !errors.As(err, new(*Rejection)) {
				return reject(hdr.Name, "invalid tar archive: %v", body.err)
			}
			return err
		}
	}
}

func checkEntryPath(raw, name string) error {
	if err := CheckPath(name); err != nil {
		var r *Rejection
		errors.As(err, &r)
		return reject(raw, "archive entry %s", r.Reason)
	}
	return nil
}

// entryReader remembers an error reading the archive, to tell a broken
// archive from a failure of what consumes it.
type entryReader struct {
	r   io.Reader
	err error
}

func (e *entryReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// unpacked counts the bytes of a tar stream as they are read and fails the
// read that takes them past limit, with a refusal that names the limit.
type unpacked struct {
	r     io.Reader
	left  int64
	limit int64
	err   error
}

func (u *unpacked) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	n, err := u.r.Read(p)
	if int64(n) > u.left {
		n, u.left = int(u.left), 0
		u.err = tooLarge("", "archive unpacks to more than the total limit of %d bytes", u.limit)
		return n, u.err
	}
	u.left -= int64(n)
	return n, err
}
