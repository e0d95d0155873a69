package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
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
	push := &cobra.Command{
		Use:   "push MODEL DIR --name VERSION [--runtime R] [--metadata FILE]",
		Short: "Register a version from the files of DIR: builds the sha256 manifest and uploads",
		Long: `push registers an immutable version of MODEL from every file under DIR.
It builds the sha256 manifest, uploads the files (retrying a failed upload
with the same Idempotency-Key, so the version is registered once), and
prints the new version with its validation result; --wait waits that long
for the control plane's validation to end.

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
			files, err := manifestOf(argv[1], skip)
			if err != nil {
				return err
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			b, err := c.push(cmd.Context(), argv[0], argv[1], meta, files)
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

// manifestOf lists the regular files under dir by slash path with their
// sha256, leaving out skip (an absolute path). Links and other special
// files are refused: the server would refuse them too.
func manifestOf(dir, skip string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (links are not uploaded)", p)
		}
		if abs, err := filepath.Abs(p); err == nil && abs == skip {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = sum
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no files", dir)
	}
	return out, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// push uploads a version: metadata and manifest parts, then one part per
// file named by its manifest path. Every attempt sends the same body
// (the boundary is fixed) with the same Idempotency-Key, so a retry after
// a lost answer replays the first registration instead of making a
// second.
func (c *client) push(ctx context.Context, model, dir string, meta map[string]any, files map[string]string) ([]byte, error) {
	key := newIdempotencyKey()
	boundary := "modelplane-" + strings.TrimPrefix(key, "mpcli-")
	var total int64
	for p := range files {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		total += fi.Size()
	}
	prog := newProgress(c.warn, total)
	var err error
	for attempt := 1; attempt <= uploadAttempts; attempt++ {
		var b []byte
		prog.restart()
		b, err = c.pushOnce(ctx, model, dir, meta, files, key, boundary, prog)
		if err == nil {
			prog.finish()
			return b, nil
		}
		if !retryable(err) || ctx.Err() != nil || attempt == uploadAttempts {
			break
		}
		fmt.Fprintf(c.warn, "modelplane: upload attempt %d failed (%v); retrying with the same Idempotency-Key\n", attempt, err)
		if berr := backoff(ctx, attempt); berr != nil {
			return nil, berr
		}
	}
	return nil, err
}

func (c *client) pushOnce(ctx context.Context, model, dir string, meta map[string]any, files map[string]string, key, boundary string, prog *progress) ([]byte, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	if err := mw.SetBoundary(boundary); err != nil {
		return nil, err
	}
	go func() { pw.CloseWithError(writeUpload(mw, dir, meta, files, prog)) }()
	req, err := c.request(ctx, http.MethodPost, "/models/"+esc(model)+"/versions", nil, pr)
	if err != nil {
		pr.Close()
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.send(req)
	pr.Close() // ends the writer if the server answered before reading it all
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// writeUpload writes the multipart body in sorted path order, so that
// every attempt's body is the same bytes.
func writeUpload(mw *multipart.Writer, dir string, meta map[string]any, files map[string]string, prog *progress) error {
	for _, part := range []struct {
		name string
		v    any
	}{{"metadata", meta}, {"manifest", files}} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+part.name+`"`)
		h.Set("Content-Type", "application/json")
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if err := json.NewEncoder(w).Encode(part.v); err != nil {
			return err
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		w, err := mw.CreateFormFile(p, p)
		if err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		_, err = io.Copy(w, countingReader{r: f, p: prog})
		f.Close()
		if err != nil {
			return err
		}
	}
	return mw.Close()
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
