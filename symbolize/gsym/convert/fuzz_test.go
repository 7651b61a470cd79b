package convert

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/symbolize/gsym"
)

// FuzzBreakpad converts arbitrary text as a Breakpad file and encodes the
// result: errors are fine, panics and runaway allocations are not.
func FuzzBreakpad(f *testing.F) {
	for _, name := range []string{"hand.sym", "cinline.sym"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := Breakpad(bytes.NewReader(data))
		if err != nil {
			return
		}
		if b, err := c.Encode(gsym.EncodeOptions{}); err == nil {
			if _, err := gsym.NewReader(b); err != nil {
				t.Fatalf("sprof cannot read its own output: %v", err)
			}
		}
	})
}

// FuzzLineProgram parses arbitrary bytes as a .debug_line unit and asks
// for the rows of a range and every file's path.
func FuzzLineProgram(f *testing.F) {
	for _, name := range []string{"cinline", "debuglink.debug"} {
		ef, err := elf.Open(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		b, err := debugSection(ef, nil, "line", 1<<20)
		ef.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(0x1150), uint64(0x40))
	}
	f.Fuzz(func(t *testing.T, data []byte, start, size uint64) {
		secs := &dwarfData{line: data, str: data, lineStr: data, order: binary.LittleEndian}
		lt, err := parseLineTable(secs, 0, nil)
		if err != nil {
			return
		}
		for _, i := range lt.rowsForRange(start, start+size%4096+1, nil) {
			_ = lt.rows[i]
		}
		for i := range min(len(lt.files)+1, 64) {
			lt.filePath(uint64(i), "/comp")
		}
	})
}

// FuzzELF converts arbitrary bytes as an ELF binary: the boundary where
// debug/elf and debug/dwarf, which are not hardened, meet hostile input.
// Conversion must fail cleanly, never panic or hang.
func FuzzELF(f *testing.F) {
	for _, name := range []string{"cinline", "debuglink.debug"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "bin")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, st, err := ELF(p, Options{DebugDirs: []string{dir}, MaxSectionSize: 16 << 20, Workers: 1})
		if err != nil || c.NumFunctions() == 0 {
			return
		}
		c.Encode(gsym.EncodeOptions{ByteOrder: st.ByteOrder})
	})
}

// FuzzDWARF converts arbitrary debug sections: unit headers, abbreviation
// tables, DIEs, range lists, string and address tables and line programs
// all come from the fuzzer. Errors are fine; panics, hangs and runaway
// allocations are not.
func FuzzDWARF(f *testing.F) {
	for _, name := range []string{"cinline", "cxx", "debuglink.debug", "gofix"} {
		ef, err := elf.Open(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		d, err := loadDWARF(ef, nil, 64<<20)
		ef.Close()
		if err != nil {
			f.Fatal(err)
		}
		// The Go fixture's DWARF is large: its first units are enough.
		info := d.info
		if len(d.units) > 4 {
			info = info[:d.units[4].off]
		}
		f.Add(info, d.abbrev, d.str, d.line, d.lineStr, d.ranges, d.rnglists, d.addr, d.strOffsets)
	}
	f.Fuzz(func(t *testing.T, info, abbrev, str, line, lineStr, ranges, rnglists, addr, strOffsets []byte) {
		d := &dwarfData{info: info, abbrev: abbrev, str: str, line: line, lineStr: lineStr, ranges: ranges,
			rnglists: rnglists, addr: addr, strOffsets: strOffsets, order: binary.LittleEndian}
		if err := newDWARFData(d); err != nil {
			return
		}
		c := gsym.NewCreator()
		if _, err := convertDWARF(context.Background(), c, d, 1, nil); err != nil {
			return
		}
		if _, err := c.Finalize(); err == nil && c.NumFunctions() > 0 {
			c.Encode(gsym.EncodeOptions{})
		}
	})
}
