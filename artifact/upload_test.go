package artifact

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// versionFiles is a complete, valid model version.
var versionFiles = map[string][]byte{
	"model.safetensors":   validSafetensors,
	"config.json":         []byte(configJSON),
	"tokenizer/vocab.txt": []byte(vocabText),
}

func manifestOf(files map[string][]byte) Manifest {
	m := Manifest{}
	for p, b := range files {
		m[p] = digestOf(b)
	}
	return m
}

func TestUploadComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := manifestOf(versionFiles)
	up := NewUpload(newStore(t), m, Limits{})
	var size int64
	for _, p := range m.Paths() {
		if err := up.Add(ctx, p, bytes.NewReader(versionFiles[p])); err != nil {
			t.Fatalf("Add(%s): %v", p, err)
		}
		size += int64(len(versionFiles[p]))
	}
	res, err := up.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if res.Format != FormatSafetensors {
		t.Errorf("Format = %s, want safetensors", res.Format)
	}
	if res.Size != size {
		t.Errorf("Size = %d, want %d", res.Size, size)
	}
	if res.URI != m.URI() {
		t.Errorf("URI = %s, want %s", res.URI, m.URI())
	}
	if got := res.Files["tokenizer/vocab.txt"]; got.Format != FormatText || got.Digest != m["tokenizer/vocab.txt"] {
		t.Errorf("Files[tokenizer/vocab.txt] = %+v, want text with the manifest digest", got)
	}
	if err := up.Add(ctx, "config.json", bytes.NewReader(versionFiles["config.json"])); err == nil {
		t.Errorf("Add after Finish succeeded, want an error")
	}
}

func TestUploadRejects(t *testing.T) {
	t.Parallel()
	type add struct {
		path    string
		content []byte
	}
	all := func(extra ...add) []add {
		var adds []add
		for _, p := range manifestOf(versionFiles).Paths() {
			adds = append(adds, add{p, versionFiles[p]})
		}
		return append(adds, extra...)
	}
	tests := []struct {
		name     string
		manifest Manifest
		limits   Limits
		adds     []add
		sentinel error
		want     string // the whole message of the first error
	}{
		{
			name:     "digest mismatch",
			manifest: manifestOf(versionFiles),
			adds:     []add{{"config.json", []byte(`{"hidden_size":1}`)}},
			sentinel: ErrRejected,
			want:     "config.json: digest mismatch: manifest says sha256 " + digestOf([]byte(configJSON)) + ", content is " + digestOf([]byte(`{"hidden_size":1}`)),
		},
		{
			name:     "extra file",
			manifest: manifestOf(versionFiles),
			adds:     all(add{"extra.txt", []byte("hi\n")}),
			sentinel: ErrRejected,
			want:     "extra.txt: extra file: not listed in the manifest",
		},
		{
			name:     "missing file",
			manifest: manifestOf(versionFiles),
			adds:     all()[:2],
			sentinel: ErrRejected,
			want:     "tokenizer/vocab.txt: missing file: listed in the manifest but not uploaded",
		},
		{
			name:     "missing files",
			manifest: manifestOf(versionFiles),
			adds:     all()[:1],
			sentinel: ErrRejected,
			want:     "missing files: model.safetensors, tokenizer/vocab.txt listed in the manifest but not uploaded",
		},
		{
			name:     "uploaded twice",
			manifest: manifestOf(versionFiles),
			adds:     []add{{"config.json", []byte(configJSON)}, {"config.json", []byte(configJSON)}},
			sentinel: ErrRejected,
			want:     "config.json: uploaded twice",
		},
		{
			name:     "unclean path",
			manifest: manifestOf(versionFiles),
			adds:     []add{{"../config.json", []byte(configJSON)}},
			sentinel: ErrRejected,
			want:     "../config.json: path must not contain ..",
		},
		{
			name:     "pickle listed in the manifest",
			manifest: Manifest{"model.safetensors": digestOf(pickle4Evil)},
			adds:     []add{{"model.safetensors", pickle4Evil}},
			sentinel: ErrRejected,
			want:     "model.safetensors: pickle content is not accepted (raw pickle protocol 4)",
		},
		{
			name:     "file over the per-file limit",
			manifest: manifestOf(versionFiles),
			limits:   Limits{MaxFileBytes: 64},
			adds:     all(),
			sentinel: ErrTooLarge,
			want:     "config.json: file is larger than the limit of 64 bytes",
		},
		{
			name:     "upload over the total limit",
			manifest: manifestOf(versionFiles),
			limits:   Limits{MaxTotalBytes: int64(len(configJSON) + len(validSafetensors) + 10)},
			adds:     all(),
			sentinel: ErrTooLarge,
			want:     "tokenizer/vocab.txt: upload is larger than the total limit of 239 bytes",
		},
		{
			name:     "invalid manifest",
			manifest: Manifest{"/abs": digestA},
			adds:     []add{{"/abs", nil}},
			sentinel: ErrRejected,
			want:     "/abs: path must be relative",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := NewUpload(newStore(t), tt.manifest, tt.limits)
			var err error
			for _, a := range tt.adds {
				if err = up.Add(context.Background(), a.path, bytes.NewReader(a.content)); err != nil {
					break
				}
			}
			if err == nil {
				_, err = up.Finish()
			}
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("error = %v, want one wrapping %v", err, tt.sentinel)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestDominantFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]Blob
		want  Format
	}{
		{"model beats bigger configs", map[string]Blob{
			"m.onnx": {Format: FormatONNX, Size: 10}, "tokenizer.json": {Format: FormatJSON, Size: 1000}}, FormatONNX},
		{"biggest model wins", map[string]Blob{
			"a.onnx": {Format: FormatONNX, Size: 10}, "b.safetensors": {Format: FormatSafetensors, Size: 20}}, FormatSafetensors},
		{"configs only", map[string]Blob{
			"c.json": {Format: FormatJSON, Size: 10}, "n.txt": {Format: FormatText, Size: 5}}, FormatJSON},
		{"lightgbm with text", map[string]Blob{
			"model.txt": {Format: FormatLightGBM, Size: 10}, "README.md": {Format: FormatText, Size: 50}}, FormatLightGBM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := dominant(tt.files); got != tt.want {
				t.Errorf("dominant = %s, want %s", got, tt.want)
			}
		})
	}
}

