package collector

import (
	"debug/elf"
	"debug/gosym"

	"github.com/sprof/sprof/internal/elfx"
)

// Go's runtime.morestack, which a function's prologue calls when its
// goroutine's stack is too small, runs newstack on the thread's g0 stack
// with the frame pointer cleared ("as caller may execute on another M").
// A frame-pointer walk of a sample taken while a stack grows therefore
// ends at morestack's frame as if it were the outermost one, without the
// goroutine's frames that called it: Go's own traceback jumps to the
// goroutine there, through g.m.curg.sched, which the walk cannot read. So
// a stack whose outermost frame is in runtime.morestack is marked
// truncated rather than shown as whole. (runtime.systemstack keeps the
// chain linked, and the walk follows it to the goroutine.)

// stackEnd returns how many frames of a user stack of pid, sampled under
// set, to keep, and whether what is kept is partial: cut where the walk
// left the process's code (codeEnd), or ending in runtime.morestack.
func (c *Collector) stackEnd(pid uint32, set *mapSet, user []uint64) (int, bool) {
	n := codeEnd(set, user)
	if n < len(user) || n == 0 {
		return n, n < len(user)
	}
	addr := user[n-1]
	if n > 1 {
		addr-- // a return address: the call before it
	}
	m := set.find(addr)
	if m == nil || m.bin.name[0] == '[' {
		return n, false
	}
	r := c.table.files.morestackOf(pid, m)
	off := addr - m.start + m.offset
	return n, r.start <= off && off < r.limit
}

// maxPclntab bounds the Go function table morestackOf reads: a very
// large Go binary's is tens of MiB.
const maxPclntab = 256 << 20

// morestackOf returns where runtime.morestack lies in the binary pid maps
// at m, in file offsets, read the first time from the Go function table
// (.gopclntab, which stripping leaves); empty for a binary that is not
// Go's, whose stacks are then not marked.
func (fs *files) morestackOf(pid uint32, m *mapping) codeRange {
	f := m.bin
	if f.morestackKnown {
		return f.morestack
	}
	f.morestackKnown = true
	h := f.pinned
	if h == nil {
		if h = fs.open(pid, m); h == nil {
			return codeRange{}
		}
		defer h.Close()
	}
	elfx.Read(h, f.name, func(ef *elf.File) error {
		pcln := ef.Section(".gopclntab")
		if pcln == nil {
			pcln = ef.Section(".data.rel.ro.gopclntab")
		}
		text := ef.Section(".text")
		if pcln == nil || text == nil || pcln.Size > maxPclntab {
			return nil
		}
		data, err := pcln.Data()
		if err != nil {
			return err
		}
		tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
		if err != nil {
			return err
		}
		fn := tab.LookupFunc("runtime.morestack")
		if fn == nil {
			return nil
		}
		loads := elfx.LoadSegments(ef)
		lo, ok1 := loads.FileOffset(fn.Entry)
		hi, ok2 := loads.FileOffset(fn.End - 1)
		if ok1 && ok2 {
			f.morestack = codeRange{lo, hi + 1}
		}
		return nil
	})
	return f.morestack
}
