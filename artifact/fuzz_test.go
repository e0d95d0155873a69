package artifact

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus under testdata/fuzz")

// fuzzSeeds is the seed corpus of each fuzz target, written to
// testdata/fuzz/<target>/ by go test -run TestFuzzCorpus -update-corpus.
func fuzzSeeds(t testing.TB) map[string]map[string][]byte {
	text := map[string][]byte{
		"config":     []byte(configJSON),
		"xgboost":    []byte(xgboostJSON),
		"lightgbm":   []byte(lightgbmText),
		"vocab":      []byte(vocabText),
		"ini":        []byte("[metadata]\nname = demo\n"),
		"numbered":   []byte("1. Install the model.\n"),
		"split-rune": append(bytes.Repeat([]byte("a"), headSize-1), "日本\n"...),
		"labels":     []byte("cat\ndog\nbird\n"),
		"sentiment":  []byte("Positive\nNegative\nNeutral\n"),
		"bad-int":    []byte("I08\n0" + callPrint),
	}
	pickles := map[string][]byte{
		"pickle4":      pickle4,
		"pickle4-evil": pickle4Evil,
		"pickle2-evil": pickle2Evil,
		"pickle1-evil": pickle1Evil,
		"pickle0-evil": pickle0Evil,
		"pickle0":      pickle0,
		"joblib":       joblibPickle,
		// Protocol 0 that CPython loads and an earlier scan let through.
		"pickle0-hex-int":   []byte("I0x0\n0cbuiltins\nprint\n(S'x'\ntR."),
		"pickle0-octal-int": []byte("I010\n0" + callPrint),
		"pickle0-long-0o":   []byte("L0o7L\n0" + callPrint),
		"pickle0-nan":       []byte("F-nan\n0" + callPrint),
		"pickle0-no-stop":   []byte("cbuiltins\nprint\n(S'x'\ntR\nmore notes\n"),
		"pickle0-nul-int":   []byte("I\x00\n0" + callPrint),
		"pickle1-ulen":      []byte("X\x00\x00\x00\x80"),
	}
	detect := map[string][]byte{
		"safetensors":      validSafetensors,
		"safetensors-1152": safetensorsLen1152,
		"gguf":             validGGUF,
		"onnx":             validONNX,
		"torch-zip":        torchZip(t),
		"joblib-zlib":      zlibBytes(t, joblibPickle),
		"joblib-zfile":     joblibZFile(t),
		"joblib-gzip":      gzipBytes(t, joblibPickle),
		"tar":              versionTar(t),
		"numpy":            []byte("\x93NUMPY\x01\x00v\x00{'descr': '|O'}"),
		"nul":              []byte("text\x00more"),
		"onnx-pickle":      onnxPickle,
	}
	for k, v := range text {
		detect[k] = v
	}
	for k, v := range pickles {
		detect[k] = v
	}
	manifest := func(s string) []byte { return []byte(s) }
	return map[string]map[string][]byte{
		"FuzzDetect": detect,
		"FuzzSafetensorsHeader": {
			"valid":    []byte(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`),
			"scalar":   []byte(`{"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}`),
			"outside":  []byte(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,99]}}`),
			"metadata": []byte(`{"__metadata__":{"n":1}}`),
			"padded":   []byte(`{}      `),
		},
		"FuzzONNX": {
			"valid":       validONNX,
			"truncated":   validONNX[:len(validONNX)-3],
			"no-graph":    cat(pbInt(1, 8), pbString(2, "pytorch")),
			"bad-field":   cat(pbInt(1, 8), pbInt(9, 1)),
			"long-varint": cat([]byte{0x08}, bytes.Repeat([]byte{0xff}, 12)),
			"pickle":      onnxPickle,
		},
		"FuzzParseManifest": {
			"valid":     manifest(`{"model.safetensors":"` + digestA + `","tokenizer/vocab.txt":"` + digestB + `"}`),
			"dotdot":    manifest(`{"../evil":"` + digestA + `"}`),
			"duplicate": manifest(`{"a":"` + digestA + `","a":"` + digestB + `"}`),
			"dir-file":  manifest(`{"a":"` + digestA + `","a/b":"` + digestB + `"}`),
			"escaped":   manifest(`{"\u00e9\/x":"` + digestA + `"}`),
		},
		"FuzzScanPickle": pickles,
		"FuzzJSONScanner": {
			"config":  []byte(configJSON),
			"xgboost": []byte(xgboostJSON),
			"numbers": []byte(`[0, -0, 1.5, -2e10, 3E+2, 4e-3, 12345678901234567890]`),
			"escapes": []byte(`{"a\u00e9\n\"": "\\ \/ \b \f \r \t"}`),
			"scalars": []byte(` true `),
			"nested":  []byte(`{"a":[{"b":[[],{}]},null,false]}`),
			"invalid": []byte(`[1,]`),
		},
		"FuzzCheckTar": {
			"version":    versionTar(t),
			"version-gz": gzipBytes(t, versionTar(t)),
			"dotdot":     tarFile(t, tarEntry{name: "../evil", body: []byte("x\n")}),
			"symlink":    tarFile(t, tarEntry{name: "a", typeflag: '2', link: "/etc/passwd"}),
			"pickle":     tarFile(t, tarEntry{name: "m.bin", body: pickle4Evil}),
			"gzip-bomb":  gzipBomb(t, 5),
		},
	}
}

// TestFuzzCorpus rewrites the seed corpus when asked, and otherwise checks
// each fuzz target has one.
func TestFuzzCorpus(t *testing.T) {
	for target, seeds := range fuzzSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		if !*updateCorpus {
			if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
				t.Errorf("%s has no seed corpus (%v); run go test -run TestFuzzCorpus -update-corpus", dir, err)
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkDetect runs Detect on b under name, whole and one byte per read,
// and checks both agree and the only errors are rejections.
func checkDetect(t *testing.T, name string, b []byte) (Format, error) {
	t.Helper()
	f, err := Detect(name, bytes.NewReader(b), int64(len(b)))
	f1, err1 := Detect(name, iotest.OneByteReader(bytes.NewReader(b)), int64(len(b)))
	if f != f1 || fmt.Sprint(err) != fmt.Sprint(err1) {
		t.Fatalf("Detect(%s) = %q, %v; one byte per read = %q, %v", name, f, err, f1, err1)
	}
	if err != nil {
		var r *Rejection
		if !errors.Is(err, ErrRejected) || !errors.As(err, &r) || r.Path != name {
			t.Fatalf("Detect(%s) error %v is not a rejection naming the file", name, err)
		}
		return "", err
	}
	switch f {
	case FormatSafetensors, FormatONNX, FormatGGUF, FormatXGBoostJSON, FormatLightGBM, FormatJSON, FormatText:
	default:
		t.Fatalf("Detect(%s) = unknown format %q", name, f)
	}
	return f, nil
}

func FuzzDetect(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, name := range []string{"model", "config.json", "model.bin"} {
			got, _ := checkDetect(t, name, b)
			if got != "" && !got.IsModel() || got == FormatLightGBM || got == FormatXGBoostJSON {
				if p := scanPickle(b, true); p.found {
					t.Fatalf("Detect(%s, %q) accepts %s that scans as a pickle: %+v", name, b, got, p)
				}
			}
		}
	})
}

func FuzzSafetensorsHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, hdr []byte) {
		const dataLen = 16
		err := parseSafetensorsHeader(hdr, dataLen)
		if err != nil || len(hdr) < 2 || hdr[0] != '{' {
			return
		}
		// A header the parser accepts makes a file Detect accepts, unless
		// the file also unpickles to a call.
		file := safetensorsFile(string(hdr), make([]byte, dataLen))
		p := scanPickle(file, true)
		if got, err := checkDetect(t, "model.safetensors", file); got != FormatSafetensors && !p.called && !p.limit {
			t.Fatalf("Detect of a file with accepted header %q = %q, %v, want safetensors", hdr, got, err)
		}
	})
}

func FuzzONNX(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		err := checkONNX(bytes.NewReader(b), int64(len(b)))
		err1 := checkONNX(iotest.OneByteReader(bytes.NewReader(b)), int64(len(b)))
		if fmt.Sprint(err) != fmt.Sprint(err1) {
			t.Fatalf("checkONNX = %v, one byte per read = %v", err, err1)
		}
		if err == nil {
			if got, err := checkDetect(t, "model.onnx", b); got != FormatONNX && got != "" {
				t.Fatalf("Detect of a valid ModelProto = %q, %v", got, err)
			}
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("ParseManifest error %v does not wrap ErrRejected", err)
			}
			return
		}
		for p, d := range m {
			if CheckPath(p) != nil || !IsDigest(d) {
				t.Fatalf("ParseManifest accepted %q: %q", p, d)
			}
		}
		back, err := ParseManifest(m.Canonical())
		if err != nil || back.URI() != m.URI() || len(back) != len(m) {
			t.Fatalf("ParseManifest(Canonical()) = %v, %v, want %v", back, err, m)
		}
	})
}

func FuzzScanPickle(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		whole := scanPickle(b, true)
		prefix := scanPickle(b, false)
		if whole.found && !prefix.found {
			t.Fatalf("scanPickle(%q) finds a complete pickle but not a prefix", b)
		}
		// Fed one byte at a time, the scan comes to the same verdict.
		s := newPickleScanner(int64(len(b)))
		for i := range b {
			s.write(b[i : i+1])
		}
		if got := s.end(true); got != whole {
			t.Fatalf("scanPickle(%q) = %+v, one byte at a time %+v", b, whole, got)
		}
	})
}

func FuzzCheckTar(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckTar(bytes.NewReader(b), Limits{MaxFileBytes: 1 << 20, MaxTotalBytes: 4 << 20})
		if err != nil && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("CheckTar error %v is not a rejection", err)
		}
	})
}

func FuzzJSONScanner(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var s jsonScanner
		err := s.write(b)
		if err == nil {
			err = s.end()
		}
		if got, want := err == nil, json.Valid(b); got != want {
			t.Fatalf("jsonScanner on %q: valid %v (%v), json.Valid says %v", b, got, err, want)
		}
		if err == nil {
			var v any
			if json.Unmarshal(b, &v) == nil {
				m, ok := v.(map[string]any)
				_, learner := m["learner"]
				if wantXGB := ok && learner && !bytes.Contains(b, []byte(`\`)); wantXGB && s.format() != FormatXGBoostJSON {
					t.Fatalf("jsonScanner on %q: format %s, want xgboost-json", b, s.format())
				}
			}
		}
	})
}
