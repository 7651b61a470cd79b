package cpython

import (
	"encoding/binary"
	"testing"
)

// FuzzLineTable: every version's line reader, on any table, ends and
// never panics.
func FuzzLineTable(f *testing.F) {
	f.Add(fakeTableBytes, 3)
	f.Add([]byte{0x80 | locLong<<3, 0x41, 0x41, 0x41}, 0)
	f.Add([]byte{0xff, 0xff, 0xff}, 7)
	f.Add([]byte{6, 1, 0, 0x80, 4, 0xff}, 4) // 3.10: a range without a line
	f.Fuzz(func(t *testing.T, table []byte, lasti int) {
		for _, minor := range []int{9, 10, 11} {
			lineReader(Version{3, minor})(table, 1, lasti)
		}
	})
}

// FuzzReader: a code object read from hostile memory never panics and
// reads no more than the bounds allow.
func FuzzReader(f *testing.F) {
	_, m := fakeProcess()
	f.Add(m.data, uint64(0x100), uint64(0x200))
	f.Fuzz(func(t *testing.T, data []byte, code, instr uint64) {
		for _, v := range []Version{{3, 10}, {3, 11}} {
			p := &Process{Version: v, Layout: tableLayouts[v], CodeType: fakeCodeType}
			if len(data) >= int(p.Layout.ObType)+8 {
				// Most inputs would fail the type check: let some pass it.
				binary.LittleEndian.PutUint64(data[p.Layout.ObType:], fakeCodeType)
			}
			r := NewReader(&fakeMem{base: fakeBase, data: data}, p)
			s := r.Locate(Sampled{Code: fakeBase + code%0x1000, Instr: instr})
			if f, ok := r.Frame(s.CodeAddr(), s.Instr); ok && (len(f.Function) > 4*MaxString || len(f.File) > 4*MaxString) {
				t.Fatalf("%v: names of %d and %d bytes", v, len(f.Function), len(f.File))
			}
		}
	})
}
