package cfi

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"testing"
)

// fuzzSections returns the .eh_frame, .eh_frame_hdr and .debug_frame
// sections of the committed fixtures.
func fuzzSections(f *testing.F) [][]byte {
	bins, _ := filepath.Glob("../../testdata/sframe/chain-*-v[13]")
	var out [][]byte
	for _, bin := range bins {
		ef, err := elf.Open(bin)
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range []string{".eh_frame", ".eh_frame_hdr", ".debug_frame"} {
			if s := ef.Section(name); s != nil {
				if d, err := s.Data(); err == nil {
					out = append(out, d)
				}
			}
		}
		ef.Close()
	}
	return out
}

// FuzzParse parses arbitrary bytes as each kind of CFI section, in each
// byte order and address size, interprets every FDE for amd64 and aarch64
// and uses them as an .eh_frame_hdr. Nothing may panic or run away.
func FuzzParse(f *testing.F) {
	for _, d := range fuzzSections(f) {
		for cfg := range byte(8) {
			f.Add(cfg, d)
		}
	}
	f.Fuzz(func(t *testing.T, cfg byte, data []byte) {
		s := Section{Kind: EHFrame, Data: data, Order: binary.LittleEndian, AddrSize: 8,
			Bases: Bases{Section: 0x1000, Text: 0x2000, Data: 0x3000}}
		if cfg&1 != 0 {
			s.Kind = DebugFrame
		}
		if cfg&2 != 0 {
			s.Order = binary.BigEndian
		}
		if cfg&4 != 0 {
			s.AddrSize = 4
		}
		fr, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		in := Interpreter{Track: []uint64{6, 16, 29, 30}, AArch64: cfg&8 != 0}
		for i := range fr.FDEs {
			fde := &fr.FDEs[i]
			rows, err := in.Rows(fde)
			if err != nil {
				continue
			}
			if len(rows) == 0 || rows[0].Start != fde.Start {
				t.Fatalf("FDE at %#x: %d rows, first at %#x", fde.Offset, len(rows), rows[0].Start)
			}
			for j := 1; j < len(rows); j++ {
				if rows[j].Start <= rows[j-1].Start || rows[j].Start >= fde.End() {
					t.Fatalf("FDE at %#x [%#x, %#x): row %d at %#x after %#x", fde.Offset, fde.Start, fde.End(), j, rows[j].Start, rows[j-1].Start)
				}
			}
		}
		h, err := ParseHdr(data, 0x1000, s.Order, s.AddrSize)
		if err != nil {
			return
		}
		_ = h.Check(fr, h.EHFramePtr)
		for _, pc := range []uint64{0, 0x1000, 0x1234, ^uint64(0)} {
			_, _, _ = h.Find(pc)
		}
	})
}
