package scenario

import (
	"embed"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// The built-in scenarios are YAML files like any other, so they double as
// examples of the format.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// ErrUnknown is returned by Builtin for a name that is not built in.
var ErrUnknown = errors.New("unknown scenario")

// Builtins returns the built-in scenarios, by name.
func Builtins() ([]Scenario, error) {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		return nil, err
	}
	var out []Scenario
	for _, e := range entries {
		data, err := builtinFS.ReadFile(path.Join("builtin", e.Name()))
		if err != nil {
			return nil, err
		}
		s, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("built-in %s: %w", e.Name(), err)
		}
		out = append(out, s)
	}
	out = append(out, autoscaleBuiltins()...)
	slices.SortFunc(out, func(a, b Scenario) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Builtin returns the built-in scenario of that name, or ErrUnknown.
func Builtin(name string) (Scenario, error) {
	all, err := Builtins()
	if err != nil {
		return Scenario{}, err
	}
	var names []string
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("%w %q; built in: %s", ErrUnknown, name, strings.Join(names, ", "))
}
