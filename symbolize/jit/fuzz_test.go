package jit

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzPerfMap feeds arbitrary bytes, cut in two anywhere, as a perf map:
// no panic, and every symbol kept is one a Table accepts.
func FuzzPerfMap(f *testing.F) {
	f.Add([]byte(nodeMap), 10)
	f.Add([]byte("0x10 0x10 a\r\n"), 3)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		cut = min(max(cut, 0), len(b))
		var p PerfMap
		var tb Table
		p.Feed(b[:cut], tb.Add)
		p.Feed(b[cut:], tb.Add)
		for _, s := range tb.syms {
			if s.Size == 0 || s.End() < s.Start || len(s.Name) > MaxName {
				t.Fatalf("bad symbol kept: %+v", s)
			}
			if got := tb.Lookup(s.Start); got == nil {
				t.Fatalf("nothing at the start of %+v", s)
			}
		}
	})
}

// FuzzJITDump reads arbitrary bytes as a jitdump, whole and as a file
// growing in two steps: no panic, and the reader never moves past the
// bytes it was given.
func FuzzJITDump(f *testing.F) {
	f.Add(sampleDump(binary.LittleEndian), 100)
	f.Add(sampleDump(binary.BigEndian), 41)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		cut = min(max(cut, 0), len(b))
		var tb Table
		var d JITDump
		r := bytes.NewReader(b)
		d.Read(r, int64(cut), &tb)
		if d.Offset() > int64(cut) && d.order != nil {
			t.Fatalf("offset %d past the %d bytes given", d.Offset(), cut)
		}
		d.Read(r, int64(len(b)), &tb)
		if d.Offset() > int64(len(b)) {
			t.Fatalf("offset %d past the %d bytes", d.Offset(), len(b))
		}
		tb.Lookup(0)
	})
}
