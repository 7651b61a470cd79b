package sframe

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestRefVectors parses the reference's hand-checked sections: the same
// two functions and seven rows in V1, V2, V2 with PCREL and V3.
func TestRefVectors(t *testing.T) {
	want := []struct {
		start uint64
		size  uint32
		rows  []string
	}{
		{0x401000, 8, []string{"+0 cfa=sp+8 ra=*(cfa-8) fp=same", "+1 cfa=sp+16 ra=*(cfa-8) fp=*(cfa-16)", "+4 cfa=fp+16 ra=*(cfa-8) fp=*(cfa-16)", "+7 cfa=sp+8 ra=*(cfa-8) fp=*(cfa-16)"}},
		{0x401008, 9, []string{"+0 cfa=sp+8 ra=*(cfa-8) fp=same", "+4 cfa=sp+32 ra=*(cfa-8) fp=same", "+8 cfa=sp+8 ra=*(cfa-8) fp=same"}},
	}
	for _, v := range refVectors {
		tab, err := Parse(mustHex(v.hex), v.addr)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if len(tab.Errors) != 0 || len(tab.FDEs()) != len(want) {
			t.Fatalf("%s: %d FDEs, errors %v", v.name, len(tab.FDEs()), tab.Errors)
		}
		for i, w := range want {
			f := &tab.FDEs()[i]
			if f.Start != w.start || f.Size != w.size {
				t.Errorf("%s: FDE %d is %#x+%d, want %#x+%d", v.name, i, f.Start, f.Size, w.start, w.size)
			}
			var got []string
			for _, r := range tab.Rows(f) {
				got = append(got, tab.formatRow(&r))
			}
			if strings.Join(got, "; ") != strings.Join(w.rows, "; ") {
				t.Errorf("%s: FDE %d rows\n %q\nwant\n %q", v.name, i, got, w.rows)
			}
		}
	}
}

// TestLookupFixtures looks up every row's first and last PC in every
// fixture and wants that row back, and wants nothing between functions.
func TestLookupFixtures(t *testing.T) {
	for _, bin := range fixtures(t) {
		tab, err := Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tab.FDEs() {
			f := &tab.FDEs()[i]
			rows := tab.Rows(f)
			for j := range rows {
				if f.PCMask() {
					continue // covered by TestLookupPLT
				}
				last := f.End() - 1
				if j+1 < len(rows) {
					last = f.Start + uint64(rows[j+1].Start) - 1
				}
				for _, pc := range []uint64{f.Start + uint64(rows[j].Start), last} {
					if pc >= f.End() {
						continue // a row at func_size (binutils PR 33131) never matches
					}
					r, ok := tab.Lookup(pc)
					if !ok || r.Row != rows[j] || r.FDE.Start != f.Start {
						t.Errorf("%s: Lookup(%#x) = %v, %v; want FDE %#x row %d", bin, pc, r, ok, f.Start, j)
					}
				}
			}
		}
		fdes := tab.FDEs()
		if _, ok := tab.Lookup(fdes[0].Start - 1); ok {
			t.Errorf("%s: a rule below the first function", bin)
		}
		if _, ok := tab.Lookup(fdes[len(fdes)-1].End()); ok {
			t.Errorf("%s: a rule past the last function", bin)
		}
	}
}

// TestLookupPLT checks the PCMASK rule of ld's PLT FDE (pltN: 16-byte
// entries, rows +0 sp+8 and +0xb sp+16) in V1 (implicit 16-byte blocks),
// V2 and V3.
func TestLookupPLT(t *testing.T) {
	for _, v := range []string{"v1", "v2", "v3"} {
		tab, err := Open("../testdata/sframe/chain-amd64-" + v)
		if err != nil {
			t.Fatal(err)
		}
		var plt *FDE
		for i := range tab.FDEs() {
			if f := &tab.FDEs()[i]; f.PCMask() && f.Size > 16 {
				plt = f
				break
			}
		}
		if plt == nil {
			t.Fatalf("%s: no PCMASK FDE", v)
		}
		for _, c := range []struct {
			off  uint64
			want int32
		}{{0x10, 8}, {0x15, 8}, {0x1a, 8}, {0x1b, 16}, {0x1f, 16}, {0x20, 8}, {0x2c, 16}} {
			r, ok := tab.Lookup(plt.Start + c.off)
			if !ok || r.Row.CFA.Off != c.want || r.Row.CFA.Reg != amd64RegSP {
				t.Errorf("%s: PLT+%#x: got %v %v, want sp+%d", v, c.off, tab.formatRow(&r.Row), ok, c.want)
			}
		}
	}
}

