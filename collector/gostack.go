package collector

import (
	"debug/elf"
	"errors"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/unwind/goruntime"
)

// Go's runtime.morestack, which a function's prologue calls when its
// goroutine's stack is too small, runs newstack on the thread's g0 stack
// with the frame pointer cleared ("as caller may execute on another M").
// A frame-pointer walk of a sample taken while a stack grows therefore
// ends at morestack's frame as if it were the outermost one. The sampler
// goes on at the goroutine, as Go's own traceback does, in the processes
// it is told of (GoMarker): each process that maps a Go executable, told
// before sampling for those running then, when it maps the executable
// for those started later, and at the first sample rooted in it for any
// missed, with what unwind/goruntime reads from the executable. A stack that still ends there (a process not told
// yet, a Go binary goruntime cannot follow, a check in the sampler that
// failed) is marked truncated rather than shown as whole.
// (runtime.systemstack keeps the chain linked, and the walk follows it to
// the goroutine.)

// GoMarker is implemented by a Source whose sampler follows
// runtime.morestack to the goroutine in the processes it is told of
// (collector/bpfsource does, over bpf.Sampler.SetGo): rt is the
// executable's, which pid maps with morestack at [start, end); a nil rt
// unmarks pid.
type GoMarker interface {
	SetGo(pid uint32, start, end uint64, rt *goruntime.Runtime) error
}

// goStacks tracks the processes the sampler was told to follow
// morestack in.
type goStacks struct {
	attached bool
	marker   GoMarker
	marked   map[uint32]bool
}

// executable returns the mapping of set's lowest file, where a program's
// executable lies (PIE or not, below its libraries); nil if none.
func executable(set *mapSet) *mapping {
	for i := range set.maps {
		if m := &set.maps[i]; m.bin.name[0] != '[' {
			return m
		}
	}
	return nil
}

// readGo reads the executables of the processes running now, before
// sampling starts, for attachGo.
func (c *Collector) readGo() {
	for pid, img := range c.table.byPid {
		if m := executable(img.maps); m != nil {
			c.table.files.morestackOf(pid, m)
		}
	}
}

// attachGo tells the sampler behind src, once, of the Go processes
// running now.
func (c *Collector) attachGo(src Source) {
	g := &c.gos
	if g.attached {
		return
	}
	g.attached = true
	if g.marker, _ = src.(GoMarker); g.marker == nil {
		return
	}
	for pid, img := range c.table.byPid {
		if m := executable(img.maps); m != nil {
			c.markGo(pid, m)
		}
	}
}

// stackEnd returns how many frames of a user stack of pid, sampled under
// set, to keep, and whether what is kept is partial, given whether the
// walk said so (truncated): cut where the walk left the process's code
// (codeEnd), ending in runtime.morestack, or, in a Go executable, the
// sampled pc alone. Go code keeps frame pointers, so a walk that found
// none at all was sampled as a function was entered on a stack the runtime
// had just switched to with the frame pointer 0, and the sampler could not
// tell its caller from the return address on top of the stack (it can
// after a direct call or one through Go's ABI0 wrapper, as morestack calls
// newstack, not after mcall's indirect call): its callers are not known.
// That pc alone is the whole stack, whatever the walk said, in a function
// the program's stacks begin in (goruntime.Code's Roots: the start code, a
// goroutine's runtime.goexit, a thread's runtime.mstart and runtime.clone,
// which a new thread returns into with its parent's frame pointer, a
// record the walk refuses).
//
// A walk that went on through morestack without following the goroutine
// (goroutine false: the process was not marked yet, or the sampler's
// checks failed) is cut after morestack's frame: sampled in morestack (or
// morestack_noctxt, which jumps there), or on arm64 in runtime.save_g,
// which morestack calls with the frame pointer still that of the growing
// function's caller, the walk skipped that function and its caller on the
// way to the goroutine's root. (The
// same frames cannot come followed: after morestack's frame a followed
// walk has the growing function's pc, just after its call to morestack,
// a return address no frame record holds.)
func (c *Collector) stackEnd(pid uint32, set *mapSet, user []uint64, goroutine, truncated bool) (int, bool) {
	n := codeEnd(set, user)
	if n < len(user) || n == 0 {
		return n, truncated || n < len(user)
	}
	root := frameAddr(user, n-1)
	m := set.find(root)
	if m == nil || m.bin.name[0] == '[' {
		return n, truncated
	}
	r := c.table.files.morestackOf(pid, m)
	if r.limit == 0 {
		return n, truncated // no Go executable
	}
	inMorestack := func(addr uint64) bool {
		off := addr - m.start + m.offset
		return m.start <= addr && addr < m.limit && r.start <= off && off < r.limit
	}
	if !goroutine {
		for i := range n - 1 {
			if inMorestack(frameAddr(user, i)) {
				return i + 1, true
			}
		}
	}
	if n == 1 {
		off := root - m.start + m.offset
		for _, r := range m.bin.goRoots {
			if r.start <= off && off < r.limit {
				return n, false
			}
		}
		return n, true
	}
	return n, truncated || inMorestack(root)
}

