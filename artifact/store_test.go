package artifact

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
}

// blobFiles lists the files under the store's blob and temp directories.
func blobFiles(t *testing.T, s *Store) (blobs, temps []string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(s.Dir(), "sha256"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			blobs = append(blobs, p)
		}
		return nil
	})
	entries, err := os.ReadDir(filepath.Join(s.Dir(), "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		temps = append(temps, e.Name())
	}
	return blobs, temps
}

func TestStorePutDedupes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	want := Blob{Digest: digestOf(validSafetensors), Size: int64(len(validSafetensors)), Format: FormatSafetensors}
	for i := range 2 {
		got, err := s.Put(ctx, "model.safetensors", bytes.NewReader(validSafetensors), 1<<20)
		if err != nil {
			t.Fatalf("Put #%d: %v", i+1, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Put #%d = %+v, want %+v", i+1, got, want)
		}
	}
	blobs, temps := blobFiles(t, s)
	wantPath := filepath.Join(s.Dir(), "sha256", want.Digest[:2], want.Digest)
	if len(blobs) != 1 || blobs[0] != wantPath {
		t.Errorf("blobs after two Puts = %v, want [%s]", blobs, wantPath)
	}
	if len(temps) != 0 {
		t.Errorf("temp files left: %v", temps)
	}

	rc, err := s.Open(want.Digest)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rc.Close()
	content, _ := io.ReadAll(rc)
	if !bytes.Equal(content, validSafetensors) {
		t.Errorf("Open returned %d bytes that differ from what was put", len(content))
	}
	if err := s.Verify(want.Digest); err != nil {
		t.Errorf("Verify of an intact blob: %v", err)
	}
}

func TestStoreVerifyDetectsCorruption(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	b, err := s.Put(context.Background(), "config.json", strings.NewReader(configJSON), 1<<20)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	p := filepath.Join(s.Dir(), "sha256", b.Digest[:2], b.Digest)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(configJSON, "4096", "4097", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(b.Digest); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify of a modified blob = %v, want ErrCorrupt", err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(b.Digest); !errors.Is(err, ErrNotFound) {
		t.Errorf("Verify of a removed blob = %v, want ErrNotFound", err)
	}
}

func TestStoreOpenNotFound(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, d := range []string{digestA, "../../etc/passwd", "", strings.ToUpper(digestA)} {
		if _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q) = %v, want ErrNotFound", d, err)
		}
	}
}

// endless yields zeros forever and counts what it gave.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n += int64(len(p))
	return len(p), nil
}

func TestStorePutLimit(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const limit = 1 << 20
	r := &endless{}
	_, err := s.Put(ctx, "huge.bin", r, limit)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of an endless stream = %v, want ErrTooLarge", err)
	}
	if want := "huge.bin: file is larger than the limit of 1048576 bytes"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if r.n > limit+64<<10 {
		t.Errorf("Put read %d bytes before stopping, want about %d", r.n, limit)
	}

	exact := []byte(strings.Repeat("x", 100) + "\n")
	if _, err := s.Put(ctx, "exact.txt", bytes.NewReader(exact), int64(len(exact))); err != nil {
		t.Errorf("Put of a file exactly at the limit: %v", err)
	}
	if _, err := s.Put(ctx, "over.txt", bytes.NewReader(exact), int64(len(exact)-1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Put of a file one byte over the limit = %v, want ErrTooLarge", err)
	}
	blobs, temps := blobFiles(t, s)
	if len(blobs) != 1 || len(temps) != 0 {
		t.Errorf("after refusals: blobs %v, temp files %v, want one blob and no temp file", blobs, temps)
	}
}

func TestStorePutRejectedLeavesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	_, err := s.Put(context.Background(), "model.safetensors", bytes.NewReader(pickle4Evil), 1<<20)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Put of a pickle = %v, want ErrRejected", err)
	}
	if blobs, temps := blobFiles(t, s); len(blobs)+len(temps) != 0 {
		t.Errorf("after a refusal: blobs %v, temp files %v, want none", blobs, temps)
	}
}

func TestStorePutCanceled(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, "config.json", strings.NewReader(configJSON), 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context = %v, want context.Canceled", err)
	}
}
