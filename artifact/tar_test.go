package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// versionTar is versionFiles as "tar -C dir -cf - ." writes them.
func versionTar(t testing.TB) []byte {
	return tarFile(t,
		tarEntry{name: "./", typeflag: tar.TypeDir},
		tarEntry{name: "./config.json", body: versionFiles["config.json"]},
		tarEntry{name: "./model.safetensors", body: versionFiles["model.safetensors"]},
		tarEntry{name: "./tokenizer/", typeflag: tar.TypeDir},
		tarEntry{name: "./tokenizer/vocab.txt", body: versionFiles["tokenizer/vocab.txt"]},
	)
}

func TestCheckTarAccepts(t *testing.T) {
	t.Parallel()
	var pax bytes.Buffer
	w := tar.NewWriter(&pax)
	w.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc123"}})
	w.WriteHeader(&tar.Header{Name: "config.json", Mode: 0o644, Size: int64(len(configJSON))})
	w.Write([]byte(configJSON))
	w.Close()
	tests := []struct {
		name string
		in   []byte
	}{
		{"tar", versionTar(t)},
		{"tar.gz", gzipBytes(t, versionTar(t))},
		{"git archive with a pax global header", pax.Bytes()},
		{"empty archive", tarFile(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := CheckTar(bytes.NewReader(tt.in), Limits{}); err != nil {
				t.Errorf("CheckTar: %v, want nil", err)
			}
		})
	}
}

