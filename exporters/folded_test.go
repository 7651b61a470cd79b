package exporters

import (
	"bytes"
	"cmp"
	"strings"
	"testing"

	"github.com/sprof/sprof/stacks"
)

func TestFoldedGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		opt    Options
	}{
		{"fixture.folded", Options{}},
		{"fixture-comm-pid.folded", Options{ProcessRoot: CommPidRoot}},
		{"fixture-comm.folded", Options{ProcessRoot: CommRoot}},
		{"fixture-container-comm.folded", Options{ProcessRoot: ContainerCommRoot}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFolded(&buf, fixture(), tc.opt); err != nil {
				t.Fatal(err)
			}
			checkFoldedSyntax(t, buf.String())
			checkGolden(t, tc.golden, buf.Bytes())
		})
	}
}

// checkFoldedSyntax checks every line is `frame;…;frame count` with no
// empty frame and a positive count.
func checkFoldedSyntax(t *testing.T, out string) {
	t.Helper()
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" && out == "" {
			return
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp <= 0 {
			t.Errorf("line %d %q: no count", i, line)
			continue
		}
		for _, f := range strings.Split(line[:sp], ";") {
			if f == "" {
				t.Errorf("line %d %q: empty frame", i, line)
			}
		}
		if n := line[sp+1:]; n == "" || n[0] == '0' || strings.Trim(n, "0123456789") != "" {
			t.Errorf("line %d %q: count %q is not a positive integer", i, line, n)
		}
	}
}

func TestFoldedEdgeCases(t *testing.T) {
	kern := &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}
	lib := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, Offset: 0x3000, File: "/lib/libx.so"}
	jit := &stacks.Mapping{Kind: stacks.JIT, File: stacks.JITFile(7)}
	py := &stacks.Mapping{Kind: stacks.Python, File: stacks.PythonFile(7)}
	sym := func(m *stacks.Mapping, addr uint64, names ...string) *stacks.Location {
		l := &stacks.Location{Mapping: m, Address: addr}
		for _, n := range names {
			l.Frames = append(l.Frames, stacks.Frame{Function: n})
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		samples []*stacks.Sample
		want    string
	}{
		{"empty profile", nil, ""},
		{"kernel only", []*stacks.Sample{{Stack: []*stacks.Location{sym(kern, 0xffff1000, "b"), sym(kern, 0xffff0000, "a")}, Count: 2}},
			"a_[k];b_[k] 2\n"},
		{"unsymbolized", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1010), sym(kern, 0xffff0000)}, Count: 1}},
			"[kernel] 0xffff0000_[k];libx.so+0x3010 1\n"},
		{"inline levels", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1010, "in2", "in1", "outer")}, Count: 1}},
			"outer;in1_[i];in2_[i] 1\n"},
		{"names with ; and newlines", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1010, "<[u8; 32]>::fmt\r\n")}, Count: 1}},
			"<[u8: 32]>::fmt   1\n"},
		{"empty name falls back to placeholder", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1010, "")}, Count: 1}},
			"libx.so+0x3010 1\n"},
		{"JIT code", []*stacks.Sample{{Stack: []*stacks.Location{sym(jit, 0x7f0000001000, "JS:*hot /app.js:3"), sym(lib, 0x1010, "main")}, Count: 1}},
			"main;JS:*hot /app.js:3_[j] 1\n"},
		{"Python code", []*stacks.Sample{{Stack: []*stacks.Location{sym(py, 1<<63|0x7f0000001000, "leaf"), sym(py, 1<<63|0x7f0000002000, "outer"),
			sym(lib, 0x1010, "_PyEval_EvalFrameDefault")}, Count: 1}},
			"_PyEval_EvalFrameDefault;outer_[py];leaf_[py] 1\n"},
		// Functions inlined into the evaluator at its address run for
		// the innermost Python frame: they go leafward of the run.
		{"Python code over inlined evaluator code", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1100, "x_add"),
			sym(py, 1<<63|0x7f0000001000, "leaf"), sym(py, 1<<63|0x7f0000002000, "outer"),
			sym(lib, 0x1010, "_PyLong_Add", "_PyEval_EvalFrameDefault"), sym(lib, 0x1020, "main")}, Count: 1}},
			"main;_PyEval_EvalFrameDefault;outer_[py];leaf_[py];_PyLong_Add_[i];x_add 1\n"},
		{"no frames", []*stacks.Sample{{Count: 4}}, "[unknown] 4\n"},
		{"truncated", []*stacks.Sample{{Stack: []*stacks.Location{sym(lib, 0x1010, "f")}, Count: 1, Truncated: true}},
			"[truncated];f 1\n"},
		{"merged and sorted", []*stacks.Sample{
			{Stack: []*stacks.Location{sym(lib, 0x1010, "z")}, Count: 1, Tid: 1},
			{Stack: []*stacks.Location{sym(lib, 0x1010, "a")}, Count: 1, Tid: 1},
			{Stack: []*stacks.Location{sym(lib, 0x1010, "z")}, Count: 2, Tid: 2},
			{Stack: []*stacks.Location{sym(lib, 0x1010, "q")}, Count: -1},
		}, "a 1\nz 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := &stacks.Profile{Period: 10_000_000, Samples: tc.samples}
			if err := WriteFolded(&buf, p, Options{}); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			checkFoldedSyntax(t, buf.String())
			// The same profiles must make valid pprof.
			if _, err := BuildPprof(p, Options{}); err != nil {
				t.Errorf("pprof: %v", err)
			}
		})
	}
}

// TestEmptyStackName: a sample without frames gets the frame
// Options.EmptyStack names, in every format.
func TestEmptyStackName(t *testing.T) {
	p := &stacks.Profile{Period: 10_000_000, Samples: []*stacks.Sample{{Count: 4, Comm: "app"}}}
	for _, name := range []string{"", "[user]"} {
		pp, err := BuildPprof(p, Options{EmptyStack: name})
		if err != nil {
			t.Fatal(err)
		}
		want := cmp.Or(name, EmptyStackFrame)
		if s := pp.Sample[0]; len(s.Location) != 1 || s.Location[0].Line[0].Function.Name != want || s.Location[0].Mapping.File != stacks.UnknownFile {
			t.Errorf("pprof with EmptyStack %q: sample %v, want one %s location on the %s mapping", name, s, want, stacks.UnknownFile)
		}
	}
	for _, f := range []Format{Folded, SVG, Speedscope} {
		var buf bytes.Buffer
		if err := Write(&buf, p, f, Options{EmptyStack: "[user]"}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "[user]") || strings.Contains(buf.String(), EmptyStackFrame) {
			t.Errorf("%s: the empty stack is not named [user]:\n%.500s", f, buf.String())
		}
	}
}
