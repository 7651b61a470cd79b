package recording

import (
	"encoding/binary"
	"math"
	"time"
)

// Limits of a JIT symbol that a reader enforces.
const (
	// MaxJITLines bounds the lines of one JIT symbol.
	MaxJITLines = 1 << 16
)

// JITSymbol names the code [Start, Start+Size) that process PID generated:
// the function Name, with source lines where the runtime gave them. It
// applies to the samples of PID from Time on; a later symbol of the same
// PID that overlaps it wins where they overlap, as the runtime reused the
// memory.
type JITSymbol struct {
	Time        time.Duration
	PID         uint32
	Start, Size uint64
	Name        string
	Lines       []JITLine
}

// JITLine says that the code from Start+Offset on comes from File:Line.
type JITLine struct {
	Offset uint64
	File   string
	Line   int
}

// JIT records a JIT symbol that samples of pid use, at t, the time of the
// first of them or earlier. Record each symbol once, before the end of
// the recording; sprof's collector does so as soon as the runtime has
// written it.
func (w *Writer) JIT(t time.Time, pid uint32, s JITSymbol) error {
	if w.err != nil {
		return w.err
	}
	if s.Size == 0 || s.Start+s.Size < s.Start {
		return nil // names no code: a reader would reject it
	}
	s.Time, s.PID = t.Sub(w.start), pid
	w.jits = s.appendRecord(w.jits, &w.jitBase)
	w.njits++
	return w.tick(w.opts.Clock())
}

func (s *JITSymbol) appendRecord(dst []byte, base *recordBase) []byte {
	us := micros(int64(s.Time))
	dst = binary.AppendVarint(dst, us-base.time)
	dst = binary.AppendVarint(dst, int64(s.PID)-base.pid)
	base.time, base.pid = us, int64(s.PID)
	dst = binary.AppendUvarint(dst, s.Start)
	dst = binary.AppendUvarint(dst, s.Size)
	dst = appendString(dst, s.Name)
	// Only lines inside the code, in order, as a reader requires.
	var lines []JITLine
	for _, l := range s.Lines {
		if l.Offset < s.Size && (len(lines) == 0 || l.Offset >= lines[len(lines)-1].Offset) && len(lines) < MaxJITLines {
			lines = append(lines, l)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(lines)))
	var off uint64
	var file string
	for i, l := range lines {
		dst = binary.AppendUvarint(dst, l.Offset-off)
		off = l.Offset
		dst = binary.AppendUvarint(dst, uint64(max(l.Line, 0)))
		if i > 0 && l.File == file {
			dst = appendString(dst, "")
		} else {
			dst = appendString(dst, l.File)
		}
		file = l.File
	}
	return dst
}

// JIT parses a JIT chunk.
func (c *Chunk) JIT() ([]JITSymbol, error) { return parseJIT(c.payload()) }

func parseJIT(p payload) ([]JITSymbol, error) {
	n, err := p.count("count", 6)
	if err != nil {
		return nil, err
	}
	out := make([]JITSymbol, 0, n)
	var base recordBase
	for range n {
		s, err := parseJITSymbol(&p, &base)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseJITSymbol(p *payload, base *recordBase) (JITSymbol, error) {
	var s JITSymbol
	off := p.off
	dt, err := p.varint("time")
	if err != nil {
		return s, err
	}
	us, err := addMicros(base.time, dt)
	if err != nil {
		return s, p.errorf(off, "time", "%v", err)
	}
	base.time = us
	s.Time = time.Duration(us) * time.Microsecond
	if s.PID, err = p.delta32("pid", base.pid); err != nil {
		return s, err
	}
	base.pid = int64(s.PID)
	if s.Start, err = p.uvarint("start"); err != nil {
		return s, err
	}
	off = p.off
	if s.Size, err = p.uvarint("size"); err != nil {
		return s, err
	}
	if s.Size == 0 || s.Start+s.Size < s.Start {
		return s, p.errorf(off, "size", "%d at %#x is empty or runs past 2^64", s.Size, s.Start)
	}
	if s.Name, err = p.string("name"); err != nil {
		return s, err
	}
	nl, err := p.count("lines", 3)
	if err != nil {
		return s, err
	}
	if nl > MaxJITLines {
		return s, p.errorf(off, "lines", "%d lines, more than %d", nl, MaxJITLines)
	}
	var at uint64
	var file string
	for i := range nl {
		off := p.off
		d, err := p.uvarint("line offset")
		if err != nil {
			return s, err
		}
		if at+d < at || at+d >= s.Size {
			return s, p.errorf(off, "line offset", "%d past the symbol's %d bytes", at+d, s.Size)
		}
		at += d
		off = p.off
		line, err := p.uvarint("line")
		if err != nil {
			return s, err
		}
		if line > math.MaxInt32 {
			return s, p.errorf(off, "line", "%d is out of range", line)
		}
		f, err := p.string("file")
		if err != nil {
			return s, err
		}
		if f != "" || i == 0 {
			file = f
		}
		s.Lines = append(s.Lines, JITLine{Offset: at, File: file, Line: int(line)})
	}
	return s, nil
}
