// Command image builds modelplane's container image from files on this
// machine, without a container daemon and without pulling a base image,
// and writes it as an OCI image layout archive (for skopeo, crane, podman
// or containerd: `ctr image import`) and as a `docker load` archive.
//
// The image has three layers, least often changed first: the shared
// libraries the binary and ONNX Runtime load (found with ldd, copied from
// this machine's Debian packages), with /etc/passwd, /etc/group, the CA
// bundle and /tmp; ONNX Runtime's library; the modelplane binary. Every
// time stamp is -epoch, owners are fixed and entries sorted, so the same
// inputs give the same digests. It runs as uid 65532.
//
// scripts/images.sh (make images) runs it; a module of its own keeps
// go-containerregistry out of the product's go.mod.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	binPath = "/usr/local/bin/modelplane"
	home    = "/home/modelplane"
	uid     = 65532
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "", "the modelplane binary to put in the image")
	ort := flag.String("onnxruntime", "", "ONNX Runtime's libonnxruntime.so.1 (scripts/install-deps.sh fetches it)")
	ortVersion := flag.String("onnxruntime-version", "", "its version, for its path in the image")
	out := flag.String("out", "", "directory for modelplane.oci.tar and modelplane.docker.tar")
	tag := flag.String("tag", "modelplane/modelplane:latest", "the image's name")
	version := flag.String("version", "devel", "the version label")
	epoch := flag.Int64("epoch", 0, "every time stamp in the image (seconds since 1970, as SOURCE_DATE_EPOCH)")
	flag.Parse()
	if *binary == "" || *ort == "" || *ortVersion == "" || *out == "" {
		return fmt.Errorf("-binary, -onnxruntime, -onnxruntime-version and -out are required")
	}
	created := time.Unix(*epoch, 0).UTC()
	ortPath := "/usr/local/lib/modelplane/onnxruntime-" + *ortVersion + "/libonnxruntime.so.1"

	sys, err := systemFiles(*binary, *ort)
	if err != nil {
		return err
	}
	ortFile, err := hostFile(*ort, ortPath, 0o755)
	if err != nil {
		return err
	}
	binFile, err := hostFile(*binary, binPath, 0o755)
	if err != nil {
		return err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		what  string
		files []file
	}{
		{"shared libraries and /etc from Debian", sys},
		{"ONNX Runtime " + *ortVersion, []file{ortFile}},
		{"modelplane " + *version, []file{binFile}},
	} {
		data, err := tarOf(l.files, created)
		if err != nil {
			return err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "tools/image: " + l.what}})
		if err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: created}
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{binPath}
	cfg.Config.User = strconv.Itoa(uid) + ":" + strconv.Itoa(uid)
	cfg.Config.WorkingDir = home
	cfg.Config.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"MP_ONNXRUNTIME_LIB=" + ortPath,
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
	}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "modelplane",
		"org.opencontainers.image.version": *version,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return err
	}
	if err := writeOCIArchive(filepath.Join(*out, "modelplane.oci.tar"), img, ref, created); err != nil {
		return err
	}
	if err := tarball.WriteToFile(filepath.Join(*out, "modelplane.docker.tar"), ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", ref, digest)
	return nil
}

// file is one entry of a layer: a regular file (data), a directory (dir)
// or a symbolic link (link).
type file struct {
	path string // absolute, in the image
	data []byte
	mode int64
	dir  bool
	link string
	uid  int
}

func hostFile(src, dst string, mode int64) (file, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return file{}, err
	}
	return file{path: dst, data: data, mode: mode}, nil
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// systemFiles are the shared libraries the ELF files load, as ldd resolves
// them here (each at the path the loader looks for it, its content the
// file the path resolves to), and the few files of /etc a program expects.
func systemFiles(elfs ...string) ([]file, error) {
	libs := map[string]bool{}
	for _, e := range elfs {
		out, err := exec.Command("ldd", e).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", e, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if m := lddLine.FindStringSubmatch(line); m != nil {
				libs[m[1]] = true
			}
		}
	}
	var files []file
	for lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, err
		}
		f, err := hostFile(real, lib, 0o755)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	files = append(files,
		file{path: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/usr/sbin/nologin\nmodelplane:x:65532:65532:modelplane:" + home + ":/usr/sbin/nologin\n")},
		file{path: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nmodelplane:x:65532:\n")},
		file{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		file{path: "/tmp", dir: true, mode: 0o1777},
		file{path: home, dir: true, mode: 0o755, uid: uid},
	)
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, file{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	return files, nil
}

// tarOf writes files, with every parent directory, as a tar sorted by path
// with fixed owners and times.
func tarOf(files []file, mtime time.Time) ([]byte, error) {
	all := map[string]file{}
	for _, f := range files {
		all[f.path] = f
		for d := filepath.Dir(f.path); d != "/"; d = filepath.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = file{path: d, dir: true, mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := all[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: f.mode, ModTime: mtime, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeOCIArchive writes img as an OCI image layout (index.json naming it
// by ref) and packs the layout's files into one tar, sorted, with fixed
// times.
func writeOCIArchive(path string, img v1.Image, ref name.Tag, mtime time.Time) error {
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.String(),
		"io.containerd.image.name":          ref.String(),
	})); err != nil {
		return err
	}
	var files []file
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, file{path: "/" + rel, data: data, mode: 0o644})
		return nil
	})
	if err != nil {
		return err
	}
	data, err := tarOf(files, mtime)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
