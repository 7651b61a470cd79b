// Package locations interns the Mappings and Locations of a profile under
// construction, so that each distinct address becomes one stacks.Location
// and is symbolized once.
//
// The live collector and the recording reader find an address's mapping in
// different places (the process table, a recorded image map); from there on
// the work is the same, and it lives here: return addresses are looked up
// inside their call, kernel addresses share one [kernel.kallsyms] mapping
// whose bounds grow with the addresses seen, and addresses in no mapping go
// to one [unknown] mapping.
package locations

import (
	"slices"

	"github.com/sprof/sprof/stacks"
)

// KernelSymbolizer names kernel addresses; *symbolize.Kernel is one.
type KernelSymbolizer interface {
	// Symbolize appends the frames for the kernel instruction at addr to
	// dst, nothing when no symbol covers it.
	Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame
}

// Symbolizer appends to dst the frames of the instruction at address at of
// one mapping (at is already inside the call for return addresses).
type Symbolizer func(dst []stacks.Frame, at uint64) []stacks.Frame

// BatchSymbolizer symbolizes the addresses ats of one mapping together
// (each already inside the call for return addresses), calling fn with
// each one's frames, in any order; fn copies them.
type BatchSymbolizer func(ats []uint64, fn func(i int, frames []stacks.Frame))

// key identifies a Location. A return address is symbolized one byte
// earlier, inside its call, so it is a different Location from the same
// address as a leaf.
type key struct {
	m      *stacks.Mapping
	addr   uint64
	isCall bool
}

// Table interns the locations of one profile.
type Table struct {
	p               *stacks.Profile
	kernelSym       KernelSymbolizer
	kernel, unknown *stacks.Mapping
	perPid          map[perProcessKey]*stacks.Mapping
	locs            map[key]*stacks.Location
	ids             map[*stacks.Location]uint64
	frames          []stacks.Frame
	deferred        []*deferredMapping
	byMapping       map[*stacks.Mapping]*deferredMapping
}

// deferredMapping holds the Locations of one mapping that UserDeferred
// made and Symbolize has yet to name.
type deferredMapping struct {
	symbolize BatchSymbolizer
	locs      []*stacks.Location
	ats       []uint64
}

// New returns a Table adding its mappings to p. kernel may be nil, leaving
// kernel locations unnamed.
func New(p *stacks.Profile, kernel KernelSymbolizer) *Table {
	return &Table{p: p, kernelSym: kernel, locs: map[key]*stacks.Location{}, ids: map[*stacks.Location]uint64{},
		byMapping: map[*stacks.Mapping]*deferredMapping{}}
}

// AddMapping lists m in the profile and returns it.
func (t *Table) AddMapping(m *stacks.Mapping) *stacks.Mapping {
	t.p.Mappings = append(t.p.Mappings, m)
	return m
}

// ID is a dense number of a Location this Table made, for building keys.
func (t *Table) ID(l *stacks.Location) uint64 { return t.ids[l] }

// Kernel returns the Location of a kernel address; isCall says it is a
// return address.
func (t *Table) Kernel(addr uint64, isCall bool) *stacks.Location {
	if t.kernel == nil {
		t.kernel = t.AddMapping(&stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile, Start: addr, Limit: addr + 1})
	}
	t.kernel.Start, t.kernel.Limit = min(t.kernel.Start, addr), max(t.kernel.Limit, addr+1)
	return t.location(key{t.kernel, addr, isCall}, func(dst []stacks.Frame, at uint64) []stacks.Frame {
		if t.kernelSym == nil {
			return dst
		}
		return t.kernelSym.Symbolize(dst, at)
	})
}

// Unknown returns the Location of an address found in no mapping.
func (t *Table) Unknown(addr uint64) *stacks.Location {
	if t.unknown == nil {
		t.unknown = t.AddMapping(&stacks.Mapping{Kind: stacks.Unknown, File: stacks.UnknownFile})
	}
	return t.location(key{t.unknown, addr, false}, nil)
}

// JIT returns the Location of addr in code that process pid generated at
// run time, named by name, or nil when name finds no function there (the
// caller then has an unknown address). isCall says addr is a return
// address. The process's JIT mapping grows to the addresses seen, as the
// kernel's does.
func (t *Table) JIT(pid uint32, addr uint64, isCall bool, name Symbolizer) *stacks.Location {
	return t.perProcess(stacks.JIT, pid, addr, isCall, name)
}