// TestLookupOutermostAndPAC checks the aarch64 vector: _start is the
// outermost frame in V3 (RA undefined), f1's rows are PAC-signed.
func TestLookupOutermostAndPAC(t *testing.T) {
	for _, name := range []string{"asm-arm64-v3", "asm-arm64be-v3"} {
		tab, err := Open("../testdata/sframe/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := tab.Lookup(0x4000b4)
		if !ok || !r.Row.Outermost() {
			t.Errorf("%s: _start rule %v %v, want outermost", name, tab.formatRow(&r.Row), ok)
		}
		r, ok = tab.Lookup(0x4000c8)
		if got := tab.formatRow(&r.Row); !ok || got != "+8 cfa=sp+16 ra=*(cfa-8) fp=*(cfa-16) signed" {
			t.Errorf("%s: f1+8 rule %q", name, got)
		}
		if tab.BigEndian != strings.Contains(name, "be") {
			t.Errorf("%s: BigEndian = %v", name, tab.BigEndian)
		}
	}
}

// TestFlexRules checks the V3 FLEX vector (DRAP realignment).
func TestFlexRules(t *testing.T) {
	tab, err := Open("../testdata/sframe/flex-amd64-v3")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"+0 cfa=sp+8 ra=*(cfa-8) fp=same",
		"+5 cfa=r10+0 ra=*(cfa-8) fp=same",
		"+14 cfa=r10+0 ra=*(cfa-8) fp=*(fp+0)",
		"+17 cfa=*(fp-8) ra=*(cfa-8) fp=*(fp+0)",
	}
	f := &tab.FDEs()[0]
	if f.Type() != FDETypeFlex {
		t.Fatalf("FDE type %d, want FLEX", f.Type())
	}
	for i, r := range tab.Rows(f) {
		if got := tab.formatRow(&r); got != want[i] {
			t.Errorf("row %d: %q, want %q", i, got, want[i])
		}
	}
}

// section builds a little-endian amd64 V2 section from FDEs given as
// (start relative to the section, size, info, rep_size, raw rows).
type testFDE struct {
	start   int32
	size    uint32
	info    uint8
	rep     uint8
	rows    []byte
	numRows uint32
}

func section(flags uint8, fdes ...testFDE) []byte {
	var fres []byte
	var nfres uint32
	b := []byte{0xe2, 0xde, 2, flags, 3, 0, 0xf8, 0}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fdes)))
	for _, f := range fdes {
		nfres += f.numRows
	}
	var fdeBytes []byte
	for _, f := range fdes {
		fdeBytes = binary.LittleEndian.AppendUint32(fdeBytes, uint32(f.start))
		fdeBytes = binary.LittleEndian.AppendUint32(fdeBytes, f.size)
		fdeBytes = binary.LittleEndian.AppendUint32(fdeBytes, uint32(len(fres)))
		fdeBytes = binary.LittleEndian.AppendUint32(fdeBytes, f.numRows)
		fdeBytes = append(fdeBytes, f.info, f.rep, 0, 0)
		fres = append(fres, f.rows...)
	}
	b = binary.LittleEndian.AppendUint32(b, nfres)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fres)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fdeBytes)))
	return append(append(b, fdeBytes...), fres...)
}

// Two good functions: f at 0x1000 (CFA sp+8, then sp+16 with FP saved)
// and g at 0x1010.
var (
	goodF = testFDE{start: 0x1000, size: 16, rows: []byte{0, 0x03, 8, 4, 0x05, 16, 0xf0}, numRows: 2}
	goodG = testFDE{start: 0x1010, size: 8, rows: []byte{0, 0x03, 8}, numRows: 1}
)

func put32(b []byte, off int, v uint32) []byte {
	binary.LittleEndian.PutUint32(b[off:], v)
	return b
}

