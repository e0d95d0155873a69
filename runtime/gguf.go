package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"modelplane/runtime/llmserve"
	"modelplane/serveapi"
)

// FormatGGUF is the registry's format of a GGUF LLM, which the runtime
// serves with its LLM engine (package llmserve) instead of the batcher.
const FormatGGUF = "gguf"

// generative is a loaded GGUF model: the engine and its OpenAI server.
type generative struct {
	eng            *llmserve.Engine
	srv            *llmserve.Server
	handler        http.Handler
	model, version string
}

// ggufModel finds the GGUF file a model directory asks for: the
// configuration's file when its format is gguf, else the directory's only
// .gguf file when it has no configuration. ok is false for any other
// model.
func ggufModel(dir string) (name, version, path string, ok bool, err error) {
	if _, err := os.Stat(filepath.Join(dir, serveapi.ConfigFile)); err == nil {
		b, err := os.ReadFile(filepath.Join(dir, serveapi.ConfigFile))
		if err != nil {
			return "", "", "", false, err
		}
		var head struct{ Model, Version, Format, File string }
		if json.Unmarshal(b, &head) != nil || head.Format != FormatGGUF {
			return "", "", "", false, nil
		}
		file := head.File
		if file == "" {
			if file, err = onlyGGUF(dir); err != nil {
				return "", "", "", false, err
			}
		}
		if !filepath.IsLocal(file) {
			return "", "", "", false, fmt.Errorf("file %q is not inside the model directory", file)
		}
		return head.Model, head.Version, filepath.Join(dir, file), true, nil
	}
	file, err := onlyGGUF(dir)
	if err != nil {
		return "", "", "", false, nil // not a GGUF directory: the usual error follows
	}
	return strings.TrimSuffix(file, filepath.Ext(file)), "", filepath.Join(dir, file), true, nil
}

func onlyGGUF(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.EqualFold(filepath.Ext(e.Name()), ".gguf") {
			found = append(found, e.Name())
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("want exactly one .gguf file in the model directory, found %d", len(found))
	}
	return found[0], nil
}

// GGUFSettings are the engine's sizes from a model directory's
// configuration (its llm block, the version's serving.llm); the defaults
// when it has none.
func GGUFSettings(dir string) (llmserve.Settings, error) {
	var set llmserve.Settings
	b, err := os.ReadFile(filepath.Join(dir, serveapi.ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return set, nil
	}
	if err != nil {
		return set, err
	}
	var head struct {
		LLM json.RawMessage `json:"llm"`
	}
	if json.Unmarshal(b, &head) != nil || len(head.LLM) == 0 || string(head.LLM) == "null" {
		return set, nil
	}
	if err := json.Unmarshal(head.LLM, &set); err != nil {
		return set, fmt.Errorf("%s: llm: %w", serveapi.ConfigFile, err)
	}
	return set, nil
}

// loadGGUF starts the LLM engine on a GGUF file, sized by the version's
// serving.llm settings (llmserve.Settings: context window, batch, KV
// cache, queue bound).
func (s *Server) loadGGUF(name, version, path string, set llmserve.Settings) error {
	eng, tok, err := llmserve.Open(path, set)
	if err != nil {
		return fmt.Errorf("load %s: %w", filepath.Base(path), err)
	}
	srv := llmserve.NewServer(eng, tok, llmserve.Options{Model: name, Token: s.opt.Token,
		MaxBodyBytes: s.opt.MaxBodyBytes, ReplicaID: s.opt.ReplicaID, Version: version})
	s.gen.Store(&generative{eng: eng, srv: srv, handler: srv.Handler(), model: name, version: version})
	return nil
}

// warm generates one token, so the first request finds the model
// paged in.
func (g *generative) warm(ctx context.Context) error {
	_, ev, err := g.eng.Submit(llmserve.Request{Prompt: []int{0}, MaxTokens: 1})
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for {
		select {
		case e := <-ev:
			if e.Done {
				if e.Err != nil {
					return fmt.Errorf("warm-up: %w", e.Err)
				}
				return nil
			}
		case <-ctx.Done():
			return errors.New("warm-up: cancelled")
		}
	}
}

// GGUFPath is the GGUF file a model directory serves, as Load finds it;
// ok is false for a directory of any other model.
func GGUFPath(dir string) (path string, ok bool, err error) {
	_, _, path, ok, err = ggufModel(dir)
	return path, ok, err
}
