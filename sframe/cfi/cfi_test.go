package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// le builds little-endian CFI bytes: integers of the given widths, raw
// byte slices, and strings (NUL-terminated).
func le(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case uint8:
			b = append(b, v)
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		case []byte:
			b = append(b, v...)
		case string:
			b = append(append(b, v...), 0)
		default:
			panic(p)
		}
	}
	return b
}

// record prefixes a body with its 32-bit length.
func record(body ...any) []byte {
	b := le(body...)
	return append(le(uint32(len(b))), b...)
}

// cieZR is an amd64 CIE at offset 0 with FDE encoding enc: CFA = rsp+8,
// RA at CFA-8.
func cieZR(enc uint8) []byte {
	return record(uint32(0), uint8(1), "zR", uint8(1), uint8(0x78), uint8(16), uint8(1), enc,
		[]byte{0x0c, 7, 8, 0x90, 1})
}

// fde0 is an FDE pointing back to the CIE at offset 0 from offset at.
func fde0(at int, body ...any) []byte {
	return record(append([]any{uint32(at + 4)}, body...)...)
}

func parseEH(t *testing.T, data []byte) *Frame {
	t.Helper()
	fr, err := Parse(Section{Kind: EHFrame, Data: data, Order: binary.LittleEndian, AddrSize: 8,
		Bases: Bases{Section: 0x10000, Text: 0x20000, Data: 0x30000}})
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// TestPointerEncodings reads FDE start addresses stored in every format
// and relative to every base a producer can choose.
func TestPointerEncodings(t *testing.T) {
	for _, c := range []struct {
		name      string
		enc       uint8
		start     []byte // the pc_begin field, at section offset 0x1e
		size      []byte
		wantStart uint64
	}{
		{"absptr", 0x00, le(uint64(0x401000)), le(uint64(0x10)), 0x401000},
		{"udata2", 0x02, le(uint16(0x1234)), le(uint16(0x10)), 0x1234},
		{"udata4", 0x03, le(uint32(0x401000)), le(uint32(0x10)), 0x401000},
		{"udata8", 0x04, le(uint64(0x401000)), le(uint64(0x10)), 0x401000},
		{"uleb128", 0x01, []byte{0x80, 0x20}, []byte{0x10}, 0x1000},
		{"sleb128 pcrel", 0x19, []byte{0x7f}, []byte{0x10}, 0x1001e - 1},
		{"sdata2 pcrel", 0x1a, le(uint16(0xfffe)), le(uint16(0x10)), 0x1001e - 2},
		{"sdata4 pcrel", 0x1b, le(uint32(0xfffff000)), le(uint32(0x10)), 0x1001e - 0x1000},
		{"sdata8 pcrel", 0x1c, le(uint64(0x100)), le(uint64(0x10)), 0x1011e},
		{"textrel udata4", 0x23, le(uint32(0x100)), le(uint32(0x10)), 0x20100},
		{"datarel sdata4", 0x3b, le(uint32(0xffffff00)), le(uint32(0x10)), 0x30000 - 0x100},
		{"aligned", 0x50, le(uint16(0), uint64(0x401000)), le(uint64(0x10)), 0x401000}, // 0x1001e padded to 0x10020
	} {
		t.Run(c.name, func(t *testing.T) {
			cie := cieZR(c.enc) // 0x16 bytes: the FDE's start field is at 0x1e
			data := append(cie, fde0(len(cie), c.start, c.size, uint8(0))...)
			fr := parseEH(t, data)
			if len(fr.Errors) != 0 || len(fr.FDEs) != 1 {
				t.Fatalf("%v, %d FDEs", fr.Errors, len(fr.FDEs))
			}
			if f := fr.FDEs[0]; f.Start != c.wantStart || f.Size != 0x10 {
				t.Errorf("start %#x size %#x, want %#x", f.Start, f.Size, c.wantStart)
			}
		})
	}
}

// TestAugmentation reads the augmentation data of a CIE with every
// letter: LSDA relative to the function, an indirect personality, a
// signal frame and the aarch64 B key.
func TestAugmentation(t *testing.T) {
	cie := record(uint32(0), uint8(1), "zPLRSB", uint8(4), uint8(0x78), uint8(30),
		uint8(7), uint8(0x9b), uint32(0x100), uint8(0x43), uint8(0x1b), []byte{0x0c, 31, 0})
	at := len(cie)
	data := append(cie, fde0(at, uint32(0x1000), uint32(0x40), uint8(4), uint32(0x20))...)
	fr := parseEH(t, data)
	if len(fr.Errors) != 0 || len(fr.FDEs) != 1 {
		t.Fatalf("%v, %d FDEs", fr.Errors, len(fr.FDEs))
	}
	f := fr.FDEs[0]
	c := f.CIE
	// The personality field is at section offset 4+4+1+7+1+1+1+1+1 = 0x15.
	if !c.SignalFrame || !c.PACKeyB || !c.PersonalityIndirect || c.Personality != 0x10000+0x15+0x100 {
		t.Errorf("CIE %+v", c)
	}
	start := uint64(0x10000 + at + 8 + 0x1000)
	if f.Start != start || f.LSDA != start+0x20 {
		t.Errorf("FDE start %#x LSDA %#x, want %#x and %#x", f.Start, f.LSDA, start, start+0x20)
	}
}

// TestDebugFrame reads a .debug_frame with a version 4 CIE (address and
// segment sizes) and a 64-bit DWARF FDE, whose CIE pointers are section
// offsets.
func TestDebugFrame(t *testing.T) {
	cie := record(uint32(0xffffffff), uint8(4), "", uint8(8), uint8(0), uint8(1), uint8(0x78), uint8(16), []byte{0x0c, 7, 8})
	body := le(uint64(0), uint64(0x401000), uint64(0x20), []byte{0x41, 0x0e, 16})
	fde64 := append(le(uint32(0xffffffff), uint64(len(body))), body...)
	data := append(cie, fde64...)
	fr, err := Parse(Section{Kind: DebugFrame, Data: data, Order: binary.LittleEndian, AddrSize: 8})
	if err != nil || len(fr.Errors) != 0 || len(fr.FDEs) != 1 {
		t.Fatal(err, fr.Errors)
	}
	in := Interpreter{Track: []uint64{16}}
	rows, err := in.Rows(&fr.FDEs[0])
	if err != nil || len(rows) != 2 || rows[1].Start != 0x401001 || rows[1].CFA.Offset != 16 {
		t.Fatalf("%v %+v", err, rows)
	}
}

// TestOperations runs an FDE using every DW_CFA operation the interpreter
// knows and checks the rows.
func TestOperations(t *testing.T) {
	ops := []byte{
		0x41,     // advance_loc 1
		0x0e, 16, // def_cfa_offset 16
		0x86, 2, // offset r6 at cfa-16
		0x02, 2, // advance_loc1 2 -> +3
		0x0d, 6, // def_cfa_register r6
		0x2e, 32, // GNU_args_size 32
		0x03, 1, 0, // advance_loc2 1 -> +4
		0x0a,          // remember_state
		0x12, 7, 0x7f, // def_cfa_sf r7, -1*-8 = 8
		0x08, 6, // same_value r6
		0x09, 16, 3, // register r16 in r3
		0x04, 1, 0, 0, 0, // advance_loc4 1 -> +5
		0x0b,           // restore_state
		0x11, 16, 0x7f, // offset_extended_sf r16 at cfa+8
		0x41,       // +6
		0x14, 6, 1, // val_offset r6 = cfa-8
		0x15, 16, 0x7e, // val_offset_sf r16 = cfa+16
		0x41,             // +7
		0x10, 6, 1, 0x9c, // expression r6 {DW_OP_...}
		0x16, 16, 1, 0x9c, // val_expression r16
		0x41,     // +8
		0xc6,     // restore r6
		0x06, 16, // restore_extended r16
		0x13, 0x7e, // def_cfa_offset_sf 16
		0x41,       // +9
		0x2f, 6, 2, // GNU_negative_offset_extended r6 at cfa+16
		0x05, 16, 1, // offset_extended r16 at cfa-8
		0x07, 3, // undefined r3 (not tracked)
		0x01, 0x0a, 0x10, 0x40, 0, 0, 0, 0, 0, // set_loc 0x40100a
		0x0f, 2, 0x77, 8, // def_cfa_expression
		0x00,     // nop
		0x41,     // +0xb
		0x0e, 24, // def_cfa_offset 24: kept for later
		0x41,    // +0xc
		0x0d, 7, // def_cfa_register r7: back to rsp+24
	}
	cie := cieZR(0x04) // udata8 addresses
	data := append(cie, fde0(len(cie), uint64(0x401000), uint64(0x20), uint8(0), ops)...)
	fr := parseEH(t, data)
	if len(fr.Errors) != 0 || len(fr.FDEs) != 1 {
		t.Fatalf("%v, %d FDEs", fr.Errors, len(fr.FDEs))
	}
	in := Interpreter{Track: []uint64{6, 16}}
	rows, err := in.Rows(&fr.FDEs[0])
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		start  uint64
		cfa    CFARule
		fp, ra Rule
		args   uint64
	}
	reg := func(r uint64, off int64) CFARule { return CFARule{Kind: CFARegOffset, Reg: r, Offset: off} }
	ra8 := Rule{Kind: RuleOffset, Offset: -8}
	wants := []want{
		{0x401000, reg(7, 8), Rule{}, ra8, 0},
		{0x401001, reg(7, 16), Rule{Kind: RuleOffset, Offset: -16}, ra8, 0},
		{0x401003, reg(6, 16), Rule{Kind: RuleOffset, Offset: -16}, ra8, 32},
		{0x401004, reg(7, 8), Rule{Kind: RuleSameValue}, Rule{Kind: RuleRegister, Reg: 3}, 32},
		{0x401005, reg(6, 16), Rule{Kind: RuleOffset, Offset: -16}, Rule{Kind: RuleOffset, Offset: 8}, 32},
		{0x401006, reg(6, 16), Rule{Kind: RuleValOffset, Offset: -8}, Rule{Kind: RuleValOffset, Offset: 16}, 32},
		{0x401007, reg(6, 16), Rule{Kind: RuleExpression, Expr: []byte{0x9c}}, Rule{Kind: RuleValExpression, Expr: []byte{0x9c}}, 32},
		{0x401008, reg(6, 16), Rule{}, ra8, 32},
		{0x401009, reg(6, 16), Rule{Kind: RuleOffset, Offset: 16}, ra8, 32},
		{0x40100a, CFARule{Kind: CFAExpression, Reg: 6, Offset: 16, Expr: []byte{0x77, 8}}, Rule{Kind: RuleOffset, Offset: 16}, ra8, 32},
		{0x40100b, CFARule{Kind: CFAExpression, Reg: 6, Offset: 24, Expr: []byte{0x77, 8}}, Rule{Kind: RuleOffset, Offset: 16}, ra8, 32},
		{0x40100c, reg(7, 24), Rule{Kind: RuleOffset, Offset: 16}, ra8, 32},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	eq := func(a, b Rule) bool {
		return a.Kind == b.Kind && a.Reg == b.Reg && a.Offset == b.Offset && bytes.Equal(a.Expr, b.Expr)
	}
	for i, w := range wants {
		r := rows[i]
		if r.Start != w.start || r.CFA.Kind != w.cfa.Kind || r.CFA.Reg != w.cfa.Reg || r.CFA.Offset != w.cfa.Offset ||
			!bytes.Equal(r.CFA.Expr, w.cfa.Expr) || !eq(r.Regs[0], w.fp) || !eq(r.Regs[1], w.ra) || r.ArgsSize != w.args {
			t.Errorf("row %d: %+v\nwant %+v", i, r, w)
		}
	}
}

// TestNegateRAState toggles the aarch64 return address signing state,
// which remember_state saves.
func TestNegateRAState(t *testing.T) {
	ops := []byte{0x41, 0x2d, 0x41, 0x0a, 0x2d, 0x41, 0x0b}
	cie := cieZR(0x04)
	data := append(cie, fde0(len(cie), uint64(0x1000), uint64(0x10), uint8(0), ops)...)
	fr := parseEH(t, data)
	in := Interpreter{AArch64: true}
	rows, err := in.Rows(&fr.FDEs[0])
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, r := range rows {
		got = append(got, r.RAMangled)
	}
	if !slices.Equal(got, []bool{false, true, false, true}) {
		t.Errorf("mangled states %v", got)
	}
	if _, err := (&Interpreter{}).Rows(&fr.FDEs[0]); !errors.Is(err, ErrUnsupported) {
		t.Errorf("0x2d outside aarch64: %v, want DW_CFA_GNU_window_save unsupported", err)
	}
}

// TestMalformed feeds broken entries and wants errors naming the field
// and the offset.
func TestMalformed(t *testing.T) {
	good := cieZR(0x04)
	fdeOps := func(ops ...byte) []byte {
		return append(slices.Clone(good), fde0(len(good), uint64(0x1000), uint64(0x100), uint8(0), ops)...)
	}
	deep := make([]byte, MaxStateDepth+1)
	for i := range deep {
		deep[i] = 0x0a
	}
	bigCIE := record(uint32(0), uint8(1), "zR", uint8(1), uint8(0x78), uint8(16), uint8(1), uint8(4), make([]byte, MaxCIEInstructions+1))
	bigCIE = append(bigCIE, fde0(len(bigCIE), uint64(0x1000), uint64(0x100), uint8(0))...)
	for _, c := range []struct {
		name  string
		data  []byte
		field string
		off   uint64
		rows  bool // the error comes from interpreting, not parsing
	}{
		{"truncated length", []byte{1, 0}, "entry.length", 0, false},
		{"length past the end", le(uint32(100), uint32(0)), "entry.length", 0, false},
		{"CIE version", record(uint32(0), uint8(2), "", uint8(1), uint8(0x78), uint8(16)), "cie.version", 8, false},
		{"augmentation letter", record(uint32(0), uint8(1), "zX", uint8(1), uint8(0x78), uint8(16), uint8(0)), "cie.augmentation", 10, false},
		{"augmentation without z", record(uint32(0), uint8(1), "eh", uint8(1), uint8(0x78), uint8(16)), "cie.augmentation", 9, false},
		{"unterminated augmentation", le(uint32(6), uint32(0), uint8(1), uint8('z')), "cie.augmentation", 9, false},
		{"bad FDE encoding", record(uint32(0), uint8(1), "zR", uint8(1), uint8(0x78), uint8(16), uint8(1), uint8(0x0f)), "cie.fde_encoding", 16, false},
		{"ULEB too long", record(uint32(0), uint8(1), "", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "cie.code_alignment_factor", 10, false},
		{"CIE pointer before the section", append(slices.Clone(good), record(uint32(0x1000), uint64(0))...), "fde.cie_pointer", 0x1a, false},
		{"range wraps", append(slices.Clone(good), fde0(len(good), uint64(1<<63), uint64(1<<63), uint8(0))...), "fde.pc_range", 0x1e, false},
		{"truncated operand", fdeOps(0x0c, 7), "DW_CFA_def_cfa.offset", 0x31, true},
		{"restore_state without remember", fdeOps(0x0b), "DW_CFA_restore_state", 0x2f, true},
		{"state stack too deep", fdeOps(deep...), "DW_CFA_remember_state", 0x2f + MaxStateDepth, true},
		{"unknown opcode", fdeOps(0x3f), "DW_CFA.opcode", 0x2f, true},
		{"set_loc backwards", fdeOps(0x41, 0x01, 0, 0, 0, 0, 0, 0, 0, 0), "DW_CFA_set_loc.address", 0x30, true},
		{"CIE instructions too long", bigCIE, "cie.initial_instructions", 0x11, true},
		{"block past the end", fdeOps(0x0f, 9, 0x9c), "DW_CFA_def_cfa_expression.block", 0x31, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fr := parseEH(t, c.data)
			var err error
			if c.rows {
				if len(fr.FDEs) != 1 {
					t.Fatalf("%d FDEs, %v", len(fr.FDEs), fr.Errors)
				}
				_, err = (&Interpreter{Track: []uint64{6}}).Rows(&fr.FDEs[0])
			} else if len(fr.Errors) > 0 {
				err = fr.Errors[0]
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Field != c.field || fe.Off != c.off {
				t.Errorf("error %v, want field %s at %#x", err, c.field, c.off)
			}
		})
	}
}

// TestHdr uses the host libc's .eh_frame_hdr: it agrees with .eh_frame
// and finds the FDE of every function start.
func TestHdr(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	ef, fr := loadEHFrame(t, libc)
	defer ef.Close()
	s := ef.Section(".eh_frame_hdr")
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHdr(data, s.Addr, ef.ByteOrder, 8)
	if err != nil {
		t.Fatal(err)
	}
	eh := ef.Section(".eh_frame").Addr
	if err := h.Check(fr, eh); err != nil || h.Count != uint64(len(fr.FDEs)) {
		t.Fatalf("%v; %d entries for %d FDEs", err, h.Count, len(fr.FDEs))
	}
	for i := range fr.FDEs {
		f := &fr.FDEs[i]
		for _, pc := range []uint64{f.Start, f.End() - 1} {
			at, ok, err := h.Find(pc)
			if err != nil || !ok || at != eh+f.Offset {
				t.Fatalf("Find(%#x) = %#x %v %v, want the FDE at %#x", pc, at, ok, err, eh+f.Offset)
			}
		}
	}
	if _, ok, _ := h.Find(0); ok {
		t.Errorf("Find(0) found an FDE")
	}
	// A table that claims more entries than it holds.
	bad := slices.Clone(data)
	binary.LittleEndian.PutUint32(bad[8:], uint32(len(bad)))
	var fe *FormatError
	if _, err := ParseHdr(bad, s.Addr, ef.ByteOrder, 8); !errors.As(err, &fe) || fe.Field != "eh_frame_hdr.fde_count" {
		t.Errorf("oversized count: %v", err)
	}
	// An entry pointing to the wrong FDE.
	binary.LittleEndian.PutUint32(bad[8:], binary.LittleEndian.Uint32(data[8:]))
	copy(bad[16:20], bad[24:28])
	if err := mustHdr(t, bad, s).Check(fr, eh); !errors.As(err, &fe) {
		t.Errorf("swapped entry: %v", err)
	}
}

func mustHdr(t *testing.T, data []byte, s *elf.Section) *Hdr {
	t.Helper()
	h, err := ParseHdr(data, s.Addr, binary.LittleEndian, 8)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestResyncAfterBadLength damages the length field of each entry of a
// real .eh_frame in turn: every FDE outside the damaged entry must still
// be read, as the undamaged section gives it.
func TestResyncAfterBadLength(t *testing.T) {
	ef, err := elf.Open("../../testdata/sframe/chain-amd64-v1")
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(".eh_frame")
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	parse := func(data []byte) *Frame {
		fr, err := Parse(Section{Kind: EHFrame, Data: data, Order: binary.LittleEndian, AddrSize: 8, Bases: Bases{Section: s.Addr}})
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	whole := parse(data)
	if len(whole.FDEs) < 5 || len(whole.Errors) > 0 {
		t.Fatalf("undamaged: %d FDEs, errors %v", len(whole.FDEs), whole.Errors)
	}
	for _, f := range whole.FDEs {
		bad := slices.Clone(data)
		binary.LittleEndian.PutUint32(bad[f.Offset:], 0xfffffff0)
		fr := parse(bad)
		var want []uint64
		for _, g := range whole.FDEs {
			if g.Offset != f.Offset {
				want = append(want, g.Start)
			}
		}
		var got []uint64
		for _, g := range fr.FDEs {
			got = append(got, g.Start)
		}
		if !slices.Equal(got, want) || len(fr.Errors) != 1 {
			t.Errorf("length of the FDE at %#x damaged: FDEs at %#x, errors %v; want %#x and one error", f.Offset, got, fr.Errors, want)
		}
	}
}
