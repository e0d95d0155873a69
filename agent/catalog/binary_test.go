package catalog_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"modelplane/agent/catalog"
)

// TestRealBinariesAcceptTheGeneratedFlags is opt-in: where vllm,
// tritonserver or llama-server is on PATH (a GPU machine), it asks the
// real binary's --help for every flag the generator writes, so a release
// that renamed one fails here. Without the binary it is skipped, saying
// so. It is not one of the counted tests: the development machines have
// none of these binaries.
func TestRealBinariesAcceptTheGeneratedFlags(t *testing.T) {
	spec := &catalog.Speculative{Model: "/d", NumTokens: 5}
	full := catalog.LLM{DType: "float16", MaxModelLen: 4096, GPUMemoryUtilization: 0.9, MaxNumSeqs: 8, PrefixCaching: true,
		Quantization: "awq", Speculative: spec}
	l := catalog.Launch{ModelDir: "/m", Host: "127.0.0.1", Port: 1, GPUs: 1, ServedName: "m", MetricsPort: 2}
	for _, c := range []struct {
		bin  string
		help []string
		argv []string
	}{
		{"vllm", []string{"serve", "--help=all"}, catalog.VLLMArgs(l, full)},
		{"tritonserver", []string{"--help"}, catalog.TritonArgs("/repo", l)},
		{"llama-server", []string{"--help"}, catalog.LlamaServerArgs("/m/model.gguf", l, full)},
	} {
		t.Run(c.bin, func(t *testing.T) {
			path, err := exec.LookPath(c.bin)
			if err != nil {
				t.Skipf("%s is not on PATH; install it to check the generated flags against it (docs/llm-runtimes.md)", c.bin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, _ := exec.CommandContext(ctx, path, c.help...).CombinedOutput()
			for _, a := range c.argv {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				flag, _, _ := strings.Cut(a, "=")
				if !strings.Contains(string(out), flag) {
					t.Errorf("%s %s does not list %s", c.bin, strings.Join(c.help, " "), flag)
				}
			}
		})
	}
}
