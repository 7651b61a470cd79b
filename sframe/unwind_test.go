package sframe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stackDump is a stack dump written by a fixture from its innermost
// function (scripts/sframe/chain.c): its registers, the return addresses
// the compiler knows, and a copy of its stack.
type stackDump struct {
	arch   Arch
	ehdr   uint64 // runtime address of the ELF header
	regs   Regs
	frames []uint64
	stack  Snapshot
}

func readStackDump(t testing.TB, path string) *stackDump {
	t.Helper()
	d := &stackDump{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return v
	}
	var stackLen uint64
	var hexBytes strings.Builder
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "sframe-stack-dump":
		case f[0] == "arch" && f[1] == "amd64":
			d.arch = ArchAMD64
		case f[0] == "arch" && f[1] == "arm64":
			d.arch = ArchARM64
		case f[0] == "ehdr":
			d.ehdr = num(f[1])
		case f[0] == "pc":
			d.regs.PC = num(f[1])
		case f[0] == "sp":
			d.regs.SP = num(f[1])
		case f[0] == "fp":
			d.regs.FP = num(f[1])
		case f[0] == "lr":
			d.regs.LR = num(f[1])
		case f[0] == "frames":
			for _, s := range f[1:] {
				d.frames = append(d.frames, num(s))
			}
		case f[0] == "stack":
			d.stack.Base, stackLen = num(f[1]), num(f[2])
		default:
			hexBytes.WriteString(f[0])
		}
	}
	data, err := hex.DecodeString(hexBytes.String())
	if err != nil || uint64(len(data)) != stackLen || d.arch == 0 || len(d.frames) < 5 {
		t.Fatalf("%s: malformed dump (err %v, %d of %d stack bytes, %d frames)", path, err, len(data), stackLen, len(d.frames))
	}
	d.stack.Data = data
	return d
}

// oneBinary resolves the PCs of one loaded binary.
type oneBinary struct {
	start, end uint64
	m          Mapping
}

func (b *oneBinary) Resolve(pc uint64) (Mapping, bool) {
	if pc < b.start || pc >= b.end {
		return Mapping{}, false
	}
	return b.m, true
}

// loadFixture opens a fixture binary and its stack dump, and returns an
// unwinder that knows the binary at the address it had when it was run.
func loadFixture(t testing.TB, bin string) (*Unwinder, *stackDump) {
	t.Helper()
	tab, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	return loadFixtureWith(t, bin, tab)
}

// loadFixtureWith is loadFixture with the binary's rules taken from tab.
func loadFixtureWith(t testing.TB, bin string, tab *Table) (*Unwinder, *stackDump) {
	t.Helper()
	d := readStackDump(t, bin+".stack")
	return unwinderFor(t, bin, tab, d), d
}

// unwinderFor returns an unwinder that knows the binary bin, with the
// rules of tab, at the address it had when it wrote the dump d.
func unwinderFor(t testing.TB, bin string, tab *Table, d *stackDump) *Unwinder {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var lo, hi uint64 = ^uint64(0), 0
	bias := uint64(0)
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if p.Off == 0 {
			bias = d.ehdr - p.Vaddr
		}
		lo, hi = min(lo, p.Vaddr), max(hi, p.Vaddr+p.Memsz)
	}
	res := &oneBinary{start: lo + bias, end: hi + bias, m: Mapping{Table: tab, Bias: bias}}
	return &Unwinder{Arch: d.arch, Resolver: res}
}

// stackDumps returns the fixtures with a stack dump: v1, v2 and v3 on
// amd64 and arm64.
func stackDumps(t testing.TB) []string { return fixtureFiles(t, ".stack", 6) }

// TestUnwindStackDumps unwinds the stacks the fixtures captured and wants
// exactly the return addresses the compiler reported, ending at main's
// return into libc, which has no mapping here.
func TestUnwindStackDumps(t *testing.T) {
	for _, bin := range stackDumps(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			u, d := loadFixture(t, bin)
			out := make([]uint64, 64)
			n, stop := u.Unwind(d.regs, &d.stack, out)
			if !slices.Equal(out[:n], d.frames) || stop != StopNoMapping {
				t.Errorf("unwound %#x (%v),\nwant %#x (%v)", out[:n], stop, d.frames, StopNoMapping)
			}
		})
	}
}

