package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time by `-ldflags "-X main.version=v1.2.3"`;
// otherwise the module version or VCS revision from the build info is used.
var version = ""

func runVersion(e *env, args []string) error {
	fs := newFlagSet(e, "version", "Usage: sprof version\n\nPrints sprof's version, the Go version and the platform.\n")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; version takes none", fs.Arg(0))
	}
	fmt.Fprintf(e.stdout, "sprof %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
