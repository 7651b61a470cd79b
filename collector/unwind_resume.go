package collector

import (
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// Resuming the sampler's frame-pointer walk.
//
// The frame-pointer walk ends where the chain of frame records does: at
// the first caller without frame pointers, whose %rbp holds data (a record
// fails a check, and the walk is marked truncated) or 0, which the walk
// takes for the outermost frame: glibc's start_thread leaves %rbp as
// clone3 set it, so every JVM thread's walk ended in start_thread, shown
// whole with clone3 missing. It is the walk kept where the stack copy's
// unwind stops short of it, as below JIT code, which no table describes
// (kernels without the walk over tables, the moments before sprof has
// described a process to the kernel, --unwind copy).
//
// On x86-64 a frame record lies right below its frame's CFA (push %rbp;
// mov %rsp,%rbp), so where the walk ended the registers of the frame are
// known from the last record: pc its return address, sp the record's
// address + 16, %rbp the one saved there. resume finds that record in the
// copy, following the chain from the sampled %rbp as the walk did, and
// unwinds on from there by the tables: the stack is whole where that
// reaches the outermost frame, and otherwise marked truncated, with the
// frames found. On arm64, whose records lie anywhere in their frame, or
// where the copy does not hold the chain, a walk that says it ended at the
// outermost frame, in code whose table says the frame has a caller, is
// marked truncated: it is not whole; so is one ending in a binary whose
// table is still being built (the first samples of a recording). A walk
// that ends in code keeping frame pointers (Go), in code of no file or in a
// binary without CFI is left as it is.

// resume continues bpf, the user stack kept from the sampler's
// frame-pointer walk of a sample with copy c (its bytes stack), or judges
// its end, and returns the stack and whether it is truncated, truncated
// being the walk's own flag.
func (u *unwinder) resume(pid uint32, set *mapSet, c *stackCopy, stack []byte, bpf []uint64, truncated bool) ([]uint64, bool) {
	if len(bpf) < 2 {
		return bpf, truncated
	}
	last := bpf[len(bpf)-1]
	m := set.find(last - 1)
	if m == nil {
		return bpf, truncated
	}
	in := u.info(m)
	u.classify(in, pid, m)
	if !in.readable || in.framePointers {
		return bpf, truncated
	}
	if !u.ensureTable(in, pid, m) && !truncated {
		// Asked for now; until it is built, the end cannot be told a
		// root.
		u.stats.Unrooted++
		return bpf, true
	}
	if in.table == nil {
		return bpf, truncated
	}
	if u.sf.Arch == sframe.ArchAMD64 {
		base := c.regs.SP
		snap := sframe.Snapshot{Base: base, Data: stack}
		if rec, fp, ok := lastRecord(&snap, c.regs.FP, bpf, c.leaf); ok {
			more, stop := u.unwindFrom(pid, set, sframe.Regs{PC: last, SP: rec + 16, FP: fp, Caller: true}, base, stack, true)
			if stop == unwind.Unmapped && len(more) > 1 {
				more = more[:len(more)-1] // data read where no return address was
			}
			u.stats.Resumed++
			return append(bpf[:len(bpf):len(bpf)], more[1:]...), stop.Truncated()
		}
	}
	if r, ok := in.table.Lookup(last - 1 - in.bias(m)); !truncated && (!ok || !r.Row.Outermost()) {
		u.stats.Unrooted++
		truncated = true
	}
	return bpf, truncated
}

// lastRecord follows the frame records from fp through snap as the
// sampler's walk did, each record's return address the walk's next frame
// (after frame 0, the pc, and with leaf frame 1, the leaf's return
// address), and returns the address of the record holding the walk's last
// frame and the fp saved there; false where the copy does not hold the
// chain or the chain is not the walk's (it switched stacks).
func lastRecord(snap *sframe.Snapshot, fp uint64, bpf []uint64, leaf bool) (rec, saved uint64, ok bool) {
	i := 1
	if leaf {
		i = 2
	}
	for ; i < len(bpf); i++ {
		ra, ok1 := snap.ReadUint64(fp + 8)
		next, ok2 := snap.ReadUint64(fp)
		if !ok1 || !ok2 || ra != bpf[i] {
			return 0, 0, false
		}
		if i == len(bpf)-1 {
			return fp, next, true
		}
		if next <= fp {
			return 0, 0, false
		}
		fp = next
	}
	return 0, 0, false
}
