package goruntime

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// build compiles a minimal Go program with the installed toolchain for
// goarch, with extra go build arguments; one that imports "C" with cgo.
func build(t *testing.T, goarch string, cgo bool, args ...string) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		testenv.Unavailable(t, "no go toolchain at "+gobin)
	}
	dir := t.TempDir()
	src := "package main\n\nfunc main() { println(\"hello\") }\n"
	if cgo {
		src = "package main\n\nimport \"C\"\n\nfunc main() { println(\"hello\") }\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command(gobin, append(append([]string{"build", "-o", out}, args...), ".")...)
	cmd.Dir = dir
	cgoEnabled := "0"
	if cgo {
		cgoEnabled = "1"
	}
	cmd.Env = append(os.Environ(), "GOARCH="+goarch, "GOOS=linux", "CGO_ENABLED="+cgoEnabled, "GOFLAGS=", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

func read(t *testing.T, path string) (*Runtime, error) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := elf.NewFile(fh)
	if err != nil {
		t.Fatal(err)
	}
	code, err := ReadCode(f)
	if err != nil {
		return nil, err
	}
	return code.Runtime(f, fh)
}

// The table for binaries without DWARF is what the DWARF of binaries the
// installed toolchain builds says, on both architectures.
func TestKnownLayouts(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			rt, err := read(t, build(t, goarch, false))
			if err != nil {
				t.Fatal(err)
			}
			if rt.LayoutFrom != "DWARF" {
				t.Fatalf("layout from %s, want DWARF", rt.LayoutFrom)
			}
			stripped, err := read(t, build(t, goarch, false, "-ldflags=-s -w"))
			if err != nil {
				t.Fatalf("%s without DWARF: %v", rt.Version, err)
			}
			if stripped.LayoutFrom != "table" || stripped.Layout != rt.Layout {
				t.Errorf("%s: table %+v, DWARF %+v", rt.Version, stripped.Layout, rt.Layout)
			}
			if stripped.Morestack.Start != rt.Morestack.Start || stripped.Morestack.End <= stripped.Morestack.Start {
				t.Errorf("morestack %#x stripped, %#x with symbols", stripped.Morestack, rt.Morestack)
			}
		})
	}
}

// Morestack's range, from the function table, covers runtime.morestack
// and runtime.morestack_noctxt after it, as the linker's symbol table
// places them, and ends before the function after those; also in a
// program a C linker linked, which puts C start-up code before Go's: GNU
// ld, and lld for a PIE, whose module record the loader's relocations
// fill.
func TestMorestackRange(t *testing.T) {
	for _, c := range []struct {
		name, goarch string
		cgo          bool
		args         []string
		tools        []string
	}{
		{"amd64", "amd64", false, nil, nil},
		{"arm64", "arm64", false, nil, nil},
		{"amd64, external linking", "amd64", true, []string{"-ldflags=-linkmode=external"}, nil},
		{"amd64, lld PIE", "amd64", true,
			[]string{"-buildmode=pie", "-ldflags=-linkmode=external -extld=clang-22 -extldflags=-fuse-ld=lld"},
			[]string{"clang-22", "ld.lld-22"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.cgo {
				if _, err := exec.LookPath("gcc"); err != nil {
					testenv.Unavailable(t, "no gcc for external linking")
				}
			}
			for _, tool := range c.tools {
				testenv.RequireTool(t, tool)
			}
			bin := build(t, c.goarch, c.cgo, c.args...)
			rt, err := read(t, bin)
			if err != nil {
				t.Fatal(err)
			}
			syms := symbols(t, bin)
			var morestack, noctxt elf.Symbol
			after := ^uint64(0) // the first function after morestack_noctxt
			for _, s := range syms {
				switch strings.TrimSuffix(s.Name, ".abi0") {
				case "runtime.morestack":
					morestack = s
				case "runtime.morestack_noctxt":
					noctxt = s
				}
			}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value > noctxt.Value && s.Value < after {
					after = s.Value
				}
			}
			if morestack.Size == 0 || noctxt.Size == 0 {
				t.Fatalf("symbols: morestack %+v, morestack_noctxt %+v", morestack, noctxt)
			}
			if rt.Morestack.Start != morestack.Value || rt.Morestack.End < noctxt.Value+noctxt.Size || rt.Morestack.End > after {
				t.Errorf("%#x, want from morestack at %#x past morestack_noctxt at [%#x, %#x), not past %#x",
					rt.Morestack, morestack.Value, noctxt.Value, noctxt.Value+noctxt.Size, after)
			}
		})
	}
}

