package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

var versionCols = []column{{"NAME", "name"}, {"MODEL", "model"}, {"RUNTIME", "runtime"}, {"FORMAT", "format"}, {"STATUS", "status"},
	{"SIZE", "size_bytes"}, {"GPUS", "resources.gpu_count"}, {"CREATED BY", "created_by"}, {"CREATED", "created_at"}}

// versionFields are a version's lines in `versions get` and `push`.
var versionFields = append(versionCols[:len(versionCols):len(versionCols)],
	column{"VALIDATION", "validation.state"}, column{"REASON", "validation.reason"}, column{"LATENCY MS", "validation.latency_ms"},
	column{"FILES", "manifest"})

// uploadAttempts bounds how often push sends a failed upload again.
const uploadAttempts = 4

func (a *app) versionsCmd() *cobra.Command {
	var name, runtime, metadata string
	var wait time.Duration
	var chunkSize int64
	push := &cobra.Command{
		Use:   "push MODEL DIR --name VERSION [--runtime R] [--metadata FILE]",
		Short: "Register a version from the files of DIR: builds the sha256 manifest and uploads",
		Long: `push registers an immutable version of MODEL from every file under DIR.
It builds the sha256 manifest, uploads the files in chunks addressed by
their sha256 into an upload session, and registers the version from
them; it prints the new version with its validation result (--wait waits
that long for the control plane's validation to end). An upload cut off
part-way (network, Ctrl-C) resumes when the same push runs again: the
session keeps its chunks for a day, and only the ones it lacks are sent.
Every step is safe to repeat, so the version is registered once.

--metadata names a JSON file of the version's metadata (resources, sla,
lineage, serving, as the API takes it); --name and --runtime set those
fields over it. A metadata file inside DIR is not uploaded.`,
		Example: "  modelplane versions push fraud-detector ./model --name v25 --runtime xgboost --metadata meta.json --wait 2m",
		Args:    args("MODEL", "DIR"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			meta := map[string]any{}
			skip := ""
			if metadata != "" {
				b, err := os.ReadFile(metadata)
				if err != nil {
					return err
				}
				if err := decode(b, &meta); err != nil {
					return fmt.Errorf("%s: %w", metadata, err)
				}
				if abs, err := filepath.Abs(metadata); err == nil {
					skip = abs
				}
			}
			if name != "" {
				meta["name"] = name
			}
			if runtime != "" {
				meta["runtime"] = runtime
			}
			if meta["name"] == nil {
				return usagef("versions push: --name (or name in --metadata) is required")
			}
			files, err := scanDir(argv[1], skip, chunkSize)
			if err != nil {
				return err
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			b, err := c.push(cmd.Context(), a.uploadsDir(), argv[0], argv[1], meta, files)
			if err != nil {
				return err
			}
			if wait > 0 {
				if b, err = c.awaitValidation(cmd.Context(), argv[0], fmt.Sprint(meta["name"]), b, wait); err != nil {
					return err
				}
			}
			return a.printOne(b, versionFields)
		},
	}
	pf := push.Flags()
	pf.StringVar(&name, "name", "", "the version's name, as v25")
	pf.StringVar(&runtime, "runtime", "", "xgboost, lightgbm, onnxruntime, tokenizer, builtin-llm, vllm, triton, ...")
	pf.StringVar(&metadata, "metadata", "", "JSON file of the version's metadata")
	pf.Int64Var(&chunkSize, "chunk-size", defaultChunkBytes, "bytes per chunk; an interrupted upload resends at most one chunk per file")
	pf.DurationVar(&wait, "wait", 0, "wait up to this long for validation to end (0: print the version as registered)")

	var out string
	download := &cobra.Command{
		Use:   "download MODEL VERSION [--dir DIR]",
		Short: "Download a version's files and verify each against its manifest's sha256",
		Args:  args("MODEL", "VERSION"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			dir := out
			if dir == "" {
				dir = argv[1]
			}
			n, size, err := c.download(cmd.Context(), argv[0], argv[1], dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "%d files, %d bytes, verified, in %s\n", n, size, dir)
			return nil
		},
	}
	download.Flags().StringVarP(&out, "dir", "d", "", "where to write the files (default: a directory named VERSION)")
	return group("versions", "Model versions: list, get, push, download",
		a.listCmd("list MODEL", "List a model's versions", []string{"MODEL"}, func(v []string) string { return "/models/" + esc(v[0]) + "/versions" }, versionCols),
		a.getCmd("get MODEL VERSION", "Show a version with its validation", []string{"MODEL", "VERSION"},
			func(v []string) string { return "/models/" + esc(v[0]) + "/versions/" + esc(v[1]) }, versionFields),
		push, download)
}

// awaitValidation polls the version until it is no longer "registered"
// or wait has passed, and returns the last answer.
func (c *client) awaitValidation(ctx context.Context, model, version string, last []byte, wait time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for n := 1; ; n++ {
		var v struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(last, &v) == nil && v.Status != "registered" {
			return last, nil
		}
		if err := backoff(ctx, min(n, 3)); err != nil {
			return last, nil // still registered when the wait ended: print it as it is
		}
		b, err := c.call(ctx, http.MethodGet, "/models/"+esc(model)+"/versions/"+esc(version), nil, nil)
		if err != nil {
			if ctx.Err() != nil {
				return last, nil
			}
			return nil, err
		}
		last = b
	}
}

// download writes every file of the version's manifest under dir and
// checks each one's sha256; a file that does not match is removed and is
// an error.
func (c *client) download(ctx context.Context, model, version, dir string) (files int, size int64, err error) {
	b, err := c.call(ctx, http.MethodGet, "/models/"+esc(model)+"/versions/"+esc(version), nil, nil)
	if err != nil {
		return 0, 0, err
	}
	var v struct {
		Manifest map[string]string `json:"manifest"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, 0, err
	}
	paths := make([]string, 0, len(v.Manifest))
	for p := range v.Manifest {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		clean := path.Clean(p)
		if clean != p || path.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
			return files, size, fmt.Errorf("manifest path %q leaves the directory", p)
		}
		n, err := c.downloadFile(ctx, model, version, p, v.Manifest[p], filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return files, size, err
		}
		files++
		size += n
	}
	return files, size, nil
}

var errDigest = errors.New("sha256 does not match the manifest")

func (c *client) downloadFile(ctx context.Context, model, version, p, want, dest string) (int64, error) {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = esc(s)
	}
	req, err := c.request(ctx, http.MethodGet, "/models/"+esc(model)+"/versions/"+esc(version)+"/files/"+strings.Join(segs, "/"), nil, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.send(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(dest)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != want {
		err = errDigest
	}
	if err != nil {
		os.Remove(dest)
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}
