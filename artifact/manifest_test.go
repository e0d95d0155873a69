package artifact

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	digestA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestParseManifest(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`{"model.safetensors":"` + digestA + `", "tokenizer/vocab.txt": "` + digestB + `"}`))
	if err != nil {
		t.Fatalf("ParseManifest: %v", err)
	}
	want := Manifest{"model.safetensors": digestA, "tokenizer/vocab.txt": digestB}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("ParseManifest = %v, want %v", m, want)
	}
}

func TestParseManifestRejects(t *testing.T) {
	t.Parallel()
	entry := func(p string) string { return fmt.Sprintf(`{%q:%q}`, p, digestA) }
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"not json", `nope`, "manifest must be a json object of file path to sha256"},
		{"array", `["a"]`, "manifest must be a json object of file path to sha256"},
		{"empty", `{}`, "manifest lists no files"},
		{"trailing data", entry("a") + `x`, "manifest has data after the json object"},
		{"broken json", `{"a":"` + digestA + `",}`, "manifest is not valid json: invalid character '}' looking for beginning of object key string"},
		{"dot dot", entry("../evil"), `../evil: path must not contain ..`},
		{"inner dot dot", entry("a/../../evil"), `a/../../evil: path must not contain ..`},
		{"absolute", entry("/etc/passwd"), `/etc/passwd: path must be relative`},
		{"backslash", entry(`a\b`), `a\b: path must use / not backslashes`},
		{"empty path", entry(""), "path is empty"},
		{"dot slash", entry("./a"), `./a: path must be clean (no empty or . elements, no trailing /)`},
		{"double slash", entry("a//b"), `a//b: path must be clean (no empty or . elements, no trailing /)`},
		{"trailing slash", entry("a/"), `a/: path must be clean (no empty or . elements, no trailing /)`},
		{"dot", entry("."), `.: path must be clean (no empty or . elements, no trailing /)`},
		{"control character", entry("a\nb"), `"a\nb": path contains control characters`},
		{"duplicate", `{"a":"` + digestA + `","a":"` + digestB + `"}`, "a: listed twice in the manifest"},
		{"duplicate by escape", `{"a":"` + digestA + `","\u0061":"` + digestB + `"}`, "a: listed twice in the manifest"},
		{"file and directory", `{"a":"` + digestA + `","a/b":"` + digestB + `"}`, "a: listed as a file but used as a directory by a/b"},
		{"uppercase digest", `{"a":"` + strings.ToUpper(digestA) + `"}`, "a: manifest digest must be 64 lowercase hex characters (sha256)"},
		{"short digest", `{"a":"abc"}`, "a: manifest digest must be 64 lowercase hex characters (sha256)"},
		{"digest with prefix", `{"a":"sha256:` + digestA[7:] + `"}`, "a: manifest digest must be 64 lowercase hex characters (sha256)"},
		{"number digest", `{"a":1}`, "a: manifest value must be a sha256 string"},
		{"invalid utf-8", "{\"\xff\":\"" + digestA + "\"}", "manifest is not utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(tt.in))
			if err == nil {
				t.Fatalf("ParseManifest(%q) = %v, want error %q", tt.in, m, tt.want)
			}
			if !errors.Is(err, ErrRejected) {
				t.Errorf("ParseManifest(%q) error %v does not wrap ErrRejected", tt.in, err)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseManifest(%q) error\n got %q\nwant %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestParseManifestTooManyFiles(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("{")
	for i := range MaxManifestFiles + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"f%d":"%s"`, i, digestA)
	}
	b.WriteString("}")
	_, err := ParseManifest([]byte(b.String()))
	if want := fmt.Sprintf("manifest lists more than %d files", MaxManifestFiles); err == nil || err.Error() != want {
		t.Errorf("ParseManifest of %d files = %v, want %q", MaxManifestFiles+1, err, want)
	}
}

func TestManifestCanonicalAndURI(t *testing.T) {
	t.Parallel()
	m := Manifest{"z<&>.json": digestB, "a/b.txt": digestA, "é.txt": digestA}
	wantJSON := `{"a/b.txt":"` + digestA + `","z<&>.json":"` + digestB + `","é.txt":"` + digestA + `"}`
	if got := string(m.Canonical()); got != wantJSON {
		t.Errorf("Canonical() =\n %s\nwant\n %s", got, wantJSON)
	}
	want := "sha256-manifest:" + digestOf([]byte(wantJSON))
	for range 5 { // map order must not matter
		if got := m.URI(); got != want {
			t.Fatalf("URI() = %s, want %s", got, want)
		}
	}
	if back, err := ParseManifest(m.Canonical()); err != nil || back.URI() != want {
		t.Errorf("ParseManifest(Canonical()) = %v, %v, want the same URI", back, err)
	}
}
