package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sprof/sprof/stacks"
)

// buildGo builds the Go fixture with the toolchain running the tests.
func buildGo(t testing.TB, ldflags string) string {
	t.Helper()
	return buildGoFor(t, runtime.GOARCH, ldflags)
}

// buildGoFor builds the Go fixture for goarch.
func buildGoFor(t testing.TB, goarch, ldflags string) string {
	t.Helper()
	needTool(t, "go")
	out := filepath.Join(t.TempDir(), "goprog")
	run(t, "", "env", "GOARCH="+goarch, "go", "build", "-ldflags="+ldflags, "-o", out, filepath.Join(fixtures, "goprog", "main.go"))
	return out
}

// goProbes picks the first, middle and last byte of every text symbol
// `go tool nm` lists.
func goProbes(t *testing.T, bin string) []uint64 {
	var addrs []uint64
	for _, line := range strings.Split(run(t, "", "go", "tool", "nm", "-size", "-sort", "address", bin), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "T" && f[2] != "t") {
			continue
		}
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		size, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || size == 0 {
			continue
		}
		addrs = append(addrs, addr, addr+size/2, addr+size-1)
	}
	if len(addrs) < 1000 {
		t.Fatalf("go tool nm lists only %d probes in %s", len(addrs), bin)
	}
	return addrs
}

// TestGoAgainstGoAddr2line checks every Go function's first, middle and
// last byte against `go tool addr2line` (the function holding the
// address, from the pclntab, and the innermost file and line) and the
// whole inline stack against llvm-addr2line, which reads it from DWARF;
// on a Go program with symbols and on the same program stripped (-s -w),
// which only its pclntab still names, inlined calls too, for amd64 and
// arm64 (whose pcs the table counts in 4-byte units); and on programs
// linked by a C linker (-linkmode=external; GNU ld, and lld for a PIE),
// whose C start-up code comes before Go's, stripped by binutils' strip. The tools are asked of
// the binary with symbols: addr2line names a program linked so by the
// linker's runtime.text symbol, and the stripped one wrong. Where the
// module record is gone, the pclntab's inline trees are not found, and
// each address gets its function alone.
func TestGoAgainstGoAddr2line(t *testing.T) {
	needTool(t, "readelf")
	needTool(t, llvmAddr2line)
	full := buildGo(t, "")
	for _, c := range []struct {
		name string
		// build returns the binary to symbolize and one with symbols
		// at the same addresses, for the probes and for addr2line.
		build func(t *testing.T) (bin, named string)
		// inlined: whether the inlined calls are known, from DWARF or
		// from the pclntab.
		inlined bool
	}{
		{"symbols", func(*testing.T) (string, string) { return full, full }, true},
		{"stripped", func(t *testing.T) (string, string) { return buildGo(t, "-s -w"), full }, true},
		{"arm64, stripped", func(t *testing.T) (string, string) {
			return buildGoFor(t, "arm64", "-s -w"), buildGoFor(t, "arm64", "")
		}, true},
		{"external linking, stripped", strippedBuild(buildExternal), true},
		// lld leaves a PIE's module record to the loader's relocations.
		{"lld PIE, stripped", strippedBuild(buildLLD), true},
		// A module record that is not there (as before Go 1.16, or
		// damaged): the linker's runtime.text symbol tells instead.
		{"external linking, no module record", func(t *testing.T) (string, string) {
			linked := buildExternal(t)
			bin := filepath.Join(t.TempDir(), "goprog-norecord")
			run(t, "", "strip", "--strip-debug", "-o", bin, linked)
			zeroModuleRecord(t, bin)
			return bin, linked
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin, named := c.build(t)
			probes := goProbes(t, named)
			var in strings.Builder
			for _, a := range probes {
				in.WriteString("0x" + strconv.FormatUint(a, 16) + "\n")
			}
			want := strings.Split(run(t, in.String(), "go", "tool", "addr2line", named), "\n")
			stacksWant := addr2line(t, llvmAddr2line, named, probes)
			loads := readelfLoads(t, bin)
			s := NewELF(Options{})
			var frames []stacks.Frame
			checked, inlined := 0, 0
			for i, a := range probes {
				fn, pos := want[2*i], want[2*i+1]
				off, ok := fileOffset(loads, a)
				if fn == "?" || !ok {
					continue
				}
				var err error
				frames, err = s.Symbolize(frames[:0], Binary{Path: bin}, off)
				if err != nil {
					t.Fatal(err)
				}
				if len(frames) == 0 {
					t.Errorf("%#x: no frames, go tool addr2line says %s %s", a, fn, pos)
					continue
				}
				checked++
				outer, inner := frames[len(frames)-1], frames[0]
				if got := inner.File + ":" + strconv.Itoa(inner.Line); outer.Function != fn || got != pos {
					t.Errorf("%#x: %s %s, go tool addr2line says %s %s", a, outer.Function, got, fn, pos)
				}
				if !c.inlined {
					if len(frames) != 1 {
						t.Errorf("%#x: %s without DWARF or the module record", a, fmtFrames(frames))
					}
					continue
				}
				if w := stacksWant[a]; !sameGoStack(frames, w) {
					t.Errorf("%#x: %s, llvm-addr2line says %s", a, fmtFrames(frames), fmtA2L(w))
				}
				if len(frames) > 1 {
					inlined++
				}
			}
			t.Logf("%d of %d probes checked, %d with inlined calls", checked, len(probes), inlined)
			if checked < len(probes)*9/10 {
				t.Errorf("only %d of %d probes were checked", checked, len(probes))
			}
		})
	}
}

