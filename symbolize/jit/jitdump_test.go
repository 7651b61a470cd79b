package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// dumpWriter writes a jitdump as the specification lays it out, for
// tests; real runtimes' files are read in the integration tests.
type dumpWriter struct {
	b     []byte
	order byteOrder
}

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

func newDump(order byteOrder) *dumpWriter {
	w := &dumpWriter{order: order}
	w.u32(jitMagic)
	w.u32(1)
	w.u32(fileHeaderSize)
	w.u32(62) // EM_X86_64
	w.u32(0)
	w.u32(1234)
	w.u64(1)
	w.u64(0)
	return w
}

func (w *dumpWriter) u32(v uint32) { w.b = w.order.AppendUint32(w.b, v) }
func (w *dumpWriter) u64(v uint64) { w.b = w.order.AppendUint64(w.b, v) }

func (w *dumpWriter) record(id uint32, body []byte) {
	w.u32(id)
	w.u32(uint32(recHeaderSize + len(body)))
	w.u64(7)
	w.b = append(w.b, body...)
}

func (w *dumpWriter) load(addr, size uint64, name string) {
	var b []byte
	b = w.order.AppendUint32(b, 1234)
	b = w.order.AppendUint32(b, 1235)
	b = w.order.AppendUint64(b, addr)
	b = w.order.AppendUint64(b, addr)
	b = w.order.AppendUint64(b, size)
	b = w.order.AppendUint64(b, 0)
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, make([]byte, size)...)
	w.record(recCodeLoad, b)
}

func (w *dumpWriter) move(from, to, size uint64) {
	var b []byte
	b = w.order.AppendUint32(b, 1234)
	b = w.order.AppendUint32(b, 1235)
	b = w.order.AppendUint64(b, to)
	b = w.order.AppendUint64(b, from)
	b = w.order.AppendUint64(b, to)
	b = w.order.AppendUint64(b, size)
	b = w.order.AppendUint64(b, 0)
	w.record(recCodeMove, b)
}

type debugEntry struct {
	addr uint64
	line uint32
	file string // "\xff" repeats the previous
}

func (w *dumpWriter) debug(addr uint64, entries ...debugEntry) {
	var b []byte
	b = w.order.AppendUint64(b, addr)
	b = w.order.AppendUint64(b, uint64(len(entries)))
	for _, e := range entries {
		b = w.order.AppendUint64(b, e.addr)
		b = w.order.AppendUint32(b, e.line)
		b = w.order.AppendUint32(b, 0)
		b = append(b, e.file...)
		b = append(b, 0)
	}
	w.record(recCodeDebugInfo, b)
}

func sampleDump(order byteOrder) []byte {
	w := newDump(order)
	w.debug(0x5000, debugEntry{0x5000, 3, "/tmp/hot.js"}, debugEntry{0x5010, 4, "\xff"})
	w.load(0x5000, 0x20, "JS:*hotLoop")
	w.load(0x6000, 0x10, "Builtin:Call")
	w.record(4, make([]byte, 24)) // unwinding info: skipped
	w.move(0x6000, 0x7000, 0x10)
	w.record(recCodeClose, nil)
	return w.b
}

func readDump(t *testing.T, b []byte) (*Table, error) {
	t.Helper()
	var tb Table
	var d JITDump
	err := d.Read(bytes.NewReader(b), int64(len(b)), &tb)
	return &tb, err
}

func TestJITDump(t *testing.T) {
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		tb, err := readDump(t, sampleDump(order))
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("%v: err %v, want ErrClosed", order, err)
		}
		hot := tb.Lookup(0x5018)
		want := &Symbol{Start: 0x5000, Size: 0x20, Name: "JS:*hotLoop", Lines: []Line{{0, "/tmp/hot.js", 3}, {0x10, "/tmp/hot.js", 4}}}
		if !reflect.DeepEqual(hot, want) {
			t.Fatalf("%v: Lookup(0x5018) = %+v, want %+v", order, hot, want)
		}
		if l := hot.LineAt(0x5018); l == nil || l.Line != 4 {
			t.Fatalf("%v: line of 0x5018 = %+v, want 4", order, l)
		}
		for _, a := range []uint64{0x6008, 0x7008} {
			if s := tb.Lookup(a); s == nil || s.Name != "Builtin:Call" || s.Lines != nil {
				t.Fatalf("%v: Lookup(%#x) = %+v, want Builtin:Call without lines", order, a, s)
			}
		}
	}
}

