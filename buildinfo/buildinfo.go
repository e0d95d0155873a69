// Package buildinfo says which build of modelplane is running, so that the
// command-line client and the server can tell each other (Header) and the
// client can warn when they differ. It imports only the standard library.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Header is the HTTP header in which the API answers its version and the
// command-line client sends its own.
const Header = "Modelplane-Version"

// Version is this binary's version: the module version when it was built
// by `go install …@vX.Y.Z`, else "devel" with the VCS revision when the
// build recorded one ("devel+3f2a1c9d0b4e", "+dirty" for a modified tree).
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	v := "devel"
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		v += "+" + rev[:min(12, len(rev))]
		if dirty {
			v += "+dirty"
		}
	}
	return v
})
