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
