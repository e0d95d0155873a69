package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"path"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A Manifest lists the files of a model version: clean relative path to the
// lowercase hex sha256 of the file's content.
type Manifest map[string]string

// Manifest limits: beyond these a manifest is refused outright.
const (
	MaxManifestFiles = 10_000
	maxPathLen       = 1024
	maxPathElemLen   = 255
)

// ParseManifest parses a manifest given as a JSON object of path to digest
// and checks it: at least one file, at most MaxManifestFiles, every path a
// clean relative path (no "..", no leading "/", no backslash, no empty or "."
// element, no control characters), no path given twice or used both as a
// file and as a directory, and every digest 64 lowercase hex characters. A
// refusal is a *Rejection that wraps ErrRejected.
func ParseManifest(data []byte) (Manifest, error) {
	if !utf8.Valid(data) {
		return nil, reject("", "manifest is not utf-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, reject("", "manifest must be a json object of file path to sha256")
	}
	m := Manifest{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, reject("", "manifest is not valid json: %v", err)
		}
		p, ok := tok.(string)
		if !ok {
			return nil, reject("", "manifest is not valid json")
		}
		var digest string
		if err := dec.Decode(&digest); err != nil {
			return nil, reject(p, "manifest value must be a sha256 string")
		}
		if _, dup := m[p]; dup {
			return nil, reject(p, "listed twice in the manifest")
		}
		if len(m) == MaxManifestFiles {
			return nil, reject("", "manifest lists more than %d files", MaxManifestFiles)
		}
		m[p] = digest
	}
	if _, err := dec.Token(); err != nil {
		return nil, reject("", "manifest is not valid json: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, reject("", "manifest has data after the json object")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Validate checks a manifest built in code, as ParseManifest does.
func (m Manifest) Validate() error {
	if len(m) == 0 {
		return reject("", "manifest lists no files")
	}
	if len(m) > MaxManifestFiles {
		return reject("", "manifest lists more than %d files", MaxManifestFiles)
	}
	for _, p := range m.Paths() {
		if err := CheckPath(p); err != nil {
			return err
		}
		if !IsDigest(m[p]) {
			return reject(p, "manifest digest must be 64 lowercase hex characters (sha256)")
		}
	}
	for _, p := range m.Paths() {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := m[dir]; ok {
				return reject(dir, "listed as a file but used as a directory by %s", displayPath(p))
			}
		}
	}
	return nil
}

// Paths returns the manifest's paths, sorted.
func (m Manifest) Paths() []string {
	ps := make([]string, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// Canonical returns the manifest as compact JSON with keys sorted and no
// HTML escaping, the form its digest is taken of.
func (m Manifest) Canonical() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range m.Paths() {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, p)
		b.WriteByte(':')
		writeJSONString(&b, m[p])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// manifestScheme starts the artifact URI of a version whose files the store
// holds.
const manifestScheme = "sha256-manifest:"

// URI returns "sha256-manifest:" and the sha256 of the canonical manifest,
// the artifact URI of a version uploaded with it.
func (m Manifest) URI() string { return manifestScheme + m.Digest() }

// Digest returns the sha256 of the canonical manifest, the name under which
// the store keeps the manifest itself.
func (m Manifest) Digest() string {
	sum := sha256.Sum256(m.Canonical())
	return hex.EncodeToString(sum[:])
}

// ManifestDigest returns the manifest digest an artifact URI names, and
// false for a URI of files kept elsewhere (s3://, https://…).
func ManifestDigest(uri string) (string, bool) {
	d, ok := strings.CutPrefix(uri, manifestScheme)
	return d, ok && IsDigest(d)
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// CheckPath checks p is a clean relative slash-separated path, as manifest
// paths and archive entries must be, and returns a *Rejection if not.
func CheckPath(p string) error {
	switch {
	case p == "":
		return reject(p, "path is empty")
	case len(p) > maxPathLen:
		return reject(p, "path is longer than %d bytes", maxPathLen)
	case !utf8.ValidString(p):
		return reject(p, "path is not utf-8")
	case strings.ContainsRune(p, '\\'):
		return reject(p, "path must use / not backslashes")
	case strings.HasPrefix(p, "/"):
		return reject(p, "path must be relative")
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return reject(p, "path contains control characters")
	}
	for _, e := range strings.Split(p, "/") {
		switch {
		case e == "..":
			return reject(p, "path must not contain ..")
		case e == "." || e == "":
			return reject(p, "path must be clean (no empty or . elements, no trailing /)")
		case len(e) > maxPathElemLen:
			return reject(p, "path element is longer than %d bytes", maxPathElemLen)
		}
	}
	if path.Clean(p) != p {
		return reject(p, "path must be clean (no empty or . elements, no trailing /)")
	}
	return nil
}

// IsDigest reports whether s is a sha256 digest in lowercase hex.
func IsDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