// inUseOf answers InUse from a fixed set of referenced digests and counts
// its calls.
type inUseOf struct {
	refs  map[string]bool
	calls int
	err   error
}

func (f *inUseOf) check(_ context.Context, digests []string) (map[string]bool, error) {
	f.calls++
	out := map[string]bool{}
	for _, d := range digests {
		out[d] = f.refs[d]
	}
	return out, f.err
}

func TestUploadDiscard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, vocab := []byte(configJSON), []byte(vocabText)
	s := newStore(t)
	has := func(b []byte) bool {
		rc, err := s.Open(digestOf(b))
		if err == nil {
			rc.Close()
		}
		return err == nil
	}
	// A finished upload whose version is recorded keeps its blobs.
	done := NewUpload(s, manifestOf(versionFiles), Limits{})
	for _, p := range manifestOf(versionFiles).Paths() {
		if err := done.Add(ctx, p, bytes.NewReader(versionFiles[p])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := done.Finish(); err != nil {
		t.Fatal(err)
	}
	done.Release()
	if !has(validSafetensors) || !has(cfg) || !has(vocab) {
		t.Fatalf("Release removed blobs")
	}
	if err := done.Discard(ctx, (&inUseOf{}).check); err != nil || !has(cfg) {
		t.Errorf("Discard after Release = %v and removed blobs, want a no-op", err)
	}

	// Another upload holds the vocabulary while a failing one has it too.
	open := NewUpload(s, Manifest{"vocab.txt": digestOf(vocab)}, Limits{})
	if err := open.Add(ctx, "vocab.txt", bytes.NewReader(vocab)); err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"other":true}`)
	failing := NewUpload(s, Manifest{"config.json": digestOf(cfg), "other.json": digestA, "vocab.txt": digestOf(vocab), "again.json": digestOf(other)}, Limits{})
	for p, b := range map[string][]byte{"config.json": cfg, "vocab.txt": vocab, "other.json": other, "again.json": other} {
		failing.Add(ctx, p, bytes.NewReader(b)) // other.json fails its digest check after storing its blob
	}
	if _, err := failing.Finish(); !errors.Is(err, ErrRejected) {
		t.Fatalf("Finish with a mismatched file = %v, want a rejection", err)
	}
	// The version recorded above references the config, so it stays.
	refs := &inUseOf{refs: map[string]bool{digestOf(cfg): true}}
	if err := failing.Discard(ctx, refs.check); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	switch {
	case !has(cfg):
		t.Errorf("Discard removed a blob a version references")
	case !has(vocab):
		t.Errorf("Discard removed a blob another upload holds")
	case has(other):
		t.Errorf("Discard kept a blob only the failed upload stored (twice, once under a wrong digest)")
	}
	if err := failing.Add(ctx, "config.json", bytes.NewReader(cfg)); err == nil {
		t.Errorf("Add after Discard succeeded, want an error")
	}
	if err := failing.Discard(ctx, refs.check); err != nil || refs.calls != 1 {
		t.Errorf("second Discard = %v after %d calls of inUse, want a no-op", err, refs.calls)
	}

	// Once the other upload fails too and a lookup fails, the blob stays.
	broken := &inUseOf{err: errors.New("database down")}
	if err := open.Discard(ctx, broken.check); err == nil || !has(vocab) {
		t.Errorf("Discard with a failing inUse = %v, vocab stored %v; want the error and the blob kept", err, has(vocab))
	}
	if blobs, temps := blobFiles(t, s); len(blobs) != 3 || len(temps) != 0 {
		t.Errorf("store holds %v and temp files %v, want the version's 3 blobs only", blobs, temps)
	}
}