// TestUnwindSynthesized unwinds the same stacks with the tables that
// package sframe/synth built from the fixtures' .eh_frame, encoded as V3
// sections at address 0 (NAME.synth, kept current by synth's tests).
func TestUnwindSynthesized(t *testing.T) {
	for _, bin := range stackDumps(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			tab, err := Parse(readFile(t, bin+".synth"), 0)
			if err != nil {
				t.Fatal(err)
			}
			u, d := loadFixtureWith(t, bin, tab)
			out := make([]uint64, 64)
			n, stop := u.Unwind(d.regs, &d.stack, out)
			if !slices.Equal(out[:n], d.frames) || stop != StopNoMapping {
				t.Errorf("unwound %#x (%v),\nwant %#x (%v)", out[:n], stop, d.frames, StopNoMapping)
			}
		})
	}
}

// TestUnwindAllocs checks that unwinding allocates nothing.
func TestUnwindAllocs(t *testing.T) {
	for _, bin := range stackDumps(t) {
		u, d := loadFixture(t, bin)
		out := make([]uint64, 64)
		allocs := testing.AllocsPerRun(100, func() { u.Unwind(d.regs, &d.stack, out) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per unwind, want 0", filepath.Base(bin), allocs)
		}
	}
}

// TestUnwindNeedsPACStripping shows the aarch64 dumps hold PAC-signed
// return addresses: without stripping, the unwind goes wrong.
func TestUnwindNeedsPACStripping(t *testing.T) {
	for _, bin := range stackDumps(t) {
		u, d := loadFixture(t, bin)
		if d.arch != ArchARM64 {
			continue
		}
		u.PACMask = 1 // strips nothing that matters
		out := make([]uint64, 64)
		n, _ := u.Unwind(d.regs, &d.stack, out)
		if slices.Equal(out[:n], d.frames) {
			t.Errorf("%s: unwound correctly without stripping PACs; the dump has no signed return addresses", filepath.Base(bin))
		}
	}
}

// mapAll resolves every PC to one mapping.
type mapAll Mapping

func (m mapAll) Resolve(uint64) (Mapping, bool) { return Mapping(m), true }

// stackOf builds a little-endian snapshot at base from (address, word) pairs.
func stackOf(base uint64, size int, words map[uint64]uint64) *Snapshot {
	s := &Snapshot{Base: base, Data: make([]byte, size)}
	for a, v := range words {
		binary.LittleEndian.PutUint64(s.Data[a-base:], v)
	}
	return s
}

func TestUnwindStops(t *testing.T) {
	open := func(name string) *Table {
		tab, err := Open("../testdata/sframe/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	// asm-arm64-vN: _start (0x4000b0) calls f1 (0x4000bc), which calls
	// leaf (0x4000d8); f1 saved FP at CFA-16 and its signed RA at CFA-8.
	const pac = 0x0012_0000_0000_0000
	armStack := func() *Snapshot {
		return stackOf(0x7000, 64, map[uint64]uint64{0x7000: 0, 0x7008: 0x4000b8 | pac})
	}
	armRegs := Regs{PC: 0x4000d8, SP: 0x7000, FP: 0x7000, LR: 0x4000cc}

	// One amd64 function at 0x1000 whose only row is CFA=sp+0, RA at
	// CFA-8: a CFA that never moves.
	loop, err := Parse(section(1, testFDE{start: 0x1000, size: 16, rows: []byte{0, 0x03, 0}, numRows: 1}), 0)
	if err != nil {
		t.Fatal(err)
	}
	loopStack := stackOf(0x7ff0, 64, map[uint64]uint64{0x7ff8: 0x1008})

	cases := []struct {
		name   string
		u      Unwinder
		regs   Regs
		mem    Memory
		outLen int
		want   []uint64
		stop   StopReason
	}{
		{"V3 outermost marker", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64-v3")}}, armRegs, armStack(), 8,
			[]uint64{0x4000d8, 0x4000cc, 0x4000b8}, StopOutermost},
		{"V3 big-endian outermost marker", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64be-v3")}}, armRegs,
			&Snapshot{Base: 0x7000, Data: binary.BigEndian.AppendUint64(make([]byte, 8), 0x4000b8|pac), BigEndian: true}, 8,
			[]uint64{0x4000d8, 0x4000cc, 0x4000b8}, StopOutermost},
		{"V1 RA in LR below the top", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64-v1")}}, armRegs, armStack(), 8,
			[]uint64{0x4000d8, 0x4000cc, 0x4000b8}, StopLinkRegister},
		{"output full", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64-v3")}}, armRegs, armStack(), 2,
			[]uint64{0x4000d8, 0x4000cc}, StopFull},
		{"read outside the snapshot", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64-v3")}}, armRegs,
			&Snapshot{Base: 0x7000, Data: make([]byte, 8)}, 8, []uint64{0x4000d8, 0x4000cc}, StopReadFault},
		{"PC in no function", Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: open("asm-arm64-v3")}}, Regs{PC: 0x500000, SP: 0x7000}, armStack(), 8,
			[]uint64{0x500000}, StopNoRule},
		{"CFA loop", Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: loop}}, Regs{PC: 0x1004, SP: 0x8000}, loopStack, 8,
			[]uint64{0x1004, 0x1008}, StopCFANotIncreasing},
		{"FLEX: CFA read through FP", Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: open("flex-amd64-v3")}}, Regs{PC: 0x401011, SP: 0x7f00, FP: 0x7f40},
			stackOf(0x7f00, 0x100, map[uint64]uint64{0x7f38: 0x7f80, 0x7f78: 0x500000, 0x7f40: 0x7fc0}), 8,
			[]uint64{0x401011, 0x500000}, StopNoRule},
		{"FLEX: CFA in r10, not captured", Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: open("flex-amd64-v3")}}, Regs{PC: 0x401005, SP: 0x7f00},
			stackOf(0x7f00, 0x100, nil), 8, []uint64{0x401005}, StopLinkRegister},
		{"no table, no frame pointers", Unwinder{Arch: ArchAMD64, Resolver: mapAll{}}, Regs{PC: 0x1004, SP: 0x8000, FP: 0x8010},
			stackOf(0x8000, 64, map[uint64]uint64{0x8010: 0x8020, 0x8018: 0x2000}), 8, []uint64{0x1004}, StopNoRule},
		{"no mapping", Unwinder{Arch: ArchAMD64, Resolver: &oneBinary{start: 0x1000, end: 0x2000, m: Mapping{Table: loop}}}, Regs{PC: 0x3000, SP: 0x8000},
			loopStack, 8, []uint64{0x3000}, StopNoMapping},
		{"frame pointers without a table", Unwinder{Arch: ArchAMD64, Resolver: mapAll{FramePointers: true}}, Regs{PC: 0x1004, SP: 0x8000, FP: 0x8010},
			stackOf(0x8000, 64, map[uint64]uint64{0x8010: 0x8020, 0x8018: 0x2000, 0x8020: 0x8010, 0x8028: 0x3000}), 8,
			[]uint64{0x1004, 0x2000, 0x3000}, StopBadCFA},
		{"frame pointers to the outermost", Unwinder{Arch: ArchAMD64, Resolver: mapAll{FramePointers: true}}, Regs{PC: 0x1004, SP: 0x8000, FP: 0x8010},
			stackOf(0x8000, 64, map[uint64]uint64{0x8010: 0x8020, 0x8018: 0x2000, 0x8020: 0, 0x8028: 0}), 8,
			[]uint64{0x1004, 0x2000}, StopOutermost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]uint64, c.outLen)
			n, stop := c.u.Unwind(c.regs, c.mem, out)
			if !slices.Equal(out[:n], c.want) || stop != c.stop {
				t.Errorf("got %#x (%v), want %#x (%v)", out[:n], stop, c.want, c.stop)
			}
		})
	}
}

