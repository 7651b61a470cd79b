package collector

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// FuzzUnwindCopy unwinds arbitrary stack copies and registers — a hostile
// or racing process writes its stack as it likes — over two binaries'
// tables: the unwinder must not panic, must stay within its frame limit,
// and the walk kept must be the userspace one or the BPF walk given.
func FuzzUnwindCopy(f *testing.F) {
	u, set, c := benchStack(f, 8)
	f.Add(c.regs.PC, c.regs.SP, c.regs.FP, u.stack[:c.n], []byte{})
	f.Add(c.regs.PC, c.regs.SP+8, uint64(0), u.stack[:c.n/2], []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint64(0), uint64(0), uint64(0), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, pc, sp, fp uint64, stack, walk []byte) {
		bpf := make([]uint64, len(walk)/8)
		for i := range bpf {
			bpf[i] = binary.LittleEndian.Uint64(walk[8*i:])
		}
		u.stack = append(u.stack[:0], stack...)
		cp := stackCopy{regs: sframe.Regs{PC: pc, SP: sp, FP: fp}, n: len(stack)}
		us, stop := u.unwind(1, set, &cp)
		if len(us) > maxUnwindFrames || stop == 0 {
			t.Fatalf("%d frames, stop %v", len(us), stop)
		}
		us = append([]uint64(nil), us...)
		got, userspace, _ := u.account(set, us, stop, bpf)
		want := bpf
		if userspace {
			want = us
			if stop == unwind.Unmapped && len(us) > 1 {
				want = us[:len(us)-1] // no frame of an address in no mapping
			}
		}
		if len(got) != len(want) || len(got) > 0 && &got[0] != &want[0] {
			t.Fatalf("kept a walk of %d frames that is neither of the two", len(got))
		}
		if userspace {
			return
		}
		// The BPF walk kept, resumed where its chain of records ends
		// in the copy, its frame 1 a leaf's return address or not.
		cp.leaf = pc&1 != 0
		all, _ := u.resume(1, set, &cp, stack, slices.Clone(bpf), false)
		if len(all) < len(bpf) || len(all) > len(bpf)+maxUnwindFrames || !slices.Equal(all[:len(bpf)], bpf) {
			t.Fatalf("resumed %x into %x", bpf, all)
		}
	})
}
