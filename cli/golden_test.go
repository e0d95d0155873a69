package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of the table output")

// TestTableGolden renders fixed API answers as the client's tables and
// compares them with testdata/*.golden (go test -run TableGolden -update
// rewrites them after a deliberate change).
func TestTableGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cols   []column
		fields bool // one object (the index-th) as field lines, else a table
		index  int
	}{
		{"endpoints", endpointCols, false, 0},
		{"versions", versionCols, false, 0},
		{"rollouts", rolloutCols, false, 0},
		{"version-fields", versionFields, true, 0},
		{"version-invalid-fields", versionFields, true, 1},
		{"endpoint-fields", endpointFields, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := map[string]string{"version-fields": "versions", "version-invalid-fields": "versions", "endpoint-fields": "endpoints"}[tc.name]
			if src == "" {
				src = tc.name
			}
			raw, err := os.ReadFile(filepath.Join("testdata", src+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			a := &app{env: Env{Stdout: &out}, output: "table"}
			if tc.fields {
				var items []json.RawMessage
				if err := json.Unmarshal(raw, &items); err != nil {
					t.Fatal(err)
				}
				err = a.printOne(items[tc.index], tc.cols)
			} else {
				var items []json.RawMessage
				if err := json.Unmarshal(raw, &items); err != nil {
					t.Fatal(err)
				}
				err = a.printItems(items, tc.cols)
			}
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("table differs from %s:\ngot:\n%s\nwant:\n%s", golden, out.Bytes(), want)
			}
		})
	}
}

// TestYAMLKeepsNumbers checks -o yaml prints the API's numbers as numbers.
func TestYAMLKeepsNumbers(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	a := &app{env: Env{Stdout: &out}, output: "yaml"}
	if err := a.printOne([]byte(`{"weight":95,"share":0.25,"name":"v23"}`), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "name: v23\nshare: 0.25\nweight: 95\n"; got != want {
		t.Errorf("yaml:\n%s\nwant:\n%s", got, want)
	}
}

// TestProgressOffATerminal checks that an upload reported to a file or a
// pipe prints a plain line at each tenth and one at the end, never a
// carriage return.
func TestProgressOffATerminal(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := newProgress(&out, 1000)
	for range 20 {
		p.add(50)
	}
	p.finish()
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 11 || !bytes.HasPrefix(lines[0], []byte("upload 50 B / 1000 B    5%")) || !bytes.HasPrefix(lines[10], []byte("uploaded 1000 B in ")) ||
		bytes.ContainsRune(out.Bytes(), '\r') {
		t.Errorf("progress off a terminal:\n%s", out.Bytes())
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{{512, "512 B"}, {1536, "1.5 KiB"}, {10 << 20, "10.0 MiB"}, {3 << 30, "3.0 GiB"}} {
		if got := bytesText(tc.n); got != tc.want {
			t.Errorf("bytesText(%d) = %q; want %q", tc.n, got, tc.want)
		}
	}
}
