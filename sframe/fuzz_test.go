package sframe

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"io"
	"testing"
)

// sectionOf returns the raw .sframe section of a fixture and its address.
func sectionOf(t testing.TB, bin string) ([]byte, uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, addr, err := sframeBytes(f)
	if err != nil {
		t.Fatal(err)
	}
	return data, addr
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzParse feeds arbitrary sections to Parse and, when they parse, to
// Lookup and the dumps: none may panic, and a parsed table must keep the
// invariants the unwinder relies on.
func FuzzParse(f *testing.F) {
	for _, bin := range fixtures(f) {
		data, addr := sectionOf(f, bin)
		f.Add(data, addr)
	}
	for _, v := range refVectors {
		f.Add(mustHex(v.hex), v.addr)
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		tab, err := Parse(data, addr)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v is a %T, not a *FormatError", err, err)
			}
			return
		}
		checkInvariants(t, tab)
		for _, fde := range tab.FDEs() {
			for _, pc := range []uint64{fde.Start, fde.Start + uint64(fde.Size)/2, fde.End() - 1, fde.End()} {
				tab.Lookup(pc)
			}
		}
		if err := tab.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
		if err := tab.WriteJSON(io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}

// checkInvariants checks what Parse promises about a table: FDEs sorted and
// disjoint, rows inside the table and increasing, within the function.
func checkInvariants(t *testing.T, tab *Table) {
	t.Helper()
	fdes := tab.FDEs()
	for i := range fdes {
		f := &fdes[i]
		if f.Size == 0 || f.End() < f.Start {
			t.Fatalf("FDE %d: bad range %#x+%#x", i, f.Start, f.Size)
		}
		if i > 0 && f.Start < fdes[i-1].End() {
			t.Fatalf("FDE %d at %#x overlaps FDE %d ending at %#x", i, f.Start, i-1, fdes[i-1].End())
		}
		if f.PCMask() && f.RepSize == 0 {
			t.Fatalf("FDE %d: PCMASK with rep_size 0", i)
		}
		rows := tab.Rows(f)
		for j := range rows {
			if rows[j].Start > f.Size || j > 0 && rows[j].Start <= rows[j-1].Start {
				t.Fatalf("FDE %d row %d: start %#x", i, j, rows[j].Start)
			}
		}
	}
	if uint64(tab.NumRows()) > uint64(tab.Header.NumFREs) {
		t.Fatalf("%d rows, header says %d", tab.NumRows(), tab.Header.NumFREs)
	}
}

// FuzzUnwind unwinds arbitrary stack memory and registers with the tables
// of the fixtures: the unwind must end, report a reason, and write no more
// than the output slice holds. A PC outside the fixture's binary is folded
// into it and an SP outside the stack into the stack, so that most inputs
// get past the first lookup instead of stopping at "no mapping".
func FuzzUnwind(f *testing.F) {
	dumps := stackDumps(f)
	type fixture struct {
		u *Unwinder
		d *stackDump
	}
	var fx []fixture
	for i, bin := range dumps {
		u, d := loadFixture(f, bin)
		fx = append(fx, fixture{u, d})
		f.Add(uint8(i), d.stack.Data, d.regs.PC, d.regs.SP, d.regs.FP, d.regs.LR)
		// The same stack with the registers of a deeper frame.
		f.Add(uint8(i), d.stack.Data, d.frames[2], d.regs.SP+64, d.regs.FP, uint64(0))
	}
	f.Fuzz(func(t *testing.T, which uint8, stack []byte, pc, sp, fp, lr uint64) {
		x := fx[int(which)%len(fx)]
		bin := x.u.Resolver.(*oneBinary)
		if pc < bin.start || pc >= bin.end {
			pc = bin.start + pc%(bin.end-bin.start)
		}
		mem := &Snapshot{Base: x.d.stack.Base, Data: stack}
		if top := mem.Base + uint64(len(stack)); sp < mem.Base || sp > top {
			sp = mem.Base + sp%(top-mem.Base+1)
		}
		out := make([]uint64, 32)
		n, stop := x.u.Unwind(Regs{PC: pc, SP: sp, FP: fp, LR: lr}, mem, out)
		if n < 1 || n > len(out) || stop < StopOutermost || stop > StopFull {
			t.Fatalf("Unwind returned %d frames, reason %v", n, stop)
		}
		if out[0] != pc {
			t.Fatalf("first frame %#x, want the PC %#x", out[0], pc)
		}
	})
}

// FuzzRead feeds arbitrary files to Read, the boundary where debug/elf,
// which is not hardened, meets hostile binaries.
func FuzzRead(f *testing.F) {
	for _, bin := range fixtures(f) {
		if data := readFile(f, bin); len(data) < 16<<10 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := Read(bytes.NewReader(data))
		if err == nil {
			tab.WriteText(io.Discard)
		}
	})
}
