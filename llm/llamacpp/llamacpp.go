// Package llamacpp runs llama.cpp on a GGUF file as the built-in LLM
// engine's oracle (its tokens) and peer (its speed): the prebuilt CPU
// build that npm's node-llama-cpp installs, driven by token ids through
// peer.mjs, one JSON request on stdin and one answer on stdout.
//
// It installs node-llama-cpp into a cache directory outside any
// repository, once; when node or npm is missing or the registry is
// unreachable, Open says so and callers skip the comparison with that
// line. It imports nothing of the engine: it deals in paths and token ids.
package llamacpp

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the node-llama-cpp release installed, with its prebuilt
// linux-x64 CPU binaries.
const Version = "3.22.1"

//go:embed peer.mjs
var script []byte

// ErrUnavailable is wrapped by Open's error when node, npm or the package
// cannot be had: the caller skips the peer.
var ErrUnavailable = errors.New("llama.cpp peer unavailable")

// Peer is an installed node-llama-cpp.
type Peer struct {
	dir    string // holds node_modules/node-llama-cpp
	script string
}

// DefaultDir is where Open installs the package: $MP_LLAMACPP_DIR, or
// modelplane/llamacpp under the user's cache directory.
func DefaultDir() string {
	if d := os.Getenv("MP_LLAMACPP_DIR"); d != "" {
		return d
	}
	c, err := os.UserCacheDir()
	if err != nil {
		c = os.TempDir()
	}
	return filepath.Join(c, "modelplane", "llamacpp")
}

// Open returns the peer installed in dir, installing it with npm first
// when it is not there.
func Open(ctx context.Context, dir string) (*Peer, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("%w: node is not installed", ErrUnavailable)
	}
	pkg := filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")
	if !installed(pkg) {
		if _, err := exec.LookPath("npm"); err != nil {
			return nil, fmt.Errorf("%w: npm is not installed", ErrUnavailable)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--omit=optional",
			"node-llama-cpp@"+Version, "@node-llama-cpp/linux-x64@"+Version)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%w: npm install node-llama-cpp@%s: %v: %s", ErrUnavailable, Version, err, lastLine(out))
		}
		if !installed(pkg) {
			return nil, fmt.Errorf("%w: npm installed no node-llama-cpp@%s in %s", ErrUnavailable, Version, dir)
		}
	}
	s := filepath.Join(dir, "modelplane-peer.mjs")
	if err := os.WriteFile(s, script, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return &Peer{dir: dir, script: s}, nil
}

func installed(pkg string) bool {
	b, err := os.ReadFile(pkg)
	if err != nil {
		return false
	}
	var p struct {
		Version string `json:"version"`
	}
	return json.Unmarshal(b, &p) == nil && p.Version == Version
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// call runs one request through peer.mjs and decodes its answer.
func (p *Peer) call(ctx context.Context, req map[string]any, out any) error {
	req["dir"] = p.dir
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "node", p.script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("llama.cpp %s: %v: %s", req["mode"], err, lastLine(stderr.Bytes()))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("llama.cpp %s answer: %w", req["mode"], err)
	}
	return nil
}

// Build names the llama.cpp build the peer runs and the CPU features it
// found.
func (p *Peer) Build(ctx context.Context) (string, error) {
	var r struct{ Build, System string }
	if err := p.call(ctx, map[string]any{"mode": "info"}, &r); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s; %s", r.Build, Version, strings.TrimSpace(r.System)), nil
}

// Greedy returns llama.cpp's steps greedy tokens after prompt (argmax of
// its logits, the lowest id on a tie).
func (p *Peer) Greedy(ctx context.Context, model string, prompt []int, steps int) ([]int, error) {
	var r struct{ Tokens []int }
	err := p.call(ctx, map[string]any{"mode": "greedy", "model": model, "prompt": prompt, "steps": steps}, &r)
	return r.Tokens, err
}

// Top1 returns, for each prefix tokens[:i+1], the token llama.cpp's
// logits rank first after it.
func (p *Peer) Top1(ctx context.Context, model string, tokens []int) ([]int, error) {
	var r struct{ Top1 []int }
	err := p.call(ctx, map[string]any{"mode": "top1", "model": model, "tokens": tokens}, &r)
	return r.Top1, err
}

// Speed is llama.cpp's decode speed on a model.
type Speed struct {
	Batch1 float64 `json:"tokens_per_s_batch1"` // one sequence
	Seqs   float64 `json:"tokens_per_s_seqs"`   // all of Speed's seqs at once, aggregate
	// The same over the node process's CPU time (user and system): what
	// one dedicated core would give, on a machine shared with other work.
	CPUBatch1 float64 `json:"cpu_tokens_per_s_batch1"`
	CPUSeqs   float64 `json:"cpu_tokens_per_s_seqs"`
}

// Speed measures decode tokens/s on threads threads: prompt prefilled
// (not timed), then decode tokens, one at a time, alone and in each of
// seqs sequences at once (one batched decode a step).
func (p *Peer) Speed(ctx context.Context, model string, threads, decode, seqs int, prompt []int) (Speed, error) {
	var r Speed
	err := p.call(ctx, map[string]any{"mode": "speed", "model": model, "threads": threads, "decode": decode,
		"seqs": seqs, "prompt": prompt}, &r)
	return r, err
}