// TestMalformedSections checks that each kind of damage gives its error,
// naming the right field at the right byte offset, either for the section
// (Parse fails) or for one FDE (the FDE is left out, the others kept).
//
// The good section is a 28-byte header, FDE 0 at 28 and FDE 1 at 48 (20
// bytes each), and the FRE sub-section at 68: FDE 0's two rows at 68 and
// 71, FDE 1's row at 75; 78 bytes in all.
func TestMalformedSections(t *testing.T) {
	good := section(1, goodF, goodG)
	mod := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	cases := []struct {
		name        string
		data        []byte
		sectionErr  bool   // Parse fails, rather than one FDE being left out
		field       string // of the section error, or of the first FDE error
		off         int64
		unsupported bool
		fdesLeft    int // for FDE errors
	}{
		{"truncated header", good[:20], true, "header", 0, false, 0},
		{"bad magic", mod(func(b []byte) []byte { b[0] = 0; return b }), true, "header.magic", 0, false, 0},
		{"version 4", mod(func(b []byte) []byte { b[2] = 4; return b }), true, "header.version", 2, true, 0},
		{"undefined flag", mod(func(b []byte) []byte { b[3] = 0x9; return b }), true, "header.flags", 3, false, 0},
		{"s390x", mod(func(b []byte) []byte { b[4] = 4; return b }), true, "header.abi_arch", 4, true, 0},
		{"aarch64 BE in LE section", mod(func(b []byte) []byte { b[4] = 1; return b }), true, "header.abi_arch", 4, false, 0},
		{"aux header", mod(func(b []byte) []byte { b[7] = 4; return b }), true, "header.auxhdr_len", 7, true, 0},
		{"huge num_fdes", mod(func(b []byte) []byte { return put32(b, 8, 0xffffffff) }), true, "header.num_fdes", 8, false, 0},
		{"huge fdeoff", mod(func(b []byte) []byte { return put32(b, 20, 0xfffffff0) }), true, "header.fdeoff", 20, false, 0},
		{"fdeoff pushes FDEs past the end", mod(func(b []byte) []byte { return put32(b, 20, 20) }), true, "header.fdeoff", 20, false, 0},
		{"huge num_fres", mod(func(b []byte) []byte { return put32(b, 12, 0x7fffffff) }), true, "header.num_fres", 12, false, 0},
		{"fre_len past the end", mod(func(b []byte) []byte { return put32(b, 16, 1000) }), true, "header.fre_len", 16, false, 0},
		{"huge fre_len", mod(func(b []byte) []byte { return put32(b, 16, 0xffffffff) }), true, "header.fre_len", 16, false, 0},
		{"FREs overlap FDEs", mod(func(b []byte) []byte { return put32(b, 24, 10) }), true, "header.freoff", 24, false, 0},
		{"freoff past the end", mod(func(b []byte) []byte { return put32(b, 24, 0xfffffff0) }), true, "header.freoff", 24, false, 0},
		{"concatenated", append(append([]byte(nil), good...), good...), true, "section", 78, false, 0},
		{"unsorted but flagged sorted", section(1, goodG, goodF), true, "fde[1].func_start", 48, false, 0},
		{"rows offset out of range", mod(func(b []byte) []byte { return put32(b, 48+8, 500) }), false, "fde[1].fres_off", 56, false, 1},
		{"FRE past the end", mod(func(b []byte) []byte { b[len(b)-2] = 0x05; return b }), false, "fde[1].fre[0]", 75, false, 1},
		{"too many rows for the section", mod(func(b []byte) []byte { return put32(b, 28+12, 40) }), false, "fde[0].num_fres", 40, false, 1},
		{"huge row count", mod(func(b []byte) []byte { return put32(b, 48+12, 0xffffffff) }), false, "fde[1].num_fres", 60, false, 1},
		{"rows not increasing", section(1, testFDE{start: 0x1000, size: 16, rows: []byte{4, 0x03, 8, 4, 0x03, 16}, numRows: 2}, goodG), false, "fde[0].fre[1].start_addr", 71, false, 1},
		{"row past the function", section(1, testFDE{start: 0x1000, size: 16, rows: []byte{0, 0x03, 8, 17, 0x03, 16}, numRows: 2}, goodG), false, "fde[0].fre[1].start_addr", 71, false, 1},
		{"word size code 3", section(1, goodF, testFDE{start: 0x1010, size: 8, rows: []byte{0, 0x63, 8}, numRows: 1}), false, "fde[1].fre[0].info", 76, false, 1},
		{"three words on amd64", section(1, goodF, testFDE{start: 0x1010, size: 8, rows: []byte{0, 0x07, 8, 0xf0, 0xe8}, numRows: 1}), false, "fde[1].fre[0].info", 76, false, 1},
		{"empty function", section(1, goodF, testFDE{start: 0x1010, rows: []byte{0, 0x03, 8}, numRows: 1}), false, "fde[1].func_size", 52, false, 1},
		{"function wraps around", section(1, goodF, testFDE{start: -16, size: 32, rows: []byte{0, 0x03, 8}, numRows: 1}), false, "fde[1].func_start", 48, false, 1},
		{"PCMASK without rep_size", section(1, goodF, testFDE{start: 0x1010, size: 8, info: 0x10, rows: []byte{0, 0x03, 8}, numRows: 1}), false, "fde[1].rep_size", 65, false, 1},
		{"FRE type 3", section(1, goodF, testFDE{start: 0x1010, size: 8, info: 3, rows: []byte{0, 0x03, 8}, numRows: 1}), false, "fde[1].info", 64, false, 1},
		{"overlapping functions", section(1, goodF, testFDE{start: 0x1008, size: 16, rows: []byte{0, 0x03, 8}, numRows: 1}), false, "fde[0].func_start", 28, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab, err := Parse(c.data, 0)
			var fe *FormatError
			defer func() {
				if fe == nil {
					return // failed already
				}
				if msg := fe.Error(); !strings.Contains(msg, c.field) || !strings.Contains(msg, fmt.Sprintf("offset %#x", c.off)) {
					t.Errorf("message %q names neither the field nor the offset", msg)
				}
			}()
			if c.sectionErr {
				if !errors.As(err, &fe) || fe.Field != c.field || fe.Off != c.off || errors.Is(err, ErrUnsupported) != c.unsupported {
					t.Fatalf("err = %v, want a FormatError on %s at %#x (unsupported: %v)", err, c.field, c.off, c.unsupported)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(tab.FDEs()) != c.fdesLeft || len(tab.Errors) == 0 || tab.Unsupported() != 0 {
				t.Fatalf("%d FDEs left, errors %v; want %d left", len(tab.FDEs()), tab.Errors, c.fdesLeft)
			}
			if !errors.As(tab.Errors[0], &fe) || fe.Field != c.field || fe.Off != c.off {
				t.Fatalf("FDE error %v, want one on %s at %#x", tab.Errors[0], c.field, c.off)
			}
		})
	}
}

// TestUnsortedIsSorted checks the policy for sections without
// SFRAME_F_FDE_SORTED: they are sorted, not rejected.
func TestUnsortedIsSorted(t *testing.T) {
	tab, err := Parse(section(0, goodG, goodF), 0)
	if err != nil {
		t.Fatal(err)
	}
	fdes := tab.FDEs()
	if len(fdes) != 2 || fdes[0].Start != 0x1000 || fdes[1].Start != 0x1010 {
		t.Fatalf("FDEs %+v", fdes)
	}
	r, ok := tab.Lookup(0x1005)
	if !ok || r.Row.CFA.Off != 16 {
		t.Fatalf("Lookup: %v %v", r, ok)
	}
}

// TestUnsupportedFDEType gives one FDE of the V3 vector an FDE type that
// binutils 2.47 does not define: that FDE is left out and counted.
func TestUnsupportedFDEType(t *testing.T) {
	data := mustHex(refVectors[3].hex)
	data[28+2*16+3] = 2 // FDE 0's attribute record, info2
	tab, err := Parse(data, refVectors[3].addr)
	if err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if len(tab.FDEs()) != 1 || tab.Unsupported() != 1 || !errors.As(tab.Errors[0], &fe) || fe.Field != "fde[0].info2" || fe.Off != 28+2*16+3 {
		t.Fatalf("%d FDEs, %d unsupported, errors %v", len(tab.FDEs()), tab.Unsupported(), tab.Errors)
	}
	// The dumps say it too.
	var text, js bytes.Buffer
	if err := tab.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := tab.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Unsupported int      `json:"unsupported"`
		Errors      []string `json:"errors"`
	}
	if err := json.Unmarshal(js.Bytes(), &v); err != nil || v.Unsupported != 1 || len(v.Errors) != 1 {
		t.Errorf("JSON: %+v, %v; want unsupported 1 and its error", v, err)
	}
	if !strings.Contains(text.String(), "1 FDE left out, 1 of them unsupported") {
		t.Errorf("text dump does not count the unsupported FDE:\n%s", text.String())
	}
}

