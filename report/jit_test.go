package report

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/sprof/sprof/cbf/recording"
)

// TestJIT: frames in generated code are named from the JIT symbols the
// recording stores, per process (pid 101 runs other code at the same
// address), the later of two overlapping symbols winning, with the
// source line of a symbol's line table.
func TestJIT(t *testing.T) {
	var buf bytes.Buffer
	clock := start
	w, _ := newSpinWriter(t, &buf, &clock)
	const code = 0x7f0000001000
	w.JIT(start, 100, recording.JITSymbol{Start: code, Size: 0x100, Name: "JS:*old"})
	w.JIT(start, 100, recording.JITSymbol{Start: code, Size: 0x40, Name: "JS:*hot",
		Lines: []recording.JITLine{{Offset: 0, File: "/app.js", Line: 3}, {Offset: 0x20, File: "/app.js", Line: 4}}})
	w.JIT(start, 101, recording.JITSymbol{Start: code, Size: 0x100, Name: "void Hot.spin()"})
	w.Sample(start, 100, 100, 0, "node", []uint64{code + 0x21, code + 0x81, 0x1234}, nil, 0, 1)
	w.Sample(start, 101, 101, 0, "java", []uint64{code + 0x21}, nil, 0, 1)
	clock = start.Add(time.Second)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, _, err := Read(&buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(p.Samples[0]), []string{"JS:*hot", "JS:*old", ""}; !slices.Equal(got, want) {
		t.Errorf("pid 100: %q, want %q", got, want)
	}
	if f := p.Samples[0].Stack[0].Frames[0]; f.File != "/app.js" || f.Line != 4 {
		t.Errorf("pid 100 leaf at %s:%d, want /app.js:4", f.File, f.Line)
	}
	if got, want := names(p.Samples[1]), []string{"void Hot.spin()"}; !slices.Equal(got, want) {
		t.Errorf("pid 101: %q, want %q", got, want)
	}
}
