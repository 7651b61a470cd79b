package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/internal/testenv"
)

// These tests profile unmodified CPython running testdata/python/chain.py:
// <module> → outer → middle → leaf, and every eighth round middle →
// encode → json.dumps → the json module's C accelerator → callback → leaf.

// pythonFixture is the chain fixture's path and the lines its "# sprof:"
// marks name.
type pythonFixture struct {
	path  string
	lines map[string][]int
}

func loadPythonFixture(t *testing.T) pythonFixture {
	t.Helper()
	path, err := filepath.Abs("../../testdata/python/chain.py")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fx := pythonFixture{path: path, lines: map[string][]int{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if _, mark, ok := strings.Cut(sc.Text(), "# sprof: "); ok {
			fx.lines[mark] = append(fx.lines[mark], n)
		}
	}
	return fx
}

// pyFrame is one frame of a profile's sample, root first.
type pyFrame struct {
	fn, file string
	line     int64
	python   bool // in a [python pid N] mapping
}

func rootFirst(s *profile.Sample) []pyFrame {
	var out []pyFrame
	for i := len(s.Location) - 1; i >= 0; i-- {
		loc := s.Location[i]
		python := loc.Mapping != nil && strings.HasPrefix(loc.Mapping.File, "[python pid ")
		for j := len(loc.Line) - 1; j >= 0; j-- {
			l := loc.Line[j]
			out = append(out, pyFrame{l.Function.Name, l.Function.Filename, l.Line, python})
		}
		if len(loc.Line) == 0 {
			out = append(out, pyFrame{python: python})
		}
	}
	return out
}

// chainOK says whether frames (root first) hold the fixture's chain
// exactly: native frames below <module> with _PyEval_EvalFrameDefault
// right below it; <module>, outer and middle, each at the line of its
// call; then leaf, or encode and json's frames, into its C accelerator
// (native frames), and callback then leaf. Each fixture frame but the
// last is at its call's line; the last may be anywhere in its function
// (the sample caught it between calls). It says too whether the sample
// went through json's accelerator.
func (fx pythonFixture) chainOK(frames []pyFrame) (ok, accelerated bool) {
	mod := slices.IndexFunc(frames, func(f pyFrame) bool { return f.python })
	if mod < 2 || frames[mod-1].fn != "_PyEval_EvalFrameDefault" || frames[mod].fn != "<module>" {
		return false, false
	}
	want := []struct{ fn, call string }{{"<module>", "module calls outer"}, {"outer", "outer calls middle"}, {"middle", ""}}
	var mine []pyFrame // the fixture's own frames
	sawNative := false
	for _, f := range frames[mod:] {
		switch {
		case f.python && f.file == fx.path:
			mine = append(mine, f)
		case !f.python && len(mine) > 0 && mine[len(mine)-1].fn == "encode":
			sawNative = sawNative || strings.HasPrefix(f.fn, "encoder_") // _json's C encoder
		}
	}
	if len(mine) < len(want) {
		return false, false
	}
	at := func(f pyFrame, mark string) bool { return slices.Contains(fx.lines[mark], int(f.line)) }
	for i, w := range want[:2] {
		if mine[i].fn != w.fn || !at(mine[i], w.call) {
			return false, false
		}
	}
	rest := mine[2:]
	var path []struct{ fn, call string }
	switch {
	case len(rest) == 1:
		return rest[0].fn == "middle" && rest[0].line > 0, false
	case rest[1].fn == "leaf":
		path = []struct{ fn, call string }{{"middle", "middle calls leaf"}, {"leaf", "leaf"}}
	case rest[1].fn == "encode":
		path = []struct{ fn, call string }{{"middle", "middle calls encode"}, {"encode", "encode calls dumps"},
			{"callback", "callback calls leaf"}, {"leaf", "leaf"}}
		accelerated = len(rest) > 2
		if accelerated && !sawNative {
			return false, true
		}
	default:
		return false, false
	}
	if len(rest) > len(path) {
		return false, accelerated
	}
	for i, f := range rest {
		if f.fn != path[i].fn || (i < len(rest)-1 && !at(f, path[i].call)) || f.line <= 0 {
			return false, accelerated
		}
	}
	return true, accelerated
}

// pythonInterpreters lists the interpreters to test: Debian's python3.11,
// which CI installs, and pyenv's 3.9, 3.10, 3.12 and 3.13 where pyenv is
// installed.
func pythonInterpreters(t *testing.T) []string {
	found := []string{testenv.RequireTool(t, "/usr/bin/python3.11")}
	for _, v := range []string{"3.9", "3.10", "3.12", "3.13"} {
		if m, _ := filepath.Glob("/root/.pyenv/versions/" + v + ".*/bin/python" + v); len(m) > 0 {
			found = append(found, m[0])
		} else {
			t.Logf("no pyenv build of Python %s: not tested (pyenv install %s)", v, v)
		}
	}
	return found
}

// TestRecordPython records the fixture for 2 s at 499 Hz into a profile,
// and into a recording reported after the process is gone, and wants
// >= 95% of its samples to show the chain exactly with file:line (see
// chainOK), and some through json's C accelerator.
func TestRecordPython(t *testing.T) {
	testenv.RequireRoot(t)
	fx := loadPythonFixture(t)
	for _, python := range pythonInterpreters(t) {
		for _, ext := range []string{".pb.gz", ".sprof"} {
			t.Run(filepath.Base(python)+ext, func(t *testing.T) {
				dir := t.TempDir()
				cmd := startJIT(t, dir, python, fx.path)
				out := filepath.Join(dir, "cpu"+ext)
				recordCPU(t, cmd.Process.Pid, out)
				if ext == ".sprof" {
					pb := filepath.Join(dir, "cpu.pb.gz")
					if code, _, errs := runSprof("report", out, "-o", pb); code != 0 {
						t.Fatalf("sprof report: exit %d\n%s", code, errs)
					}
					out = pb
				}
				var total, good, accelerated int64
				var bad []string
				for _, s := range parseProfile(t, out).Sample {
					total += s.Value[0]
					frames := rootFirst(s)
					ok, acc := fx.chainOK(frames)
					if ok {
						good += s.Value[0]
					} else if len(bad) < 10 {
						bad = append(bad, fmt.Sprint(frames))
					}
					if ok && acc {
						accelerated += s.Value[0]
					}
				}
				t.Logf("%d of %d samples show the chain, %d through json's accelerator; others like %q", good, total, accelerated, bad)
				if total < 40 {
					t.Errorf("only %d samples in 2 s of CPU time at 499 Hz", total)
				}
				if good*100 < total*95 {
					t.Errorf("%d of %d samples show the chain, want >= 95%%", good, total)
				}
				if accelerated == 0 {
					t.Errorf("no sample shows the chain through json's C accelerator")
				}
			})
		}
	}
}
