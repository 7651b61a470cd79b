package convert

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/symbolize/gsym"
)

// TestObjectFile converts object files, whose debug sections refer to each
// other through relocations (x86-64 and arm64 RELA), and compares each
// function's inline tree (names, call files and lines) with that of the
// linked fixture built from the same source with the same flags, which the
// oracle tests check against llvm-gsymutil. Unrelocated, string offsets
// read the section's first strings and file tables point nowhere. (Line
// rows are not compared: in an object file every section starts at 0, and
// functions of .text and .text.startup share addresses.)
func TestObjectFile(t *testing.T) {
	src, err := filepath.Abs(filepath.Join(fixtures, "src"))
	if err != nil {
		t.Fatal(err)
	}
	want := inlineSummaries(t, filepath.Join(fixtures, "cinline"))
	for _, cc := range []string{"gcc", "aarch64-linux-gnu-gcc"} {
		t.Run(cc, func(t *testing.T) {
			tool := testenv.RequireTool(t, cc)
			obj := filepath.Join(t.TempDir(), "cinline.o")
			cmd := exec.Command(tool, "-O2", "-g", "-c", "-fdebug-prefix-map="+src+"=/src", "-o", obj, filepath.Join(src, "cinline.c"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cc, err, out)
			}
			got := inlineSummaries(t, obj)
			if cc == "gcc" {
				if !slices.Equal(got, want) {
					t.Errorf("object file:\n%s\nlinked fixture:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				return
			}
			// Other code, the same names and files.
			for _, s := range []string{"main", "leaf", "[1 mix2 /src/cinline.c:26] [2 mix /src/inl.h:9]"} {
				if !strings.Contains(strings.Join(got, "\n"), s) {
					t.Errorf("no %q in\n%s", s, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// inlineSummaries converts the binary and describes each function from
// DWARF by its name and inline tree, sorted.
func inlineSummaries(t *testing.T, path string) []string {
	t.Helper()
	r, err := gsym.NewReader(encodeELF(t, path))
	if err != nil {
		t.Fatal(err)
	}
	file := func(i uint32) string {
		dir, base, _ := r.File(i)
		return dir + "/" + base
	}
	var out []string
	for i := range r.NumFunctions() {
		f, err := r.FunctionInfo(i)
		if err != nil {
			t.Fatal(err)
		}
		if f.Lines == nil {
			continue // from the symbol table
		}
		var sb strings.Builder
		sb.WriteString(f.Name)
		var walk func(n *gsym.InlineInfo, depth int)
		walk = func(n *gsym.InlineInfo, depth int) {
			fmt.Fprintf(&sb, " [%d %s %s:%d]", depth, n.Name, file(n.CallFile), n.CallLine)
			for i := range n.Children {
				walk(&n.Children[i], depth+1)
			}
		}
		if f.Inline != nil {
			walk(f.Inline, 0)
		}
		out = append(out, sb.String())
	}
	slices.Sort(out)
	return out
}