func TestStopReasonString(t *testing.T) {
	for r := StopOutermost; r <= StopFull; r++ {
		if strings.HasPrefix(r.String(), "StopReason(") {
			t.Errorf("%d has no name", r)
		}
	}
	if got := StopReason(200).String(); got != "StopReason(200)" {
		t.Errorf("StopReason(200).String() = %q", got)
	}
}

// TestUnwindPoppedFP: in an epilogue after `pop %rbp`, GCC's CFI still
// says rbp is saved at CFA-48, now below SP, which a stack copy from SP
// does not hold. The unwind takes the register's value (popped already)
// instead of stopping.
func TestUnwindPoppedFP(t *testing.T) {
	at := func(off int32) Loc { return Loc{Kind: LocCFA, Deref: true, Off: off} }
	tab, err := NewTable(ABIAMD64LE, []Function{
		{Start: 0x1000, Size: 0x10, Rows: []Row{
			// After add $0x38,%rsp; pop %rbx; pop %rbp: four more pops to go.
			{Start: 0, CFA: Loc{Kind: LocReg, Reg: 7, Off: 40}, RA: at(-8), FP: at(-48)},
		}},
		{Start: 0x2000, Size: 0x10, Rows: []Row{
			{Start: 0, CFA: Loc{Kind: LocReg, Reg: 6, Off: 16}, RA: at(-8), FP: at(-16)},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const sp, fp = 0x7000, 0x7100
	stack := stackOf(sp, 0x200, map[uint64]uint64{
		sp + 32: 0x2005, // the return address, at CFA-8
		fp:      0,      // the caller's saved rbp: the outermost frame record
		fp + 8:  0x2007, // a return address the caller's rule reads through rbp
	})
	u := Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: tab}}
	out := make([]uint64, 4)
	n, stop := u.Unwind(Regs{PC: 0x1004, SP: sp, FP: fp}, stack, out)
	if n < 3 || out[1] != 0x2005 || out[2] != 0x2007 {
		t.Fatalf("Unwind: %#x, %v; want 0x1004 0x2005 0x2007: rbp popped already, the caller's CFA from it", out[:n], stop)
	}
}

// TestUnwindReturnAddressMinusOne: A ends with a call to a function that
// does not return, so its return address is the first byte of B. Below
// the topmost frame the unwinder must look up that address minus one (A's
// rule, CFA=sp+16); in the topmost frame the PC itself (B's, CFA=sp+8);
// from a caller's registers (Regs.Caller) the address minus one.
func TestUnwindReturnAddressMinusOne(t *testing.T) {
	tab, err := Parse(section(1,
		testFDE{start: 0x1000, size: 16, rows: []byte{0, 0x03, 16}, numRows: 1}, // A
		testFDE{start: 0x1010, size: 16, rows: []byte{0, 0x03, 8}, numRows: 1},  // B
		testFDE{start: 0x2000, size: 16, rows: []byte{0, 0x03, 8}, numRows: 1},  // C, calls A
	), 0)
	if err != nil {
		t.Fatal(err)
	}
	stack := stackOf(0x7000, 0x20, map[uint64]uint64{
		0x7000: 0x1010, // C's return address, into A (at B's first byte)
		0x7008: 0x4444, // what B's rule would take for A's return address
		0x7010: 0x3000, // A's return address, at A's CFA-8
	})
	u := Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: tab}}
	out := make([]uint64, 8)
	n, stop := u.Unwind(Regs{PC: 0x2004, SP: 0x7000}, stack, out)
	if want := []uint64{0x2004, 0x1010, 0x3000}; !slices.Equal(out[:n], want) || stop != StopNoRule {
		t.Errorf("from C: %#x (%v), want %#x (%v): the return address 0x1010 is A's, not B's", out[:n], stop, want, StopNoRule)
	}
	n, stop = u.Unwind(Regs{PC: 0x1010, SP: 0x7008}, stack, out)
	if want := []uint64{0x1010, 0x4444}; !slices.Equal(out[:n], want) || stop != StopNoRule {
		t.Errorf("from B's first byte: %#x (%v), want %#x (%v): the topmost PC is not adjusted", out[:n], stop, want, StopNoRule)
	}
	n, stop = u.Unwind(Regs{PC: 0x1010, SP: 0x7008, Caller: true}, stack, out)
	if want := []uint64{0x1010, 0x3000}; !slices.Equal(out[:n], want) || stop != StopNoRule {
		t.Errorf("from a caller at A's return address: %#x (%v), want %#x (%v): a caller's PC is the call's + 1", out[:n], stop, want, StopNoRule)
	}
}

