package cpython

import (
	"encoding/binary"
	"fmt"
	"io"
	"testing"
)

// fakeMem is process memory for tests: data mapped at base.
type fakeMem struct {
	base uint64
	data []byte
}

func (m *fakeMem) ReadAt(b []byte, off int64) (int, error) {
	at := uint64(off) - m.base
	if uint64(off) < m.base || at > uint64(len(m.data)) || uint64(len(b)) > uint64(len(m.data))-at {
		return 0, io.EOF
	}
	return copy(b, m.data[at:]), nil
}

func (m *fakeMem) put64(addr, v uint64) { binary.LittleEndian.PutUint64(m.data[addr-m.base:], v) }
func (m *fakeMem) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.data[addr-m.base:], v)
}

// Addresses in the fake process of a 3.11 interpreter.
const (
	fakeBase     = 0x7f0000000000
	fakeCodeType = 0x7f00000f0000
	fakeCode     = fakeBase + 0x100
	fakeName     = fakeBase + 0x400
	fakeFile     = fakeBase + 0x500
	fakeTable    = fakeBase + 0x600
	fakeLatin    = fakeBase + 0x700
)

// fakeTableBytes covers code units 0-1 with line 10 (the first line)
// and 2-4 with line 12, in no-column entries.
var fakeTableBytes = []byte{0x80 | locNoCol<<3 | 1, 0x00, 0x80 | locNoCol<<3 | 2, 0x04}

func fakeProcess() (*Process, *fakeMem) {
	p := &Process{Version: Version{3, 11}, Layout: tableLayouts[Version{3, 11}], CodeType: fakeCodeType}
	m := &fakeMem{base: fakeBase, data: make([]byte, 0x1000)}
	l := &p.Layout
	m.put64(fakeCode+l.ObType, fakeCodeType)
	m.put32(fakeCode+l.CodeFirstLineno, 10)
	m.put64(fakeCode+l.CodeQualname, fakeName)
	m.put64(fakeCode+l.CodeFilename, fakeFile)
	m.put64(fakeCode+l.CodeLinetable, fakeTable)
	putStr := func(addr uint64, s string, ascii bool) {
		state := uint32(1<<stateKindShift | stateCompact)
		data := l.CompactSize
		if ascii {
			state |= stateASCII
			data = l.ASCIISize
		}
		m.put32(addr+l.UnicodeState, state)
		m.put64(addr+l.UnicodeLength, uint64(len(s)))
		copy(m.data[addr+data-m.base:], s)
	}
	putStr(fakeName, "Outer.middle", true)
	putStr(fakeFile, "/app/chain.py", true)
	putStr(fakeLatin, "caf\xe9", false)
	m.put64(fakeTable+l.BytesSize, uint64(len(fakeTableBytes)))
	copy(m.data[fakeTable+l.BytesData-m.base:], fakeTableBytes)
	return p, m
}

func TestReaderFrame(t *testing.T) {
	p, m := fakeProcess()
	r := NewReader(m, p)
	start := uint64(fakeCode) + p.Layout.CodeAdaptive
	for _, tc := range []struct {
		instr uint64
		line  int
	}{
		{start - 2, 10}, // before the first instruction: the first line
		{start, 10},
		{start + 2, 10},
		{start + 4, 12},
		{start + 8, 12},
		{start + 10, 0}, // past the table: no line
	} {
		f, ok := r.Frame(fakeCode, tc.instr)
		if !ok || f != (Frame{"Outer.middle", "/app/chain.py", tc.line}) {
			t.Errorf("instruction %#x: %+v, %v; want line %d", tc.instr, f, ok, tc.line)
		}
	}
	if s, err := r.str(fakeLatin); err != nil || s != "café" {
		t.Errorf("latin-1 string: %q, %v", s, err)
	}
	// Not a code object: its type is not PyCode_Type.
	if f, ok := r.Frame(fakeName, start); ok {
		t.Errorf("a str read as a code object: %+v", f)
	}
	// Unreadable.
	if _, ok := r.Frame(0x1000, start); ok {
		t.Error("unmapped memory read as a code object")
	}
}

