package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize/gsym"
)

// TestGSYMMatchesELF symbolizes every code symbol's first, middle and last
// byte (and every third byte) through GSYM files and through the ELF
// symbolizer, which TestAgainstBinutils holds to binutils and LLVM: the
// whole inline stacks, names, files and lines, must be equal.
func TestGSYMMatchesELF(t *testing.T) {
	for _, tool := range []string{"readelf", "nm", "c++filt"} {
		needTool(t, tool)
	}
	none := []string{t.TempDir()}
	cases := []struct {
		name, bin, oracle string
		debugDirs         []string
	}{
		{"C -O2", fixture("c-O2"), fixture("c-O2"), none},
		{"debug file by build ID", fixture("c-stripped"), fixture("c-O2"), []string{fixture("debug")}},
		{"debug file by debuglink", fixture("c-debuglink"), fixture(".debug/c-debuglink.debug"), none},
		{"C++", fixture("cpp-O2"), fixture("cpp-O2"), none},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := NewGSYM(GSYMOptions{Options: Options{DebugDirs: c.debugDirs}, CacheDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			e := NewELF(Options{DebugDirs: c.debugDirs})
			loads := readelfLoads(t, c.bin)
			syms := nmCode(t, c.oracle)
			var want, got []stacks.Frame
			inlined, compared, dwarfNamed := 0, 0, 0
			for _, p := range probes(syms, 3) {
				off, ok := fileOffset(loads, p.addr)
				if !ok {
					continue
				}
				b := Binary{Path: c.bin}
				if want, err = e.Symbolize(want[:0], b, off); err != nil {
					t.Fatal(err)
				}
				if got, err = g.Symbolize(got[:0], b, off); err != nil {
					t.Fatal(err)
				}
				// The outermost function is named by DWARF in GSYM, as
				// llvm-gsymutil names it, and by the symbol table in ELF:
				// "f" for "f.constprop.0", a C++ C2 constructor for its C1
				// alias, "main::operator()" for a lambda's clone. Its file
				// and line, and every inlined frame, must be equal.
				if n := len(got); n > 0 && len(want) == n && got[n-1] != want[n-1] {
					g, w := got[n-1], want[n-1]
					if g.File == w.File && g.Line == w.Line && g.Function != "" {
						got[n-1] = w
						dwarfNamed++
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%#x (%s): GSYM gives\n%v\nELF gives\n%v", p.addr, p.sym.name, got, want)
				}
				compared++
				if len(want) > 1 {
					inlined++
				}
			}
			if st := g.Stats(); st.Converted != 1 || st.Failed != 0 {
				t.Errorf("stats %+v, want one conversion", st)
			}
			t.Logf("%d addresses equal, %d with inline frames, %d outermost functions named by DWARF, not the symbol table", compared, inlined, dwarfNamed)
			if compared < 50 {
				t.Errorf("only %d addresses compared", compared)
			}
		})
	}
}

// TestGSYMCacheReused converts a binary once: a second symbolizer on the
// same cache directory maps the file the first one wrote, keyed by build ID
// or, for a binary without one, by its path, size and modification time.
func TestGSYMCacheReused(t *testing.T) {
	dir := t.TempDir()
	id, err := buildIDOf(fixture("cpp-O2"))
	if err != nil {
		t.Fatal(err)
	}
	noID := filepath.Join(t.TempDir(), "no-build-id")
	stripNote(t, fixture("cpp-O2"), noID)
	for _, b := range []Binary{{Path: fixture("cpp-O2"), BuildID: id}, {Path: noID}} {
		var first []stacks.Frame
		for run := range 2 {
			g, err := NewGSYM(GSYMOptions{CacheDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			frames, err := g.Symbolize(nil, b, 0x1100)
			if err != nil {
				t.Fatal(err)
			}
			want := GSYMStats{Converted: 1}
			if run == 1 {
				want = GSYMStats{Reused: 1}
				if !slices.Equal(frames, first) {
					t.Errorf("%s: second run gives %v, first %v", b.Path, frames, first)
				}
			}
			first = frames
			if st := g.Stats(); st != want {
				t.Errorf("%s run %d: stats %+v, want %+v", b.Path, run, st, want)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "gsym", "*"))
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if len(names) != 2 || !slices.Contains(names, id+".gsym") {
		t.Errorf("cache holds %q, want %s.gsym and one file-*.gsym", names, id)
	}
}

// stripNote copies a binary without its build ID note.
func stripNote(t *testing.T, from, to string) {
	t.Helper()
	needTool(t, "objcopy")
	run(t, "", "objcopy", "--remove-section=.note.gnu.build-id", from, to)
	if id, err := buildIDOf(to); err == nil {
		t.Fatalf("%s still has build ID %s", to, id)
	}
}

// TestGSYMCrashMidWrite kills a process converting a Go program at
// increasing delays: the cache never holds a file under its final name that
// does not read back whole.
func TestGSYMCrashMidWrite(t *testing.T) {
	if dir := os.Getenv("SPROF_GSYM_CONVERT_INTO"); dir != "" {
		g, err := NewGSYM(GSYMOptions{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Symbolize(nil, Binary{Path: os.Getenv("SPROF_GSYM_CONVERT"), BuildID: "00aa"}, 0x1000); err != nil {
			t.Fatal(err)
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildGo(t, "")
	final := func(dir string) string { return filepath.Join(dir, "gsym", "00aa.gsym") }
	// A run to completion gives the expected file and its duration.
	whole := t.TempDir()
	start := time.Now()
	out := child(t, exe, bin, whole)
	if err := out.Wait(); err != nil {
		t.Fatalf("conversion: %v\n%s", err, out.Stdout)
	}
	took := time.Since(start)
	ref, err := gsym.Open(final(whole))
	if err != nil {
		t.Fatalf("uninterrupted conversion: %v (took %v)", err, took)
	}
	defer ref.Close()
	t.Logf("uninterrupted conversion of %s: %v, %d functions", bin, took, ref.NumFunctions())
	// Stopped while the temporary file exists, then killed: a crash in
	// the middle of writing.
	caught := false
	for try := 0; try < 20 && !caught; try++ {
		dir := t.TempDir()
		cmd := child(t, exe, bin, dir)
		var tmps []string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			tmps, _ = filepath.Glob(filepath.Join(dir, "gsym", ".00aa.gsym.tmp*"))
			if len(tmps) > 0 {
				cmd.Process.Signal(syscall.SIGSTOP)
				break
			}
			if _, err := os.Stat(final(dir)); err == nil {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
		// Still there once the process stopped: it was being written.
		if len(tmps) > 0 {
			if _, err := os.Stat(tmps[0]); err == nil {
				caught = true
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if !caught {
			continue
		}
		if _, err := os.Stat(final(dir)); !os.IsNotExist(err) {
			t.Errorf("killed while writing %s, the final file is there: %v", tmps[0], err)
		}
		// The next symbolizer removes what is left of the crashed
		// writer, converts again and leaves a whole file.
		old := time.Now().Add(-2 * staleAge)
		if err := os.Chtimes(tmps[0], old, old); err != nil {
			t.Fatal(err)
		}
		g, err := NewGSYM(GSYMOptions{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Symbolize(nil, Binary{Path: bin, BuildID: "00aa"}, 0x1000); err != nil {
			t.Fatal(err)
		}
		r, err := gsym.Open(final(dir))
		if err != nil || r.NumFunctions() != ref.NumFunctions() || g.Stats().Converted != 1 {
			t.Fatalf("after the crash: %v, stats %+v", err, g.Stats())
		}
		r.Close()
		if _, err := os.Stat(tmps[0]); !os.IsNotExist(err) {
			t.Errorf("the crashed writer's %s is still there: %v", tmps[0], err)
		}
		t.Logf("killed on try %d while writing %s", try, filepath.Base(tmps[0]))
	}
	if !caught {
		t.Errorf("no try stopped the conversion while it wrote its file")
	}
}

// child starts this test program converting bin into the cache dir.
func child(t *testing.T, exe, bin, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^TestGSYMCrashMidWrite$")
	cmd.Env = append(os.Environ(), "SPROF_GSYM_CONVERT_INTO="+dir, "SPROF_GSYM_CONVERT="+bin)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestGSYMConvertsOnce: concurrent first lookups in one binary wait for a
// single conversion.
func TestGSYMConvertsOnce(t *testing.T) {
	g, err := NewGSYM(GSYMOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := Binary{Path: fixture("cpp-O2")}
	var wg sync.WaitGroup
	results := make([][]stacks.Frame, 8)
	for i := range results {
		wg.Go(func() {
			var err error
			if results[i], err = g.Symbolize(nil, b, 0x1100); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, r := range results[1:] {
		if !slices.Equal(r, results[0]) {
			t.Errorf("lookups differ: %v and %v", r, results[0])
		}
	}
	if st := g.Stats(); st != (GSYMStats{Converted: 1}) {
		t.Errorf("stats %+v, want one conversion", st)
	}
}
