package triton

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"modelplane/agent/catalog"
	"modelplane/busapi"
)

// WriteRepository writes the model repository of a replica serving
// v.Model from the files in v.ModelDir into dir, made afresh (whatever
// was there is removed): the generated config.pbtxt beside version 1, a
// link to v.ModelDir. settings are the replica's runtime settings (the
// endpoint's batching) and gpus the number of GPUs it sees. The runtime
// user reads the repository, so it is not private; it holds no secret.
// It returns what it wrote, by path relative to dir, sorted, for the
// launch a heartbeat reports.
func WriteRepository(dir string, v catalog.Vars, settings json.RawMessage, gpus int) ([]busapi.LaunchFile, error) {
	entries, err := os.ReadDir(v.ModelDir)
	if err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	cfgs, links, err := catalog.TritonRepository(v, names, settings, gpus)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var files []busapi.LaunchFile
	for rel, body := range cfgs {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		files = append(files, busapi.LaunchFile{Path: rel, Content: body})
	}
	for rel, target := range links {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		if err := os.Symlink(target, p); err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		files = append(files, busapi.LaunchFile{Path: rel, Link: target})
	}
	slices.SortFunc(files, func(a, b busapi.LaunchFile) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}
