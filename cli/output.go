package cli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// column is one column of a table: its header and the dotted JSON path
// of its value in each item.
type column struct{ header, path string }

// printItems prints a list: a table, or {"items": [...]} as JSON or YAML.
// items are JSON objects or values that marshal to them.
func (a *app) printItems(items any, cols []column) error {
	raw, err := json.Marshal(items)
	if err != nil {
		return err
	}
	var list []any
	if err := decode(raw, &list); err != nil {
		return err
	}
	if list == nil {
		list = []any{}
	}
	switch a.output {
	case "json", "yaml":
		return a.printData(map[string]any{"items": list})
	}
	return writeTable(a.env.Stdout, list, cols)
}

// printOne prints one object: field per line, or as JSON or YAML.
func (a *app) printOne(raw json.RawMessage, cols []column) error {
	var v any
	if err := decode(raw, &v); err != nil {
		return err
	}
	switch a.output {
	case "json", "yaml":
		return a.printData(v)
	}
	return writeFields(a.env.Stdout, v, cols)
}

// printData prints v as indented JSON or as YAML.
func (a *app) printData(v any) error {
	if a.output == "yaml" {
		b, err := yaml.Marshal(plain(v))
		if err != nil {
			return err
		}
		_, err = a.env.Stdout.Write(b)
		return err
	}
	enc := json.NewEncoder(a.env.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// decode reads JSON keeping numbers exact.
func decode(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
}

// plain turns json.Numbers into int64 or float64 so that YAML prints
// them as numbers.
func plain(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = plain(x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = plain(x)
		}
		return v
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	}
	return v
}

// writeTable writes items as aligned columns under their headers.
func writeTable(w io.Writer, items []any, cols []column) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hs := make([]string, len(cols))
	for i, c := range cols {
		hs[i] = c.header
	}
	fmt.Fprintln(tw, strings.TrimRight(strings.Join(hs, "\t"), "\t"))
	for _, it := range items {
		vs := make([]string, len(cols))
		for i, c := range cols {
			vs[i] = cell(lookup(it, c.path))
		}
		fmt.Fprintln(tw, strings.Join(vs, "\t"))
	}
	return tw.Flush()
}

// writeFields writes one object as "header: value" lines, aligned.
func writeFields(w io.Writer, v any, cols []column) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cols {
		fmt.Fprintf(tw, "%s:\t%s\n", c.header, cell(lookup(v, c.path)))
	}
	return tw.Flush()
}

// lookup follows a dotted path through objects.
func lookup(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// cell formats one value for a table: "-" for nothing, times to the
// second in UTC, a traffic split as v23=95 v24=5, lists comma-joined.
func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		if v == "" {
			return "-"
		}
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC().Format("2006-01-02 15:04:05")
		}
		return strings.ReplaceAll(v, "\n", " ")
	case json.Number:
		return v.String()
	case bool:
		return fmt.Sprint(v)
	case []any:
		if len(v) == 0 {
			return "-"
		}
		parts := make([]string, len(v))
		for i, x := range v {
			if m, ok := x.(map[string]any); ok && m["team"] != nil && m["role"] != nil && len(m) == 2 {
				parts[i] = fmt.Sprintf("%v (%v)", m["team"], m["role"]) // a membership
				continue
			}
			if m, ok := x.(map[string]any); ok && m["version"] != nil && m["weight"] != nil {
				parts[i] = fmt.Sprintf("%v=%v", m["version"], m["weight"])
				if s, ok := m["shadow_percent"].(json.Number); ok && s.String() != "0" {
					parts[i] += fmt.Sprintf("(shadow %v%%)", s)
				}
				continue
			}
			parts[i] = cell(x)
		}
		sep := ","
		if strings.Contains(parts[0], "=") {
			sep = " "
		}
		return strings.Join(parts, sep)
	case map[string]any:
		if names, ok := fileNames(v); ok {
			return names
		}
		b, _ := json.Marshal(v)
		s := string(b)
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		return s
	}
	return fmt.Sprint(v)
}

// isSHA256 is whether s is a SHA-256 in hex, as a manifest's values are.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// fileNames is a manifest (path → sha256) as its sorted paths.
func fileNames(m map[string]any) (string, bool) {
	if len(m) == 0 {
		return "", false
	}
	names := make([]string, 0, len(m))
	for k, v := range m {
		if sum, ok := v.(string); !ok || !isSHA256(sum) {
			return "", false
		}
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", "), true
}
