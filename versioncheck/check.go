package versioncheck

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"time"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime"
	"modelplane/runtime/llmserve"
	"modelplane/runtime/onnx"
)

// Report is what the child prints on stdout, one JSON object: the answers
// and timings, or why the version is invalid, or why it could not be run
// here at all (Unavailable: no ONNX Runtime library on the control plane),
// which says nothing of the version.
type Report struct {
	Invalid     string            `json:"invalid,omitempty"`
	Unavailable string            `json:"unavailable,omitempty"`
	Outputs     []json.RawMessage `json:"outputs,omitempty"`
	LoadMS      float64           `json:"load_ms"`
	LatencyMS   float64           `json:"latency_ms"`
	// MemoryMB is what a GGUF model needs to run (llm.MemoryNeed with the
	// K/V cache the version's serving.llm sizes), in MiB, rounded up; 0
	// for other models.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// NotLoaded says the GGUF model was not loaded: its need is above the
	// child's own memory limit, so a load would only crash the child. The
	// need and the header's checks stand.
	NotLoaded bool `json:"not_loaded,omitempty"`
}

// Check loads the model directory as a replica would (its configuration's
// features and output mapping) and answers the configuration's sample
// inputs in one batch. It runs in the child process.
func Check(ctx context.Context, dir string, openers map[string]runtime.Opener, tensors map[string]runtime.TensorOpener) Report {
	return check(ctx, dir, openers, tensors, 0)
}

// check is Check in a child whose address space is limitMB (0: none).
func check(ctx context.Context, dir string, openers map[string]runtime.Opener, tensors map[string]runtime.TensorOpener, limitMB int64) Report {
	if path, ok, err := runtime.GGUFPath(dir); err != nil {
		return Report{Invalid: err.Error()}
	} else if ok {
		return checkGGUF(ctx, dir, path, limitMB)
	}
	cfg, err := runtime.ReadConfig(dir)
	if err != nil {
		return Report{Invalid: err.Error()}
	}
	if cfg.Format == "onnx" {
		if _, err := onnx.RuntimeVersion(); err != nil {
			return Report{Unavailable: err.Error()}
		}
	}
	s := runtime.New(runtime.Options{Tensors: tensors})
	start := time.Now()
	if err := s.Load(dir, openers); err != nil {
		if errors.Is(err, onnx.ErrNoLibrary) {
			return Report{Unavailable: err.Error()}
		}
		return Report{Invalid: strings.TrimPrefix(err.Error(), "load "), LoadMS: ms(time.Since(start))}
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
	rep := Report{LoadMS: ms(time.Since(start))}
	if len(cfg.SampleInputs) == 0 && len(cfg.Features) == 0 {
		// A tensor model without samples: its signature is the graph's,
		// and loading it into the runtime was the check.
		return rep
	}
	start = time.Now()
	out, err := s.Answer(ctx, cfg.SampleInputs)
	rep.LatencyMS = ms(time.Since(start))
	if err != nil {
		rep.Invalid = "inference: " + err.Error()
		return rep
	}
	rep.Outputs = out
	return rep
}

// checkGGUF checks a GGUF LLM: its memory need from the header (which
// refuses an architecture or tensor type the engine does not run, or a
// truncated file), then a load of the model and one generated token,
// unless the need is above limitMB, the child's own limit.
func checkGGUF(ctx context.Context, dir, path string, limitMB int64) Report {
	f, err := gguf.Open(path)
	if err != nil {
		return Report{Invalid: err.Error()}
	}
	c, err := llm.ReadConfig(f)
	_ = f.Close()
	if err != nil {
		return Report{Invalid: err.Error()}
	}
	// The K/V cache is sized as the replica's engine will size it: by the
	// version's serving.llm block, which the model directory's
	// configuration carries.
	set, err := runtime.GGUFSettings(dir)
	if err != nil {
		return Report{Invalid: err.Error()}
	}
	need, err := llm.MemoryNeed(path, set.Pages(c.Context)*llmserve.PageTokens)
	if err != nil {
		return Report{Invalid: err.Error()}
	}
	rep := Report{MemoryMB: (need + 1<<20 - 1) >> 20}
	if limitMB > 0 && rep.MemoryMB > limitMB {
		rep.NotLoaded = true
		return rep
	}
	s := runtime.New(runtime.Options{})
	start := time.Now()
	if err := s.Load(dir, nil); err != nil {
		rep.Invalid = strings.TrimPrefix(err.Error(), "load ")
		return rep
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
	rep.LoadMS = ms(time.Since(start))
	start = time.Now()
	if err := s.Warm(ctx); err != nil {
		rep.Invalid = err.Error()
	}
	rep.LatencyMS = ms(time.Since(start))
	return rep
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// exitInvalid is the exit status of a child that found the version invalid;
// 0 means it answered, any other status or a signal is a crash.
const exitInvalid = 3

// ChildLimits are what a validation child holds itself to, set before it
// reads any file of the version. The control plane passes them as flags.
type ChildLimits struct {
	// MemoryMB is its address space (RLIMIT_AS; 0: none).
	MemoryMB int64
	// CPUSeconds is the CPU time of all its threads (RLIMIT_CPU; 0: none).
	CPUSeconds int64
	// MaxProcesses bounds its user's processes and threads (RLIMIT_NPROC;
	// 0: none, as when it runs as the control plane's own user, whose
	// count it would share).
	MaxProcesses int64
}

// RunChild is `modelplane runtime validate`: it sets its limits on itself
// (address space, open files, processes, CPU time, file size, no core, no
// new privileges, a seccomp filter; the parent's time limit kills it if it
// hangs), runs Check and prints the Report. It returns the exit status.
func RunChild(ctx context.Context, dir string, lim ChildLimits, openers map[string]runtime.Opener, tensors map[string]runtime.TensorOpener) int {
	if err := limitSelf(lim); err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(Report{Unavailable: "set the validation sandbox: " + err.Error()})
		return 1
	}
	rep := check(ctx, dir, openers, tensors, lim.MemoryMB)
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	if rep.Invalid != "" {
		return exitInvalid
	}
	return 0
}
