package collector

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// TestResume: a JVM thread's stack as the sampler's frame-pointer walk
// sees it, JIT frames whose chain ends in start_thread with %rbp 0, shown
// whole, clone3 missing. On x86-64 the walk goes on by libc's table from
// the last record in the copy, with or without a leaf frame, to clone3,
// the outermost frame; where the copy's chain is not the walk's, or on
// arm64, the walk is marked truncated instead: start_thread has a caller.
// A walk that ends in clone3, or in code of no file, is left as it is.
func TestResume(t *testing.T) {
	const (
		libc   = uint64(0x5555_0000_0000)
		sp     = uint64(0x7ffc_0000_0000)
		r1, r2 = sp + 0x10, sp + 0x40 // the JIT frames' records
		jitPC  = uint64(0x7f00_0000_1000)
		jitRet = uint64(0x7f00_0000_2005)
	)
	undefined := sframe.Loc{Kind: sframe.LocUndefined}
	cfaSP := func(off int32) sframe.Loc { return sframe.Loc{Kind: sframe.LocReg, Reg: 7, Off: off} }
	ra := sframe.Loc{Kind: sframe.LocCFA, Deref: true, Off: -8}
	same := sframe.Loc{Kind: sframe.LocSame}
	table, err := sframe.NewTable(sframe.ABIAMD64LE, []sframe.Function{
		{Start: 0x1000, Size: 0x100, Rows: []sframe.Row{{Start: 0, CFA: cfaSP(16), RA: ra, FP: same}}},
		{Start: 0x2000, Size: 0x100, Rows: []sframe.Row{{Start: 0, CFA: cfaSP(8), RA: undefined, FP: same}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	u := newUnwinder(newFiles("/proc"), 0, false, true, nil)
	set := &mapSet{}
	set.insert(mapping{start: libc, limit: libc + 0x2000, offset: 0x1000, bin: &binaryFile{name: "/lib/libc.so.6", buildID: "cc"}})
	in := u.info(&set.maps[0])
	in.classified, in.readable, in.built = true, true, true
	in.table, in.kind = table, unwind.MethodEHFrame
	in.loads = elfx.Segments{{Off: 0x1000, Vaddr: 0x1000, Filesz: 0x2000, Exec: true}}
	bias := in.bias(&set.maps[0])
	intoS := bias + 0x1020 // into start_thread, whose CFA is sp + 16
	intoC := bias + 0x2010 // into clone3, the outermost frame

	stack := make([]byte, 0x80)
	put := func(addr, v uint64) { binary.LittleEndian.PutUint64(stack[addr-sp:], v) }
	put(sp, 0x1111) // what the leaf's frame holds
	put(r1, r2)
	put(r1+8, jitRet)
	put(r2, 0) // start_thread's %rbp, clone3's 0
	put(r2+8, intoS)
	put(r2+16+8, intoC) // start_thread's return address, at its CFA - 8
	c := stackCopy{regs: sframe.Regs{PC: jitPC, SP: sp, FP: r1}, n: len(stack)}

	walk := []uint64{jitPC, jitRet, intoS}
	whole := []uint64{jitPC, jitRet, intoS, intoC}
	leafWalk := []uint64{jitPC, 0x2222, jitRet, intoS}
	for _, tc := range []struct {
		name      string
		arch      sframe.Arch
		leaf      bool
		bpf, want []uint64
		truncated bool
	}{
		{"resumed", sframe.ArchAMD64, false, walk, whole, false},
		{"resumed after a leaf frame", sframe.ArchAMD64, true, leafWalk, append(slices.Clone(leafWalk), intoC), false},
		{"a chain not the walk's", sframe.ArchAMD64, false, []uint64{jitPC, jitRet + 1, intoS}, []uint64{jitPC, jitRet + 1, intoS}, true},
		{"arm64", sframe.ArchARM64, false, walk, walk, true},
		{"ending at the outermost frame", sframe.ArchARM64, false, whole, whole, false},
		{"ending in JIT code", sframe.ArchAMD64, false, walk[:2], walk[:2], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u.sf.Arch = tc.arch
			c.leaf = tc.leaf
			got, truncated := u.resume(1, set, &c, stack, slices.Clone(tc.bpf), false)
			if !slices.Equal(got, tc.want) || truncated != tc.truncated {
				t.Errorf("got %x truncated %v, want %x truncated %v", got, truncated, tc.want, tc.truncated)
			}
		})
	}
	if u.stats.Resumed != 2 || u.stats.Unrooted != 2 {
		t.Errorf("stats: %d resumed, %d unrooted; want 2, 2", u.stats.Resumed, u.stats.Unrooted)
	}
}
