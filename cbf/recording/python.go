package recording

import (
	"time"
)

// PythonFrame names one Python frame of process PID: the frame at address
// Addr in the process's user stacks (which carries cpython.FrameTag, so no
// image covers it), running Function at File:Line. It applies to the
// samples of PID from Time on.
//
// A Python chunk has the JIT chunk's record layout (§12 of FORMAT.md): a
// frame is a symbol of size 1 at Addr with one line, at offset 0.
type PythonFrame struct {
	Time           time.Duration
	PID            uint32
	Addr           uint64
	Function, File string
	Line           int
}

// Python records the name of a Python frame that samples of pid use, at t,
// the time of the first of them or earlier. Record each frame once per
// process, before the end of the recording.
func (w *Writer) Python(t time.Time, pid uint32, f PythonFrame) error {
	if w.err != nil {
		return w.err
	}
	s := JITSymbol{Time: t.Sub(w.start), PID: pid, Start: f.Addr, Size: 1, Name: f.Function,
		Lines: []JITLine{{File: f.File, Line: f.Line}}}
	if s.Start+1 == 0 {
		return nil // runs past 2^64: a reader would reject it
	}
	w.pys = s.appendRecord(w.pys, &w.pyBase)
	w.npys++
	return w.tick(w.opts.Clock())
}

// Python parses a Python chunk.
func (c *Chunk) Python() ([]PythonFrame, error) {
	p := c.payload()
	syms, err := parseJIT(p)
	if err != nil {
		return nil, err
	}
	out := make([]PythonFrame, len(syms))
	for i, s := range syms {
		out[i] = PythonFrame{Time: s.Time, PID: s.PID, Addr: s.Start, Function: s.Name}
		if len(s.Lines) > 0 {
			out[i].File, out[i].Line = s.Lines[0].File, s.Lines[0].Line
		}
	}
	return out, nil
}
