package collector

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// quirkStart is where stopFixture maps a library whose functions each
// stop an unwind in their own way; notableStart a library without a table.
const (
	quirkStart   = 0x7f00_0000_0000
	notableStart = 0x7f10_0000_0000
)

// Functions of the quirk library, one rule each, at quirkFunc(i).
const (
	quirkMisaligned = iota // CFA at SP+12
	quirkNoProgress        // CFA at SP, outside the topmost frame
	quirkSignal            // a signal trampoline
	quirkFarCFA            // RA above the end of the stack copy
	quirkGap               // no FDE covers it
)

func quirkFunc(i int) uint64 { return 0x1000 + uint64(i)*0x100 }

// stopFixture adds to benchStack's program the quirk library and one
// without any table, mapped in set.
func stopFixture(t *testing.T, depth int) (*unwinder, *mapSet, stackCopy) {
	t.Helper()
	u, set, cp := benchStack(t, depth)
	sp7 := func(off int32) sframe.Loc { return sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: off} }
	ra := sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}
	same := sframe.Loc{Kind: sframe.LocSame}
	funcs := []sframe.Function{
		{Start: quirkFunc(quirkMisaligned), Size: 0x100, Rows: []sframe.Row{{CFA: sp7(12), RA: ra, FP: same}}},
		{Start: quirkFunc(quirkNoProgress), Size: 0x100, Rows: []sframe.Row{{CFA: sp7(0), RA: ra, FP: same}}},
		{Start: quirkFunc(quirkSignal), Size: 0x100, Signal: true, Rows: []sframe.Row{{CFA: sp7(8), RA: ra, FP: same}}},
		{Start: quirkFunc(quirkFarCFA), Size: 0x100, Rows: []sframe.Row{{CFA: sp7(4096), RA: ra, FP: same}}},
	}
	table, err := sframe.NewTable(sframe.ABIAMD64LE, funcs)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []struct {
		name  string
		start uint64
		table *sframe.Table
	}{{"/lib/quirk.so", quirkStart, table}, {"/lib/notable.so", notableStart, nil}} {
		set.insert(mapping{start: lib.start, limit: lib.start + 0x10000, offset: 0x1000, bin: &binaryFile{name: lib.name, buildID: lib.name}})
		m := set.find(lib.start)
		in := u.info(m)
		in.classified, in.readable, in.built = true, true, true
		in.table, in.kind = lib.table, unwind.MethodEHFrame
		in.loads = elfx.Segments{{Off: 0x1000, Vaddr: 0x1000, Filesz: 0xf000, Exec: true}}
	}
	return u, set, cp
}

// TestStopMarksTruncated: an unwind that reaches the outermost frame
// leaves a whole stack; every other stop leaves a stack marked truncated,
// and a return address in no mapping is no frame of it. (A register
// unknown outside the topmost frame is aarch64's link register, which an
// amd64 table cannot name; a table still being built is TestHoldFlush's.)
func TestStopMarksTruncated(t *testing.T) {
	// The program's first function's frame: 16 bytes, its return address
	// at SP+8, which each case points somewhere.
	// A call's return address in function fn of the library at start,
	// which maps file offset 0x1000 (address 0x1000) there.
	into := func(start uint64, fn int) uint64 { return start - 0x1000 + quirkFunc(fn) + 17 }
	for _, tc := range []struct {
		name   string
		depth  int
		ra     uint64 // 0: benchStack's own chain
		stop   unwind.Stop
		frames int
	}{
		{"outermost", 4, 0, unwind.Outermost, 4},
		{"return address in no mapping", 4, 0x80_0000_0001, unwind.Unmapped, 1},
		{"misaligned CFA", 4, into(quirkStart, quirkMisaligned), unwind.BadCFA, 2},
		{"CFA does not increase", 4, into(quirkStart, quirkNoProgress), unwind.CFANotIncreasing, 2},
		{"signal frame", 4, into(quirkStart, quirkSignal), unwind.SignalFrame, 2},
		{"read outside the copy", 4, into(quirkStart, quirkFarCFA), unwind.ReadFault, 2},
		{"no rule for PC", 4, into(quirkStart, quirkGap), unwind.NoRule, 2},
		{"no table", 4, into(notableStart, 0), unwind.NoTable, 2},
		{"depth limit", maxUnwindFrames + 10, 0, unwind.DepthLimit, maxUnwindFrames},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, set, cp := stopFixture(t, tc.depth)
			stack := slices.Clone(u.stack[:cp.n])
			if tc.ra != 0 {
				binary.LittleEndian.PutUint64(stack[8:], tc.ra)
			}
			c, err := New(Options{Frequency: 99, ProcRoot: t.TempDir(), NoSideband: true, StackCopy: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.unw = u
			c.table.newImage(1, set)
			src := &loopSource{samples: []Sample{{Time: 1, Pid: 1, Tid: 1, PC: cp.regs.PC, SP: cp.regs.SP, User: []uint64{cp.regs.PC}, StackCopy: stack}}}
			if err := c.Drain(src); err != nil {
				t.Fatal(err)
			}
			stops := map[string]uint64{}
			for _, b := range c.UnwindStats().Binaries {
				for r, n := range b.Stops {
					stops[r] += n
				}
			}
			if stops[tc.stop.String()] != 1 {
				t.Errorf("stops %v, want one %q", stops, tc.stop)
			}
			p := c.Profile()
			if len(p.Samples) != 1 {
				t.Fatalf("%d samples, want 1", len(p.Samples))
			}
			s := p.Samples[0]
			if s.Truncated != tc.stop.Truncated() || s.Truncated == (tc.stop == unwind.Outermost) {
				t.Errorf("truncated %v after a stop at %q", s.Truncated, tc.stop)
			}
			if len(s.Stack) != tc.frames {
				t.Errorf("%d frames, want %d", len(s.Stack), tc.frames)
			}
			for _, l := range s.Stack {
				if l.Address == tc.ra && tc.stop == unwind.Unmapped {
					t.Errorf("the address %#x in no mapping is a frame", tc.ra)
				}
			}
		})
	}
}
