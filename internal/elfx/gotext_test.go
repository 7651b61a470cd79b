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
// PIE or not) and by the C linker (PIE or not), GoText is where the
// linker's runtime.text symbol says, found in the runtime's module record,
// both in the binary and in a copy llvm-strip took that symbol from; for
// the C linker's that is not .text's start.
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
	}{
		{"go", "amd64", nil, false},
		{"go, arm64", "arm64", nil, false},
		{"go, PIE", "amd64", []string{"-buildmode=pie"}, false},
		{"C", "amd64", []string{"-ldflags=-linkmode=external"}, true},
		{"C, PIE", "amd64", []string{"-buildmode=pie", "-ldflags=-linkmode=external"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cgo := "CGO_ENABLED=0"
			if c.external {
				testenv.RequireTool(t, "gcc")
				cgo = "CGO_ENABLED=1"
			}
			dir := t.TempDir()
			bin, stripped := filepath.Join(dir, "hello"), filepath.Join(dir, "stripped")
			cmd := exec.Command(gobin, append(append([]string{"build", "-o", bin}, c.args...), src)...)
			cmd.Env = append(os.Environ(), "GOARCH="+c.goarch, "GOOS=linux", cgo, "GOFLAGS=", "GOTOOLCHAIN=local")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %v: %v\n%s", c.args, err, out)
			}
			if out, err := exec.Command(strip, "-o", stripped, bin).CombinedOutput(); err != nil {
				t.Fatalf("strip: %v\n%s", err, out)
			}
			want, textStart := goTextSymbol(t, bin)
			if c.external && want == textStart {
				t.Errorf("runtime.text %#x is .text's start: no C code before Go's", want)
			}
			for _, path := range []string{bin, stripped} {
				if got, found := goText(t, path); got != want || !found {
					t.Errorf("%s: GoText %#x (module record found: %v), runtime.text %#x (.text %#x)",
						filepath.Base(path), got, found, want, textStart)
				}
			}
		})
	}
}

// goTextSymbol returns runtime.text from path's symbol table and .text's
// start.
func goTextSymbol(t *testing.T, path string) (uint64, uint64) {
	t.Helper()
	f := openELF(t, path)
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "runtime.text" {
			return s.Value, f.Section(".text").Addr
		}
	}
	t.Fatalf("%s: no runtime.text symbol", path)
	return 0, 0
}

// goText returns GoText's answer for the binary at path.
func goText(t *testing.T, path string) (uint64, bool) {
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
	return GoText(f, pcln, data)
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