func TestReaderBounds(t *testing.T) {
	p, m := fakeProcess()
	m.put64(fakeTable+p.Layout.BytesSize, MaxLineTable+1)
	r := NewReader(m, p)
	if f, ok := r.Frame(fakeCode, fakeCode+p.Layout.CodeAdaptive+4); !ok || f.Line != 0 {
		t.Errorf("oversized line table: %+v, %v; want a frame without line", f, ok)
	}
	if _, err := r.bytesObject(fakeTable); err == nil {
		t.Error("a bytes object past MaxLineTable was read")
	}
	m.put64(fakeName+p.Layout.UnicodeLength, 1<<40)
	if s, err := r.str(fakeName); err == nil && len(s) > MaxString {
		t.Errorf("a %d-byte name was read, beyond MaxString", len(s))
	}
}

func TestSplice(t *testing.T) {
	p := &Process{Eval: []Range{{0x1000, 0x2000}}}
	py := func(code uint64, instr uint64) Sampled { return Sampled{Code: code, Instr: instr} }
	leaf, mid, entry := py(0x100, 0xa0), py(0x200, 0xb0), py(0x300|EntryFlag, 0xc0)
	cb := py(0x400|EntryFlag, 0xd0)
	for _, tc := range []struct {
		name   string
		native []uint64
		py     []Sampled
		want   []uint64
	}{
		{"no Python", []uint64{0x500, 0x1100, 0x600}, nil, []uint64{0x500, 0x1100, 0x600}},
		{"one evaluator call", []uint64{0x500, 0x1100, 0x600}, []Sampled{leaf, mid, entry},
			[]uint64{0x500, leaf.Addr(), mid.Addr(), entry.Addr(), 0x1100, 0x600}},
		{"the pc in the evaluator", []uint64{0x1100, 0x600}, []Sampled{leaf, entry},
			[]uint64{leaf.Addr(), entry.Addr(), 0x1100, 0x600}},
		{"a C callback between two calls", []uint64{0x500, 0x1100, 0x700, 0x1200, 0x600}, []Sampled{leaf, cb, mid, entry},
			[]uint64{0x500, leaf.Addr(), cb.Addr(), 0x1100, 0x700, mid.Addr(), entry.Addr(), 0x1200, 0x600}},
		{"a return address just past the evaluator", []uint64{0x500, 0x2000}, []Sampled{entry},
			[]uint64{0x500, entry.Addr(), 0x2000}},
		{"native stack cut short", []uint64{0x500, 0x1100}, []Sampled{leaf, cb, mid, entry},
			[]uint64{0x500, leaf.Addr(), cb.Addr(), 0x1100, mid.Addr(), entry.Addr()}},
		{"the pc just past the evaluator is not in it", []uint64{0x2000, 0x600}, []Sampled{entry},
			[]uint64{0x2000, 0x600, entry.Addr()}},
	} {
		got := p.Splice(nil, tc.native, tc.py)
		if fmt.Sprintf("%x", got) != fmt.Sprintf("%x", tc.want) {
			t.Errorf("%s: %x, want %x", tc.name, got, tc.want)
		}
	}
}

func TestInterpreter(t *testing.T) {
	for path, want := range map[string]int{
		"/usr/bin/python3.11":                            11,
		"/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0": 12,
		"/opt/py/lib/libpython3.13.so":                   13,
		"/usr/bin/python3.13d":                           13,
		"/usr/bin/python3.13t":                           0, // free-threaded
		"/usr/bin/python3":                               0,
		"/usr/lib/libpython3.11.so.evil":                 0,
		"/usr/bin/python3.1234":                          0,
	} {
		v, ok := Interpreter(path)
		if ok != (want != 0) || (ok && v != (Version{3, want})) {
			t.Errorf("%s: %v, %v; want 3.%d", path, v, ok, want)
		}
	}
}

// BenchmarkFrame: naming a Python frame from the cache (warm) and from
// the process's memory (cold: three reads of the code object, its name and
// file, and one of its line table).
func BenchmarkFrame(b *testing.B) {
	p, m := fakeProcess()
	instr := fakeCode + p.Layout.CodeAdaptive + 4
	b.Run("warm", func(b *testing.B) {
		r := NewReader(m, p)
		for b.Loop() {
			r.Frame(fakeCode, instr)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
	})
	b.Run("cold", func(b *testing.B) {
		r := NewReader(m, p)
		for b.Loop() {
			clear(r.codes)
			r.Frame(fakeCode, instr)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
	})
}
