package replica

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParsePredict: any body either parses into 1..max canonical instances
// whose canonical form is stable, or fails with an error that quotes nothing
// of the input.
func FuzzParsePredict(f *testing.F) {
	for _, seed := range []string{
		`{"instances":[{"amount":12.5,"merchant_category":"grocery","country":"DE"}]}`,
		`{"instances":[1,"a",null,true,[1,2],{"b":1,"a":[{}]}],"parameters":{}}`,
		`{"instances":[]}`,
		`{"instances":[1.0e3, -0, 12345678901234567890]}`,
		`{"instances":[` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `]}`,
		`[1]`, `{`, `{"instances":[1]} x`,
	} {
		f.Add([]byte(seed))
	}
	const maxInstances = 16
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := parsePredict(body, maxInstances)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with instances", err)
			}
			if len(body) >= 8 && strings.Contains(err.Error(), string(body)) {
				t.Fatalf("error %q quotes the body", err)
			}
			return
		}
		if len(got) == 0 || len(got) > maxInstances {
			t.Fatalf("%d instances; want 1..%d", len(got), maxInstances)
		}
		for _, inst := range got {
			again, err := canonical(inst)
			if err != nil || !bytes.Equal(again, inst) {
				t.Fatalf("canonical(%q) = %q, %v; want it unchanged", inst, again, err)
			}
		}
	})
}

// FuzzParseChat: any body either parses into a request with at least one
// prompt token and an output length in range, or fails.
func FuzzParseChat(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5,"stream":true,"user":"u1"}`,
		`{"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"héllo"}]}]}`,
		`{"messages":[{"role":"assistant","content":null}],"max_completion_tokens":1,"n":1}`,
		`{"messages":[]}`, `{"messages":[{"role":"user","content":5}]}`, `{"messages":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	const defaultMax, maxTokens = 8, 64
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseChat(body, defaultMax, maxTokens)
		if err != nil {
			return
		}
		if p.promptTokens < 1 {
			t.Fatalf("prompt tokens %d; want at least 1", p.promptTokens)
		}
		if p.outputTokens < 1 || p.outputTokens > maxTokens || (!p.capped && p.outputTokens != defaultMax) {
			t.Fatalf("output tokens %d (capped %v); want 1..%d, %d when not capped", p.outputTokens, p.capped, maxTokens, defaultMax)
		}
	})
}
