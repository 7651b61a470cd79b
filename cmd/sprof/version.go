package main

import (
	"debug/elf"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sprof/sprof/bpf"
)

// version is set at link time by `-ldflags "-X main.version=v1.2.3"`;
// otherwise the module version or VCS revision from the build info is used.
var version = ""

func runVersion(e *env, args []string) error {
	fs := newFlagSet(e, "version", `Usage: sprof version

Prints sprof's version (the VCS revision, -dirty for uncommitted changes),
how it was built: the Go version, the platform, whether it is statically
linked (it then runs on any Linux host of its architecture, and in any
container image), and the first 16 hex digits of the SHA-256 of its BPF
object (compare with sha256sum bpf/sprof_*_bpfel.o of a checkout).
`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; version takes none", fs.Arg(0))
	}
	fmt.Fprintf(e.stdout, "sprof %s, %s %s/%s, %s, BPF object sha256 %.16s\n",
		buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH, linking("/proc/self/exe"), bpf.ObjectHash())
	return nil
}

// linking says whether the executable at path is statically linked, from
// its program headers: a dynamically linked one names its loader in
// PT_INTERP. Build settings cannot tell: CGO_ENABLED=1 links statically
// when no package uses cgo.
func linking(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "linking unknown"
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "dynamically linked (CGO_ENABLED=0 builds a static binary)"
		}
	}
	return "statically linked"
}

// goBuildID returns the Go build ID of the executable at path, from its
// .note.go.buildid section: a hash of what the Go toolchain built it from,
// which changes with any change of sprof's code, uncommitted ones too.
func goBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", fmt.Errorf("%s: no .note.go.buildid section", path)
	}
	note, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("%s: .note.go.buildid: %w", path, err)
	}
	// A note: name size, desc size, type 4, the name "Go\x00\x00", the
	// build ID.
	if len(note) < 16 || f.ByteOrder.Uint32(note) != 4 || f.ByteOrder.Uint32(note[8:]) != 4 || string(note[12:16]) != "Go\x00\x00" {
		return "", fmt.Errorf("%s: .note.go.buildid is not a Go build ID note", path)
	}
	n := f.ByteOrder.Uint32(note[4:])
	if n == 0 || uint64(n) > uint64(len(note)-16) {
		return "", fmt.Errorf("%s: .note.go.buildid: build ID of %d bytes in a note of %d", path, n, len(note))
	}
	return string(note[16 : 16+n]), nil
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