func TestCheckTarRejects(t *testing.T) {
	t.Parallel()
	cfg := []byte(configJSON)
	good := versionTar(t)
	tests := []struct {
		name     string
		in       []byte
		limits   Limits
		sentinel error
		want     string
	}{
		{"dot dot", tarFile(t, tarEntry{name: "../evil", body: cfg}), Limits{}, ErrRejected,
			"../evil: archive entry path must not contain .."},
		{"dot dot inside", tarFile(t, tarEntry{name: "./a/../../evil", body: cfg}), Limits{}, ErrRejected,
			"./a/../../evil: archive entry path must not contain .."},
		{"dot dot directory", tarFile(t, tarEntry{name: "../", typeflag: tar.TypeDir}), Limits{}, ErrRejected,
			"../: archive entry path must not contain .."},
		{"absolute", tarFile(t, tarEntry{name: "/etc/cron.d/x", body: cfg}), Limits{}, ErrRejected,
			"/etc/cron.d/x: archive entry path must be relative"},
		{"symlink", tarFile(t, tarEntry{name: "model.safetensors", typeflag: tar.TypeSymlink, link: "/etc/passwd"}), Limits{}, ErrRejected,
			"model.safetensors: archive entry is a symlink (links are not accepted)"},
		{"symlink after good files", tarFile(t, tarEntry{name: "config.json", body: cfg},
			tarEntry{name: "weights", typeflag: tar.TypeSymlink, link: "../../secrets"}), Limits{}, ErrRejected,
			"weights: archive entry is a symlink (links are not accepted)"},
		{"hard link", tarFile(t, tarEntry{name: "config.json", body: cfg},
			tarEntry{name: "copy.json", typeflag: tar.TypeLink, link: "config.json"}), Limits{}, ErrRejected,
			"copy.json: archive entry is a hard link (links are not accepted)"},
		{"device", tarFile(t, tarEntry{name: "sda", typeflag: tar.TypeBlock}), Limits{}, ErrRejected,
			"sda: archive entry is a device file (only regular files are accepted)"},
		{"fifo", tarFile(t, tarEntry{name: "pipe", typeflag: tar.TypeFifo}), Limits{}, ErrRejected,
			"pipe: archive entry is a fifo (only regular files are accepted)"},
		{"duplicate", tarFile(t, tarEntry{name: "config.json", body: cfg}, tarEntry{name: "./config.json", body: cfg}), Limits{}, ErrRejected,
			"./config.json: archive entry appears twice"},
		{"pickle entry", tarFile(t, tarEntry{name: "model.safetensors", body: pickle4Evil}), Limits{}, ErrRejected,
			"model.safetensors: pickle content is not accepted (raw pickle protocol 4)"},
		{"torch zip entry", gzipBytes(t, tarFile(t, tarEntry{name: "model.pt", body: torchZip(t)})), Limits{}, ErrRejected,
			"model.pt: zip archives are not accepted (torch .pt/.pth zips contain pickle)"},
		{"tar in tar", tarFile(t, tarEntry{name: "inner.tar", body: good}), Limits{}, ErrRejected,
			"inner.tar: tar archives are not accepted as a file (upload the files, or the whole version as one tar)"},
		{"entry over the file limit", good, Limits{MaxFileBytes: 100}, ErrTooLarge,
			"config.json: file is larger than the limit of 100 bytes"},
		{"archive over the total limit", good, Limits{MaxTotalBytes: 200}, ErrTooLarge,
			"archive unpacks to more than the total limit of 200 bytes"},
		{"entry declared over the total limit", tarFile(t, tarEntry{name: "big.txt", body: bytes.Repeat([]byte("a\n"), 3000)}),
			Limits{MaxTotalBytes: 4096}, ErrTooLarge, "big.txt: archive is larger than the total limit of 4096 bytes"},
		{"truncated", good[:len(good)-1500], Limits{}, ErrRejected,
			"./tokenizer/vocab.txt: invalid tar archive: unexpected EOF"},
		{"not a tar", []byte("hello, this is not a tar archive\n"), Limits{}, ErrRejected,
			"invalid tar archive: unexpected EOF"},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0}, Limits{}, ErrRejected,
			"invalid gzip stream: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckTar(bytes.NewReader(tt.in), tt.limits)
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("CheckTar = %v, want an error wrapping %v", err, tt.sentinel)
			}
			if err.Error() != tt.want {
				t.Errorf("CheckTar error\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestUploadAddTar(t *testing.T) {
	t.Parallel()
	m := manifestOf(versionFiles)
	for _, gz := range []bool{false, true} {
		in := versionTar(t)
		if gz {
			in = gzipBytes(t, in)
		}
		up := NewUpload(newStore(t), m, Limits{})
		if err := up.AddTar(context.Background(), bytes.NewReader(in)); err != nil {
			t.Fatalf("AddTar (gzip %v): %v", gz, err)
		}
		res, err := up.Finish()
		if err != nil {
			t.Fatalf("Finish after AddTar (gzip %v): %v", gz, err)
		}
		if res.Format != FormatSafetensors || len(res.Files) != len(versionFiles) || res.URI != m.URI() {
			t.Errorf("Result after AddTar (gzip %v) = %+v, want %d files, safetensors, %s", gz, res, len(versionFiles), m.URI())
		}
	}
}

func TestUploadAddTarRejects(t *testing.T) {
	t.Parallel()
	m := manifestOf(versionFiles)
	good := versionTar(t)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"dot dot", tarFile(t, tarEntry{name: "../config.json", body: []byte(configJSON)}),
			"../config.json: archive entry path must not contain .."},
		{"symlink", tarFile(t, tarEntry{name: "config.json", typeflag: tar.TypeSymlink, link: "/etc/passwd"}),
			"config.json: archive entry is a symlink (links are not accepted)"},
		{"extra entry", tarFile(t, tarEntry{name: "notes.txt", body: []byte("hi\n")}),
			"notes.txt: extra file: not listed in the manifest"},
		{"truncated entry", good[:1024+60],
			"./config.json: invalid tar archive: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := NewUpload(newStore(t), m, Limits{}).AddTar(context.Background(), bytes.NewReader(tt.in))
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("AddTar = %v, want an error wrapping ErrRejected", err)
			}
			if err.Error() != tt.want {
				t.Errorf("AddTar error\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

// gzipBomb is a gzipped tar of n pax global headers of almost 1 MiB each,
// the most Go's tar reader takes per header, then the version's files. It
// is about a thousand times smaller than what it unpacks to, and every
// byte of it passes the per-entry checks.
func gzipBomb(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	comment := strings.Repeat("a", 1<<20-64)
	for range n {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
			PAXRecords: map[string]string{"comment": comment}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range manifestOf(versionFiles).Paths() {
		tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(versionFiles[p]))})
		tw.Write(versionFiles[p])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// counting counts the bytes read through it.
type counting struct {
	r io.Reader
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestTarDecompressedLimit checks a tar.gz is cut off as soon as what it
// unpacks to passes the total limit, headers included, long before the
// compressed stream ends.
func TestTarDecompressedLimit(t *testing.T) {
	t.Parallel()
	bomb := gzipBomb(t, 16) // 16 MiB unpacked, 18 KB packed
	limits := Limits{MaxTotalBytes: 1 << 20}
	want := "archive unpacks to more than the total limit of 1048576 bytes"
	for name, run := range map[string]func(io.Reader) error{
		"CheckTar": func(r io.Reader) error { return CheckTar(r, limits) },
		"AddTar": func(r io.Reader) error {
			return NewUpload(newStore(t), manifestOf(versionFiles), limits).AddTar(context.Background(), r)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := &counting{r: bytes.NewReader(bomb)}
			err := run(src)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%s of a gzip bomb = %v, want ErrTooLarge", name, err)
			}
			if err.Error() != want {
				t.Errorf("%s error\n got %q\nwant %q", name, err, want)
			}
			if src.n > int64(len(bomb))/2 {
				t.Errorf("%s read %d of the %d compressed bytes before refusing, want it cut off early", name, src.n, len(bomb))
			}
		})
	}
	// The same files without the padding headers fit.
	if err := CheckTar(bytes.NewReader(gzipBomb(t, 0)), limits); err != nil {
		t.Errorf("CheckTar of the version alone: %v", err)
	}
}
