package cpython

import (
	"encoding/binary"
	"testing"
)

// FuzzLineTable: lineAt on any table ends, never panics, and gives lines
// only from a table that parses up to the unit asked for.
func FuzzLineTable(f *testing.F) {
	f.Add(fakeTableBytes, 3)
	f.Add([]byte{0x80 | locLong<<3, 0x41, 0x41, 0x41}, 0)
	f.Add([]byte{0xff, 0xff, 0xff}, 7)
	f.Fuzz(func(t *testing.T, table []byte, lasti int) {
		lineAt(table, 1, lasti)
	})
}

// FuzzReader: a code object read from hostile memory never panics and
// reads no more than the bounds allow.
func FuzzReader(f *testing.F) {
	_, m := fakeProcess()
	f.Add(m.data, uint64(0x100), uint64(0x200))
	f.Fuzz(func(t *testing.T, data []byte, code, instr uint64) {
		p := &Process{Version: Version{3, 11}, Layout: tableLayouts[Version{3, 11}], CodeType: fakeCodeType}
		if len(data) >= int(p.Layout.ObType)+8 {
			// Most inputs would fail the type check: let some pass it.
			binary.LittleEndian.PutUint64(data[p.Layout.ObType:], fakeCodeType)
		}
		r := NewReader(&fakeMem{base: fakeBase, data: data}, p)
		if f, ok := r.Frame(fakeBase+code%0x1000, instr); ok && (len(f.Function) > 4*MaxString || len(f.File) > 4*MaxString) {
			t.Fatalf("names of %d and %d bytes", len(f.Function), len(f.File))
		}
	})
}