// buildExternal builds the Go fixture with cgo, linked by the C linker.
func buildExternal(t *testing.T) string {
	t.Helper()
	needTool(t, "gcc")
	needTool(t, "strip")
	out := filepath.Join(t.TempDir(), "goprog")
	run(t, "", "env", "CGO_ENABLED=1", "go", "build", "-ldflags=-linkmode=external", "-o", out, filepath.Join(fixtures, "goprog", "main.go"))
	return out
}

// strippedBuild returns a build of the Go fixture by build, stripped by
// binutils' strip, and the build itself.
func strippedBuild(build func(t *testing.T) string) func(t *testing.T) (string, string) {
	return func(t *testing.T) (string, string) {
		linked := build(t)
		bin := filepath.Join(t.TempDir(), "goprog-stripped")
		run(t, "", "strip", "-o", bin, linked)
		return bin, linked
	}
}

// buildLLD builds the Go fixture with cgo as a PIE linked by clang and
// lld.
func buildLLD(t *testing.T) string {
	t.Helper()
	needTool(t, "clang-22")
	needTool(t, "ld.lld-22")
	needTool(t, "strip")
	out := filepath.Join(t.TempDir(), "goprog")
	run(t, "", "env", "CGO_ENABLED=1", "CC=clang-22", "go", "build", "-buildmode=pie",
		"-ldflags=-linkmode=external -extldflags=-fuse-ld=lld", "-o", out, filepath.Join(fixtures, "goprog", "main.go"))
	return out
}

// zeroModuleRecord clears the first word of the Go module record in the
// binary at path (its .go.module section), the pointer to the function
// table by which elfx.GoText finds the record.
func zeroModuleRecord(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".go.module")
	f.Close()
	if s == nil {
		t.Fatalf("%s has no .go.module section", path)
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(make([]byte, 8), int64(s.Offset)); err != nil {
		t.Fatal(err)
	}
}

// TestGoConcurrent looks up a Go program's table from several goroutines
// at once, past the cache's lock (run with -race: debug/gosym is not safe
// for concurrent use by itself).
func TestGoConcurrent(t *testing.T) {
	bin := buildGo(t, "")
	probes := goProbes(t, bin)
	img, err := NewELF(Options{}).image(Binary{Path: bin})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var frames []stacks.Frame
			for i := g; i < len(probes); i += 4 {
				var err error
				if frames, err = img.frames(frames[:0], probes[i], Binary{Path: bin, Name: bin}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// sameGoStack compares an inline stack with llvm-addr2line's, level by
// level: inlined names, and the call sites of the outer levels. The
// outermost name and the innermost position are the pclntab's, checked
// against go tool addr2line; DWARF spells assembly functions with an .abi0
// suffix and its line table is empty at some function starts.
func sameGoStack(got []stacks.Frame, want []a2lFrame) bool {
	if len(got) != len(want) {
		return false
	}
	for i, g := range got {
		if i < len(got)-1 && g.Function != want[i].function {
			return false
		}
		if i > 0 && (filepath.Clean(g.File) != filepath.Clean(want[i].file) || g.Line != want[i].line) {
			return false
		}
	}
	return true
}