// TestJITDumpIncremental reads the file as it grows, one byte at a time:
// a record is read once it is whole, and the symbols end up the same.
func TestJITDumpIncremental(t *testing.T) {
	b := sampleDump(binary.LittleEndian)
	whole, _ := readDump(t, b)
	var tb Table
	var d JITDump
	var err error
	for n := 0; n <= len(b) && err == nil; n++ {
		err = d.Read(bytes.NewReader(b[:n]), int64(n), &tb)
	}
	if !errors.Is(err, ErrClosed) || d.Offset() != int64(len(b)) {
		t.Fatalf("err %v at offset %d of %d", err, d.Offset(), len(b))
	}
	if tb.Len() != whole.Len() || tb.Lookup(0x7000).Name != "Builtin:Call" {
		t.Fatalf("incremental read kept %d symbols, whole %d", tb.Len(), whole.Len())
	}
}

func TestJITDumpMalformed(t *testing.T) {
	w := newDump(binary.LittleEndian)
	w.move(0x9000, 0xa000, 0x10)           // nothing loaded at 0x9000
	w.record(recCodeLoad, []byte{1, 2, 3}) // too short
	noNUL := binary.LittleEndian.AppendUint64(nil, 0x5000)
	noNUL = binary.LittleEndian.AppendUint64(noNUL, 1)
	noNUL = append(noNUL, make([]byte, 16)...)
	noNUL = append(noNUL, "no NUL"...)
	w.record(recCodeDebugInfo, noNUL)
	w.load(0x5000, 0x10, "ok")
	tb, err := readDump(t, w.b)
	if err != nil {
		t.Fatalf("err %v: want the bad records skipped", err)
	}
	if s := tb.Lookup(0x5000); s == nil || s.Name != "ok" {
		t.Fatalf("the good record after bad ones: %+v", s)
	}

	bad := []struct {
		name string
		b    []byte
		want string
	}{
		{"magic", []byte("ELF\x00" + string(make([]byte, 36))), "magic"},
		{"version", func() []byte { b := newDump(binary.LittleEndian).b; b[4] = 2; return b }(), "version"},
		{"record size", func() []byte { w := newDump(binary.LittleEndian); w.u32(0); w.u32(3); w.u64(0); return w.b }(), "total_size"},
	}
	for _, c := range bad {
		_, err := readDump(t, c.b)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != c.want {
			t.Errorf("%s: err %v, want a FormatError on %s", c.name, err, c.want)
		}
	}
}

// TestJITDumpDamagedLines: a debug-info record whose file name was written
// over (as Node 20's V8 does to some) keeps the lines before it, and a
// line past the code it describes is dropped.
func TestJITDumpDamagedLines(t *testing.T) {
	w := newDump(binary.LittleEndian)
	w.debug(0x5000, debugEntry{0x5000, 3, "/tmp/hot.js"}, debugEntry{0x5010, 4, "\xff"}, debugEntry{0x5080, 9, "\xff"})
	w.load(0x5000, 0x40, "JS:*hotLoop")
	w.debug(0x6000, debugEntry{0x6000, 7, "/a.js"}, debugEntry{0x6008, 8, "\xb9\x83\x02"}, debugEntry{0x6010, 9, "/a.js"})
	w.load(0x6000, 0x20, "JS:*other")
	var d JITDump
	var tb Table
	if err := d.Read(bytes.NewReader(w.b), int64(len(w.b)), &tb); err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Lookup(0x5000).Lines, []Line{{0, "/tmp/hot.js", 3}, {0x10, "/tmp/hot.js", 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("lines of hotLoop %+v, want %+v (the one past its code dropped)", got, want)
	}
	if got, want := tb.Lookup(0x6000).Lines, []Line{{0, "/a.js", 7}}; !reflect.DeepEqual(got, want) {
		t.Errorf("lines of other %+v, want %+v (none from the damaged name on)", got, want)
	}
	if d.Malformed != 1 {
		t.Errorf("%d records counted malformed, want 1", d.Malformed)
	}
}