// TestV3AttributePastEnd points an FDE of the V3 vector at an attribute
// record past the FRE sub-section: that FDE is left out, its fres_off
// named.
func TestV3AttributePastEnd(t *testing.T) {
	data := mustHex(refVectors[3].hex)
	put32(data, 28+16+12, 0x100) // FDE 1's fres_off
	tab, err := Parse(data, refVectors[3].addr)
	if err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if len(tab.FDEs()) != 1 || len(tab.Errors) != 1 || !errors.As(tab.Errors[0], &fe) || fe.Field != "fde[1].fres_off" || fe.Off != 28+16+12 {
		t.Fatalf("%d FDEs, errors %v; want FDE 1 left out for its fres_off at %#x", len(tab.FDEs()), tab.Errors, 28+16+12)
	}
}

// TestV3OutermostFDE gives the first function of the V3 vector no rows:
// in V3 a DEFAULT FDE without rows marks the outermost frame.
func TestV3OutermostFDE(t *testing.T) {
	data := mustHex(refVectors[3].hex)
	data[28+2*16] = 0 // FDE 0's attribute record, num_fres
	tab, err := Parse(data, refVectors[3].addr)
	if err != nil || len(tab.Errors) != 0 {
		t.Fatal(err, tab.Errors)
	}
	r, ok := tab.Lookup(0x401004)
	if !ok || !r.Row.Outermost() {
		t.Fatalf("Lookup = %v, %v; want the outermost rule", tab.Describe(r), ok)
	}
	u := Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: tab}}
	out := make([]uint64, 4)
	if n, stop := u.Unwind(Regs{PC: 0x401004, SP: 0x7000}, &Snapshot{}, out); n != 1 || stop != StopOutermost {
		t.Fatalf("Unwind: %d frames, %v", n, stop)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{(FlagFDESorted | FlagFDEFuncStartPCRel).String(), "SFRAME_F_FDE_SORTED|SFRAME_F_FDE_FUNC_START_PCREL"},
		{Flags(0).String(), "NONE"},
		{Flags(0x9).String(), "SFRAME_F_FDE_SORTED|0x8"},
		{Version3.String(), "SFRAME_VERSION_3"},
		{Version(9).String(), "SFrame version 9"},
		{ABIAArch64BE.String(), "SFRAME_ABI_AARCH64_ENDIAN_BIG"},
		{ArchARM64.String(), "arm64"},
		{LocReg.String(), "reg"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestParseMemoryBounded checks that what Parse allocates grows with the
// section's size, not with the counts it claims: hostile headers that
// claim 2^32 FDEs or rows are refused before any allocation sized by them,
// and a section packed with the most rows and distinct rules its bytes
// allow costs a small multiple of its size.
func TestParseMemoryBounded(t *testing.T) {
	good := section(1, goodF, goodG)
	// One function with 10,000 rows of 9 bytes (4-byte start, info, a
	// 4-byte CFA offset), each with a rule of its own.
	var rows []byte
	for i := range 10000 {
		rows = binary.LittleEndian.AppendUint32(rows, uint32(i))
		rows = append(rows, 0x43) // SP-based, one 4-byte word
		rows = binary.LittleEndian.AppendUint32(rows, uint32(8+8*i))
	}
	dense := section(1, testFDE{start: 0x1000, size: 10000, info: 2, rows: rows, numRows: 10000})
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"2^32-1 FDEs", put32(append([]byte(nil), good...), 8, 0xffffffff)},
		{"2^32-1 rows", put32(append([]byte(nil), good...), 12, 0xffffffff)},
		{"2^32-1 rows in an FDE", put32(append([]byte(nil), good...), 28+12, 0xffffffff)},
		{"10,000 distinct rules", dense},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tab, _ := Parse(c.data, 0)
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(tab)
		got, limit := after.TotalAlloc-before.TotalAlloc, 64*uint64(len(c.data))+16<<10
		t.Logf("%s: %d bytes allocated for a %d-byte section", c.name, got, len(c.data))
		if got > limit {
			t.Errorf("%s: Parse of %d bytes allocated %d bytes, more than %d", c.name, len(c.data), got, limit)
		}
	}
}