// frameAddr is the code address of user stack frame i: the sampled pc,
// then the call before each return address.
func frameAddr(user []uint64, i int) uint64 {
	if i == 0 {
		return user[0]
	}
	return user[i] - 1
}

// considerGo tells the sampler to follow morestack in pid, if not told
// yet, when user, a stack it sampled under set, is rooted in a Go
// executable: a goroutine's in runtime.goexit, a thread's in
// runtime.mstart, every stack of a Go program but those of C threads.
func (c *Collector) considerGo(pid uint32, set *mapSet, user []uint64) {
	if c.gos.marker == nil || len(user) == 0 || c.gos.marked[pid] {
		return
	}
	if m := set.find(user[len(user)-1]); m != nil {
		c.markGo(pid, m)
	}
}

// markGo tells the sampler to follow morestack in pid, if not told yet,
// when m maps the code of a Go executable goruntime can follow; it
// reports whether pid is marked. Each binary is read once (morestackOf),
// then this costs a lookup.
func (c *Collector) markGo(pid uint32, m *mapping) bool {
	g := &c.gos
	if g.marker == nil || g.marked[pid] {
		return g.marked[pid]
	}
	if m.bin.name[0] == '[' {
		return false
	}
	r := c.table.files.morestackOf(pid, m)
	rt := m.bin.goRuntime
	if rt == nil || r.start < m.offset || r.limit-m.offset > m.limit-m.start {
		return false
	}
	if g.marked == nil {
		g.marked = map[uint32]bool{}
	}
	g.marked[pid] = true
	start := m.start + r.start - m.offset
	c.note(g.marker.SetGo(pid, start, start+r.limit-r.start, rt))
	return true
}

// forgetGo unmarks pid, which exited or exec'd.
func (c *Collector) forgetGo(pid uint32) {
	g := &c.gos
	if !g.marked[pid] || g.marker == nil {
		return
	}
	delete(g.marked, pid)
	c.note(g.marker.SetGo(pid, 0, 0, nil))
}

// morestackOf returns where runtime.morestack lies in the binary pid maps
// at m, in file offsets, read the first time with the functions its
// stacks begin in (m.bin.goRoots) and what else the sampler needs to
// follow morestack (m.bin.goRuntime, nil where goruntime cannot); empty
// for a binary that is not Go's, whose stacks are then not marked.
func (fs *files) morestackOf(pid uint32, m *mapping) codeRange {
	f := m.bin
	if f.goKnown {
		return f.morestack
	}
	f.goKnown = true
	h := f.pinned
	if h == nil {
		if h = fs.open(pid, m); h == nil {
			return codeRange{}
		}
		defer h.Close()
	}
	elfx.Read(h, f.name, func(ef *elf.File) error {
		code, err := goruntime.ReadCode(ef)
		if err != nil {
			return err
		}
		loads := elfx.LoadSegments(ef)
		// offsets is r in file offsets, if one segment holds it all.
		offsets := func(r goruntime.Range) (codeRange, bool) {
			lo, ok1 := loads.FileOffset(r.Start)
			hi, ok2 := loads.FileOffset(r.End - 1)
			return codeRange{lo, hi + 1}, ok1 && ok2 && hi+1-lo == r.End-r.Start
		}
		morestack, ok := offsets(code.Morestack)
		if !ok {
			return nil
		}
		f.morestack = morestack
		for _, r := range code.Roots {
			if root, ok := offsets(r); ok {
				f.goRoots = append(f.goRoots, root)
			}
		}
		rt, err := code.Runtime(ef, h)
		if err != nil && !errors.Is(err, goruntime.ErrUnsupported) {
			return err
		}
		f.goRuntime = rt
		return nil
	})
	return f.morestack
}