// TestSignalFrame marks the first function of the V3 vector as a signal
// trampoline (FDE info bit 7): Lookup says so, the text dump shows
// readelf's attr "S", and the unwind stops there, since the registers
// are in a ucontext SFrame cannot describe.
func TestSignalFrame(t *testing.T) {
	data := mustHex(refVectors[3].hex)
	data[28+2*16+2] |= 0x80 // FDE 0's attribute record, info
	tab, err := Parse(data, refVectors[3].addr)
	if err != nil || len(tab.Errors) != 0 {
		t.Fatal(err, tab.Errors)
	}
	r, ok := tab.Lookup(0x401004)
	if !ok || !r.FDE.Signal() {
		t.Fatalf("Lookup = %v, %v; want a signal frame's rule", tab.Describe(r), ok)
	}
	if r, _ := tab.Lookup(0x401009); r.FDE.Signal() {
		t.Errorf("the second function is a signal frame too")
	}
	var text bytes.Buffer
	if err := tab.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), `pc = 0x401000, size = 8 bytes, attr = "S"`) {
		t.Errorf("dump has no signal attribute:\n%s", text.String())
	}
	u := Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: tab}}
	out := make([]uint64, 4)
	stack := stackOf(0x7000, 64, map[uint64]uint64{0x7008: 0x401009})
	if n, stop := u.Unwind(Regs{PC: 0x401004, SP: 0x7000, FP: 0x7000}, stack, out); n != 1 || stop != StopSignalFrame {
		t.Errorf("Unwind: %#x, %v; want only the PC and %v", out[:n], stop, StopSignalFrame)
	}
}