// Python returns the Location of a Python frame of process pid, at addr
// in its spliced stack (cpython.FrameTag set), named by name, or nil when
// name finds nothing. Each instruction is its own Location, in the
// process's Python mapping.
func (t *Table) Python(pid uint32, addr uint64, name Symbolizer) *stacks.Location {
	return t.perProcess(stacks.Python, pid, addr, false, name)
}

// perProcessKey names a mapping of one process's own code.
type perProcessKey struct {
	kind stacks.MappingKind
	pid  uint32
}

// perProcess is JIT and Python: a Location in the mapping of kind that
// belongs to process pid alone.
func (t *Table) perProcess(kind stacks.MappingKind, pid uint32, addr uint64, isCall bool, name Symbolizer) *stacks.Location {
	pk := perProcessKey{kind, pid}
	m := t.perPid[pk]
	if m != nil {
		if l := t.locs[key{m, addr, isCall}]; l != nil {
			return l
		}
	}
	t.frames = name(t.frames[:0], symbolAddr(addr, isCall))
	if len(t.frames) == 0 {
		return nil
	}
	if m == nil {
		if t.perPid == nil {
			t.perPid = map[perProcessKey]*stacks.Mapping{}
		}
		file := stacks.JITFile(pid)
		if kind == stacks.Python {
			file = stacks.PythonFile(pid)
		}
		m = t.AddMapping(&stacks.Mapping{Kind: kind, File: file, Start: addr, Limit: addr + 1})
		t.perPid[pk] = m
	}
	m.Start, m.Limit = min(m.Start, addr), max(m.Limit, addr+1)
	l := t.location(key{m, addr, isCall}, nil)
	l.Frames = slices.Clone(t.frames)
	return l
}

// User returns the Location of addr in m, a mapping listed with
// AddMapping, calling symbolize the first time the Location is needed.
func (t *Table) User(m *stacks.Mapping, addr uint64, isCall bool, symbolize Symbolizer) *stacks.Location {
	return t.location(key{m, addr, isCall}, symbolize)
}

// UserDeferred is User for a profile built whole before it is used: the
// Location's frames are filled in by Symbolize, which symbolizes each
// mapping's addresses in one batch. symbolize is the mapping's; the
// first one given for a mapping is used.
func (t *Table) UserDeferred(m *stacks.Mapping, addr uint64, isCall bool, symbolize BatchSymbolizer) *stacks.Location {
	k := key{m, addr, isCall}
	if l := t.locs[k]; l != nil {
		return l
	}
	l := t.location(k, nil)
	d := t.byMapping[m]
	if d == nil {
		d = &deferredMapping{symbolize: symbolize}
		t.byMapping[m] = d
		t.deferred = append(t.deferred, d)
	}
	d.locs = append(d.locs, l)
	d.ats = append(d.ats, symbolAddr(addr, isCall))
	return l
}

// Symbolize fills in the frames of the Locations UserDeferred made since
// the last call, one batch per mapping.
func (t *Table) Symbolize() {
	for _, d := range t.deferred {
		d.symbolize(d.ats, func(i int, frames []stacks.Frame) {
			if len(frames) > 0 {
				d.locs[i].Frames = slices.Clone(frames)
			}
		})
	}
	t.deferred = nil
	clear(t.byMapping)
}

func (t *Table) location(k key, symbolize Symbolizer) *stacks.Location {
	if l := t.locs[k]; l != nil {
		return l
	}
	l := &stacks.Location{Mapping: k.m, Address: k.addr}
	if symbolize != nil {
		t.frames = symbolize(t.frames[:0], symbolAddr(k.addr, k.isCall))
		if len(t.frames) > 0 {
			l.Frames = slices.Clone(t.frames)
		}
	}
	t.locs[k] = l
	t.ids[l] = uint64(len(t.ids))
	return l
}

// symbolAddr is where to look up addr: a return address points after its
// call, which may be the first byte of the next function.
func symbolAddr(addr uint64, isCall bool) uint64 {
	if isCall && addr > 0 {
		return addr - 1
	}
	return addr
}
