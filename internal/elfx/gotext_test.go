package elfx

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// TestGoText: for a program linked by Go's linker (both architectures,
// PIE or not) and by a C linker (GNU ld, PIE or not; lld, PIE, which
// leaves the module record's words to the loader's relocations), GoText
// is where the linker's runtime.text symbol says, found in the runtime's
// module record, both in the binary and in a copy llvm-strip took that
// symbol from; for the C linker's that is not .text's start. So is
// GoFunc, where the linker's go:func.* symbol says. So are both for a
// program of Go 1.19 (Debian's), whose table and record have Go 1.18's
// layout.
func TestGoText(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		testenv.Unavailable(t, "no go toolchain at "+gobin)
	}
	strip := testenv.RequireTool(t, "llvm-strip-22")
	src := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, goarch string
		args         []string
		external     bool
		lld          bool // linked by clang and lld rather than gcc and GNU ld
		go119        bool // built by Go 1.19 rather than this toolchain
	}{
		{"go", "amd64", nil, false, false, false},
		{"go, arm64", "arm64", nil, false, false, false},
		{"go, PIE", "amd64", []string{"-buildmode=pie"}, false, false, false},
		{"C", "amd64", []string{"-ldflags=-linkmode=external"}, true, false, false},
		{"C, PIE", "amd64", []string{"-buildmode=pie", "-ldflags=-linkmode=external"}, true, false, false},
		{"lld, PIE", "amd64", []string{"-buildmode=pie", "-ldflags=-linkmode=external -extldflags=-fuse-ld=lld"}, true, true, false},
		{"go 1.19", "amd64", nil, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, gobin := []string{"CGO_ENABLED=0"}, gobin
			strip := strip
			if c.go119 {
				root := testenv.Go119(t)
				gobin, env = filepath.Join(root, "bin", "go"), append(env, "GOROOT="+root)
				// llvm-strip-22 garbles the section names of Go
				// 1.19's programs; GNU strip does not.
				strip = testenv.RequireTool(t, "strip")
			}
			switch {
			case c.lld:
				testenv.RequireTool(t, "clang-22")
				testenv.RequireTool(t, "ld.lld-22")
				env = []string{"CGO_ENABLED=1", "CC=clang-22"}
			case c.external:
				testenv.RequireTool(t, "gcc")
				env = []string{"CGO_ENABLED=1"}
			}
			dir := t.TempDir()
			bin, stripped := filepath.Join(dir, "hello"), filepath.Join(dir, "stripped")
			cmd := exec.Command(gobin, append(append([]string{"build", "-o", bin}, c.args...), src)...)
			cmd.Dir = filepath.Dir(src) // outside this module, whose go.mod Go 1.19 cannot read
			cmd.Env = append(append(os.Environ(), "GOARCH="+c.goarch, "GOOS=linux", "GOFLAGS=", "GOTOOLCHAIN=local"), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %v: %v\n%s", c.args, err, out)
			}
			if out, err := exec.Command(strip, "-o", stripped, bin).CombinedOutput(); err != nil {
				t.Fatalf("strip: %v\n%s", err, out)
			}
			want, wantFunc, textStart := goSymbols(t, bin)
			if c.external && want == textStart {
				t.Errorf("runtime.text %#x is .text's start: no C code before Go's", want)
			}
			for _, path := range []string{bin, stripped} {
				f, pcln, data := goTable(t, path)
				if got, found := GoText(f, pcln, data); got != want || !found {
					t.Errorf("%s: GoText %#x (module record found: %v), runtime.text %#x (.text %#x)",
						filepath.Base(path), got, found, want, textStart)
				}
				if got, _, found := GoFunc(f, pcln, data); got != wantFunc || !found {
					t.Errorf("%s: GoFunc %#x (found: %v), go:func.* %#x", filepath.Base(path), got, found, wantFunc)
				}
			}
		})
	}
}

// goSymbols returns runtime.text and go:func.* from path's symbol table,
// and .text's start.
func goSymbols(t *testing.T, path string) (text, gofunc, textStart uint64) {
	t.Helper()
	f := openELF(t, path)
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, s := range syms {
		switch s.Name {
		case "runtime.text":
			text = s.Value
			found++
		case "go:func.*", "go.func.*": // Go 1.20's name, and before
			gofunc = s.Value
			found++
		}
	}
	if found != 2 {
		t.Fatalf("%s: runtime.text %#x, go:func.* %#x: one is missing", path, text, gofunc)
	}
	return text, gofunc, f.Section(".text").Addr
}

// goTable returns the binary at path, its Go function table's section and
// that section's bytes.
func goTable(t *testing.T, path string) (*elf.File, *elf.Section, []byte) {
	t.Helper()
	f := openELF(t, path)
	pcln := f.Section(".gopclntab")
	if pcln == nil {
		pcln = f.Section(".data.rel.ro.gopclntab")
	}
	if pcln == nil {
		t.Fatalf("%s: no Go function table", path)
	}
	data, err := pcln.Data()
	if err != nil {
		t.Fatal(err)
	}
	return f, pcln, data
}

// openELF opens the binary at path until the test ends.
func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
