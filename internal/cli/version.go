package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Version returns the line --version prints: the program, the module
// version and the VCS revision, from the build information Go embeds
// (runtime/debug.ReadBuildInfo). A binary built outside a checkout, or with
// -buildvcs=false, has no revision: it says "revision unknown".
func Version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information) revision unknown"
	}
	return formatVersion(name, bi)
}

// formatVersion formats bi as "NAME VERSION revision REV[ (modified)] TIME GO".
func formatVersion(name string, bi *debug.BuildInfo) string {
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	rev, at, modified := "unknown", "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s revision %s", name, version, rev)
	if modified {
		b.WriteString(" (modified)")
	}
	if at != "" {
		b.WriteString(" committed " + at)
	}
	if bi.GoVersion != "" {
		b.WriteString(" built with " + bi.GoVersion)
	}
	return b.String()
}