// TestPACKeyB sets f1's PAC key to B (FDE info bit 5) in the aarch64
// fixtures: Lookup reports the key, and the unwinder strips the signed
// return address just as with key A.
func TestPACKeyB(t *testing.T) {
	for _, name := range []string{"asm-arm64-v1", "asm-arm64-v2", "asm-arm64-v3", "asm-arm64be-v3"} {
		t.Run(name, func(t *testing.T) {
			data, addr := sectionOf(t, "../testdata/sframe/"+name)
			orig, err := Parse(data, addr)
			if err != nil {
				t.Fatal(err)
			}
			f1 := orig.FDEs()[1]
			if f1.Start != 0x4000bc || f1.PACKeyB() {
				t.Fatalf("FDE 1 at %#x, key B %v; want f1 at 0x4000bc with key A", f1.Start, f1.PACKeyB())
			}
			// The info byte: in the FDE (V1 at +16, V2 at +16) or in V3
			// in the attribute record, at +2.
			infoAt := uint64(f1.Offset) + 16
			if orig.Header.Version == Version3 {
				order := binary.ByteOrder(binary.LittleEndian)
				if orig.BigEndian {
					order = binary.BigEndian
				}
				freStart := uint64(headerSize) + uint64(orig.Header.FREOff)
				infoAt = freStart + uint64(order.Uint32(data[f1.Offset+12:])) + 2
			}
			data = append([]byte(nil), data...)
			data[infoAt] |= 0x20
			tab, err := Parse(data, addr)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := tab.Lookup(0x4000c8)
			if !ok || !r.FDE.PACKeyB() || !r.Row.Mangled() {
				t.Fatalf("Lookup(f1+8): %v, %v; want a key-B signed RA", tab.Describe(r), ok)
			}
			var js bytes.Buffer
			if err := tab.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(js.String(), `"pac_key": "B"`) {
				t.Errorf("JSON has no key B")
			}
			const pac = 0x0012_0000_0000_0000
			stack := stackOf(0x7000, 64, map[uint64]uint64{0x7000: 0, 0x7008: 0x4000b8 | pac})
			if tab.BigEndian {
				stack = &Snapshot{Base: 0x7000, Data: binary.BigEndian.AppendUint64(make([]byte, 8), 0x4000b8|pac), BigEndian: true}
			}
			u := Unwinder{Arch: ArchARM64, Resolver: mapAll{Table: tab}}
			out := make([]uint64, 8)
			n, _ := u.Unwind(Regs{PC: 0x4000d8, SP: 0x7000, FP: 0x7000, LR: 0x4000cc}, stack, out)
			if want := []uint64{0x4000d8, 0x4000cc, 0x4000b8}; n < 3 || !slices.Equal(out[:3], want) {
				t.Errorf("Unwind: %#x, want %#x first: the key-B PAC stripped", out[:n], want)
			}
		})
	}
}

// TestFramePointerFlag: a PC in no function of a table whose header says
// SFRAME_F_FRAME_POINTER is unwound with the frame-pointer rule, even when
// the caller does not say the mapping keeps frame pointers; without the
// flag the unwind stops there.
func TestFramePointerFlag(t *testing.T) {
	stack := stackOf(0x8000, 64, map[uint64]uint64{0x8010: 0x8020, 0x8018: 0x1004, 0x8020: 0, 0x8028: 0})
	regs := Regs{PC: 0x5000, SP: 0x8000, FP: 0x8010}
	for _, c := range []struct {
		flags uint8
		want  []uint64
		stop  StopReason
	}{
		// 0x1004-1 is in goodF's first row, CFA=sp+8, whose RA at
		// CFA-8 = 0x8020 holds 0: the outermost frame.
		{1 | uint8(FlagFramePointer), []uint64{0x5000, 0x1004}, StopOutermost},
		{1, []uint64{0x5000}, StopNoRule},
	} {
		tab, err := Parse(section(c.flags, goodF, goodG), 0)
		if err != nil {
			t.Fatal(err)
		}
		u := Unwinder{Arch: ArchAMD64, Resolver: mapAll{Table: tab}}
		out := make([]uint64, 8)
		n, stop := u.Unwind(regs, stack, out)
		if !slices.Equal(out[:n], c.want) || stop != c.stop {
			t.Errorf("flags %v: %#x (%v), want %#x (%v)", Flags(c.flags), out[:n], stop, c.want, c.stop)
		}
	}
}
