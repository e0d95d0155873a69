package tokenizer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/runtime"
	"modelplane/runtime/tokenizer"
	"modelplane/serveapi"
)

var sentences = []string{
	"Please pay the attached invoice by Friday.",
	"The contract is signed by both parties.",
	"My order never arrived, please help.",
}

// serveTokenizer serves a tokenizer.json trained on sentences through the
// runtime, as a replica of the tokenizer runtime would be.
func serveTokenizer(t *testing.T, maxLength int) string {
	t.Helper()
	b, err := tokenizer.Train(sentences, 500, 1, maxLength)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(serveapi.Config{Model: "tok", Version: "v1", Format: "tokenizer",
		SampleInputs: []json.RawMessage{json.RawMessage(`{"text": "warm up"}`)}})
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open(dir, nil, runtime.Options{Tensors: map[string]runtime.TensorOpener{"tokenizer": tokenizer.Open}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return hs.URL
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Over V2 a request's texts come back as ids padded to its longest text,
// the mask marking the padding, and [CLS] … [SEP] around each; over
// /predict each instance's text is one row, unpadded.
func TestServedOverV2AndPredict(t *testing.T) {
	t.Parallel()
	url := serveTokenizer(t, 0)
	status, body := post(t, url+"/v2/models/tok/infer",
		`{"inputs":[{"name":"text","datatype":"BYTES","shape":[2],"data":["pay the invoice","the contract is signed by both parties"]}]}`)
	if status != http.StatusOK {
		t.Fatalf("infer: %d %s", status, body)
	}
	var a struct {
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
			Data  []int64 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Outputs) != 3 || a.Outputs[0].Name != "input_ids" || a.Outputs[1].Name != "attention_mask" || a.Outputs[2].Name != "token_type_ids" {
		t.Fatalf("outputs %s", body)
	}
	ids, mask := a.Outputs[0], a.Outputs[1]
	// pay the invoice: [CLS] pay the invoice [SEP] and 4 pads; the other: 9.
	if want := []int64{2, 9}; ids.Shape[0] != want[0] || ids.Shape[1] != want[1] {
		t.Fatalf("input_ids shape %v, want %v", ids.Shape, want)
	}
	wantMask := []int64{1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	for i, m := range wantMask {
		if mask.Data[i] != m {
			t.Fatalf("attention_mask %v, want %v", mask.Data, wantMask)
		}
	}
	if ids.Data[0] != 2 || ids.Data[4] != 3 || ids.Data[5] != 0 || ids.Data[9] != 2 || ids.Data[17] != 3 {
		t.Errorf("input_ids %v: want [CLS]=2 first, [SEP]=3 last, [PAD]=0 padding", ids.Data)
	}
	status, body = post(t, url+"/predict", `{"instances":[{"text":"pay the invoice"},{"text":"help"}]}`)
	if status != http.StatusOK || !strings.Contains(body, `"attention_mask":[1,1,1]`) || !strings.Contains(body, `"attention_mask":[1,1,1,1,1]`) {
		t.Fatalf("predict: %d %s", status, body)
	}
}

// A file's max_length holds a text to that many tokens, [CLS] and [SEP]
// included.
func TestTruncation(t *testing.T) {
	t.Parallel()
	b, err := tokenizer.Train(sentences, 500, 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	e, err := tok.Encode("the contract is signed by both parties")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.IDs) != 6 || e.IDs[0] != 2 || e.IDs[5] != 3 {
		t.Fatalf("ids %v; want 6 of them, [CLS]=2 … [SEP]=3", e.IDs)
	}
}

// A component the package does not implement is refused by name.
func TestRefusesUnknownComponents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, want string }{
		{`{"model":{"type":"Unigram","vocab":[["a",0]]}}`, "model"},
		{`{"pre_tokenizer":{"type":"Metaspace"},"model":{"type":"WordPiece","vocab":{"[UNK]":0}}}`, `pre_tokenizer "Metaspace" is not supported`},
		{`{"normalizer":{"type":"Precompiled"},"model":{"type":"WordPiece","vocab":{"[UNK]":0}}}`, `normalizer "Precompiled" is not supported`},
		{`{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `unk_token "[UNK]" is not in the vocabulary`},
	} {
		if _, err := tokenizer.Parse([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v; want an error with %q", tc.file, err, tc.want)
		}
	}
}
