// Package pychain holds what the CPython tests share: the chain fixture
// (testdata/python/chain.py: <module> → outer → middle → leaf, and every
// eighth round middle → encode → json.dumps → the json module's C
// accelerator → callback → leaf), the check that a profile's sample shows
// its chain exactly, and the interpreters to run it under.
package pychain

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/sprof/sprof/internal/testenv"
)

// Fixture is the chain fixture's path and the lines its "# sprof:" marks
// name.
type Fixture struct {
	Path  string
	lines map[string][]int
}

// Load reads the chain fixture of the checkout whose root is root.
func Load(t testing.TB, root string) Fixture {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(root, "testdata", "python", "chain.py"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fx := Fixture{Path: path, lines: map[string][]int{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if _, mark, ok := strings.Cut(sc.Text(), "# sprof: "); ok {
			fx.lines[mark] = append(fx.lines[mark], n)
		}
	}
	return fx
}

// Frame is one frame of a profile's sample.
type Frame struct {
	Fn, File string
	Line     int64
	Python   bool // in a [python pid N] mapping
}

// RootFirst returns the frames of s, root first, inline frames expanded.
func RootFirst(s *profile.Sample) []Frame {
	var out []Frame
	for i := len(s.Location) - 1; i >= 0; i-- {
		loc := s.Location[i]
		python := loc.Mapping != nil && strings.HasPrefix(loc.Mapping.File, "[python pid ")
		for j := len(loc.Line) - 1; j >= 0; j-- {
			l := loc.Line[j]
			out = append(out, Frame{l.Function.Name, l.Function.Filename, l.Line, python})
		}
		if len(loc.Line) == 0 {
			out = append(out, Frame{Python: python})
		}
	}
	return out
}

// Brief renders frames (root first) for a test's log, from two frames
// below the first Python frame (where the chain starts) or, without one,
// the last twelve frames: Python frames as fn:line, native ones as fn,
// [?] where a frame has no name.
func Brief(frames []Frame) string {
	from := slices.IndexFunc(frames, func(f Frame) bool { return f.Python }) - 2
	if from < 0 {
		from = max(len(frames)-12, 0)
	}
	var b strings.Builder
	for i, f := range frames[from:] {
		if i > 0 {
			b.WriteString(" > ")
		}
		switch {
		case f.Fn == "":
			b.WriteString("[?]")
		case f.Python:
			fmt.Fprintf(&b, "%s:%d", f.Fn, f.Line)
		default:
			b.WriteString(f.Fn)
		}
	}
	return b.String()
}

// ChainOK says whether frames (root first) hold the fixture's chain
// exactly: native frames below <module> with _PyEval_EvalFrameDefault
// right below it; <module>, outer and middle, each at the line of its
// call; then leaf, or encode and json's frames, into its C accelerator
// (native frames), and callback then leaf. Each fixture frame but the
// last is at its call's line; the last may be anywhere in its function
// (the sample caught it between calls). It says too whether the sample
// went through json's accelerator.
func (fx Fixture) ChainOK(frames []Frame) (ok, accelerated bool) {
	mod := slices.IndexFunc(frames, func(f Frame) bool { return f.Python })
	if mod < 2 || frames[mod-1].Fn != "_PyEval_EvalFrameDefault" || frames[mod].Fn != "<module>" {
		return false, false
	}
	want := []struct{ fn, call string }{{"<module>", "module calls outer"}, {"outer", "outer calls middle"}, {"middle", ""}}
	var mine []Frame // the fixture's own frames
	sawNative := false
	for _, f := range frames[mod:] {
		switch {
		case f.Python && f.File == fx.Path:
			mine = append(mine, f)
		case !f.Python && len(mine) > 0 && mine[len(mine)-1].Fn == "encode":
			sawNative = sawNative || strings.HasPrefix(f.Fn, "encoder_") // _json's C encoder
		}
	}
	if len(mine) < len(want) {
		return false, false
	}
	at := func(f Frame, mark string) bool { return slices.Contains(fx.lines[mark], int(f.Line)) }
	for i, w := range want[:2] {
		if mine[i].Fn != w.fn || !at(mine[i], w.call) {
			return false, false
		}
	}
	rest := mine[2:]
	var path []struct{ fn, call string }
	switch {
	case len(rest) == 1:
		return rest[0].Fn == "middle" && rest[0].Line > 0, false
	case rest[1].Fn == "leaf":
		path = []struct{ fn, call string }{{"middle", "middle calls leaf"}, {"leaf", "leaf"}}
	case rest[1].Fn == "encode":
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
		if f.Fn != path[i].fn || (i < len(rest)-1 && !at(f, path[i].call)) || f.Line <= 0 {
			return false, accelerated
		}
	}
	return true, accelerated
}

// Debian is the interpreter of Debian bookworm's python3.11 package, which
// CI installs.
const Debian = "/usr/bin/python3.11"

// Interpreters lists the interpreters to test: Debian's python3.11, and
// pyenv's 3.9, 3.10, 3.12 and 3.13 where pyenv is installed (the builders'
// machines have them); t is skipped without Debian's.
func Interpreters(t testing.TB) []string {
	found := []string{testenv.RequireTool(t, Debian)}
	for _, v := range []string{"3.9", "3.10", "3.12", "3.13"} {
		if python := Pyenv(v); python != "" {
			found = append(found, python)
		} else {
			t.Logf("no pyenv build of Python %s: not tested (pyenv install %s)", v, v)
		}
	}
	return found
}

// Pyenv is pyenv's build of Python version v ("3.10"), "" when there is
// none.
func Pyenv(v string) string {
	if m, _ := filepath.Glob("/root/.pyenv/versions/" + v + ".*/bin/python" + v); len(m) > 0 {
		return m[0]
	}
	return ""
}

// Start runs a Python fixture, args after the interpreter, until the test
// ends, and returns it once it printed that it runs ("ready"). t is
// skipped when the interpreter is missing.
func Start(t testing.TB, interpreter string, args ...string) *exec.Cmd {
	t.Helper()
	testenv.RequireTool(t, interpreter)
	cmd := exec.Command(interpreter, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", interpreter, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("%s %v said %q, %v; want ready", interpreter, args, line, err)
	}
	go io.Copy(io.Discard, r)
	return cmd
}
