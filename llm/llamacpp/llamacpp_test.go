package llamacpp

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestOpenSaysWhyThePeerIsUnavailable: with no node or npm on the PATH,
// Open fails with ErrUnavailable naming what is missing, which callers
// print as the line that skips the comparison.
func TestOpenSaysWhyThePeerIsUnavailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Open(context.Background(), t.TempDir())
	if !errors.Is(err, ErrUnavailable) || err.Error() != "llama.cpp peer unavailable: node is not installed" {
		t.Errorf("Open without node: %v, want ErrUnavailable saying node is not installed", err)
	}
}

func TestDefaultDirIsOutsideTheRepository(t *testing.T) {
	t.Setenv("MP_LLAMACPP_DIR", "/somewhere/else")
	if got := DefaultDir(); got != "/somewhere/else" {
		t.Errorf("DefaultDir with MP_LLAMACPP_DIR = %q", got)
	}
	t.Setenv("MP_LLAMACPP_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	if got, want := DefaultDir(), filepath.Join("/cache", "modelplane", "llamacpp"); got != want {
		t.Errorf("DefaultDir = %q, want %q", got, want)
	}
}