// g's thread-local slot: -8 from the thread pointer for internally
// linked amd64 binaries, runtime.tlsg's place for externally linked ones.
func TestTLSG(t *testing.T) {
	rt, err := read(t, build(t, "amd64", false))
	if err != nil || rt.TLSG != -8 {
		t.Errorf("internal linking: TLSG %v, %v; want -8", rt, err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Unavailable(t, "no gcc for external linking")
	}
	ext := build(t, "amd64", true, "-ldflags=-linkmode=external")
	rt, err = read(t, ext)
	if err != nil || rt.TLSG != -8 {
		t.Errorf("external linking: TLSG %v, %v; want -8", rt, err)
	}
}

func TestNotGo(t *testing.T) {
	if _, err := read(t, "/bin/sh"); !errors.Is(err, ErrNotGo) {
		t.Errorf("/bin/sh: %v, want ErrNotGo", err)
	}
}

// A program the kernel enters at Go's start code (linked internally) has
// six roots, each where the linker's symbol table puts the function (the
// function table's end is the next function's start), on both
// architectures and stripped too; the entry point lies in one. With cgo,
// whose threads C starts, mstart and clone are not; one a C start calls (linked
// externally) has goexit alone.
func TestRoots(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			bin := build(t, goarch, false)
			want := symbolRanges(t, bin, "runtime.goexit", "_rt0_"+goarch+"_linux", "runtime.rt0_go", "_rt0_"+goarch, "runtime.mstart", "runtime.clone")
			for _, path := range []string{bin, build(t, goarch, false, "-ldflags=-s -w")} {
				code, entry := readCode(t, path)
				checkRanges(t, path, code.Roots, want)
				if !slices.ContainsFunc(code.Roots, func(r Range) bool { return r.Start <= entry && entry < r.End }) {
					t.Errorf("%s: entry %#x in no root of %#x", path, entry, code.Roots)
				}
			}
		})
	}
	for _, c := range []struct {
		linkmode string
		roots    []string
	}{
		{"internal", []string{"runtime.goexit", "_rt0_amd64_linux", "runtime.rt0_go", "_rt0_amd64"}},
		{"external", []string{"runtime.goexit"}},
	} {
		t.Run("cgo, "+c.linkmode, func(t *testing.T) {
			if _, err := exec.LookPath("gcc"); err != nil {
				testenv.Unavailable(t, "no gcc for cgo")
			}
			bin := build(t, "amd64", true, "-ldflags=-linkmode="+c.linkmode)
			code, _ := readCode(t, bin)
			checkRanges(t, bin, code.Roots, symbolRanges(t, bin, c.roots...))
		})
	}
}

// checkRanges checks that got holds a range for each function of want in
// turn, from its start to at least its end, not past the next function.
func checkRanges(t *testing.T, path string, got []Range, want []symbolRange) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Start == want[i].Start && want[i].End <= got[i].End && got[i].End <= want[i].next
	}
	if !ok {
		t.Errorf("%s: %#x, want %+x", path, got, want)
	}
}

// readCode returns ReadCode's answer for the binary at path, and its entry
// point.
func readCode(t *testing.T, path string) (*Code, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, err := ReadCode(f)
	if err != nil {
		t.Fatal(err)
	}
	return code, f.Entry
}

// symbolRange is where a symbol table puts a function, and where the next
// function starts.
type symbolRange struct {
	Range
	next uint64
}

// symbolRanges returns where the binary at path's symbol table puts the
// functions named, in that order.
func symbolRanges(t *testing.T, path string, names ...string) []symbolRange {
	t.Helper()
	syms := symbols(t, path)
	var rs []symbolRange
	for _, name := range names {
		i := slices.IndexFunc(syms, func(s elf.Symbol) bool {
			return strings.TrimSuffix(s.Name, ".abi0") == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC
		})
		if i < 0 || syms[i].Size == 0 {
			t.Fatalf("%s: no function %s with a size", path, name)
		}
		r := symbolRange{Range{syms[i].Value, syms[i].Value + syms[i].Size}, ^uint64(0)}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value >= r.End && s.Value < r.next {
				r.next = s.Value
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// symbols returns the symbol table of the binary at path.
func symbols(t *testing.T, path string) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms
}
