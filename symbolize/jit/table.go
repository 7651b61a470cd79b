package jit

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"

	"github.com/sprof/sprof/stacks"
)

// Limits on what one process's files can make sprof keep. A runtime that
// passes them keeps the symbols it had; later ones are dropped and counted
// (Table.Dropped).
const (
	// MaxSymbols bounds the symbols of one process: a large JVM compiles
	// tens of thousands of methods.
	MaxSymbols = 1 << 20
	// MaxNameBytes bounds the bytes of names one process keeps.
	MaxNameBytes = 256 << 20
	// MaxName is the longest name kept; longer ones are cut.
	MaxName = 4096
	// MaxLines bounds the line entries of one symbol.
	MaxLines = 1 << 16
)

// Symbol is one piece of generated code: [Start, Start+Size) holds the
// function Name.
type Symbol struct {
	Start, Size uint64
	Name        string
	// Lines maps code to source, in ascending order of Offset, from a
	// jitdump's debug-info record; nil when the runtime wrote none.
	Lines []Line
}

// Line says that the code from Start+Offset on comes from File:Line.
type Line struct {
	Offset uint64
	File   string
	Line   int
}

// End is the first address after the symbol's code.
func (s *Symbol) End() uint64 { return s.Start + s.Size }

// LineAt returns the source line of address addr inside s, nil when s has
// no line covering it.
func (s *Symbol) LineAt(addr uint64) *Line {
	off := addr - s.Start
	i, _ := slices.BinarySearchFunc(s.Lines, off, func(l Line, o uint64) int {
		if l.Offset <= o {
			return -1
		}
		return 1
	})
	if i == 0 {
		return nil
	}
	return &s.Lines[i-1]
}

// segment is a part of the address space owned by one symbol: the symbol
// added last among those covering it. Its index in Table.syms is also its
// age, so newer symbols win.
type segment struct {
	start, end uint64
	sym        int32
}

// Table holds the symbols of one process and finds the one covering an
// address. Code is reused: a runtime frees a function and compiles
// another into the same bytes, or moves code when it compacts its heap. A
// Table therefore answers with the symbol added last among those that
// cover an address, as perf does. A Table is not safe for concurrent use.
type Table struct {
	syms      []Symbol
	segs      []segment // sorted, not overlapping
	pending   int       // syms[pending:] are not in segs yet
	nameBytes int
	dropped   int
}

// Add adds s. Symbols of no size and symbols past the Table's limits are
// dropped; an overlong name is cut to MaxName bytes.
func (t *Table) Add(s Symbol) {
	if s.Size == 0 || s.Start+s.Size < s.Start || len(t.syms) >= MaxSymbols || t.nameBytes+len(s.Name) > MaxNameBytes {
		t.dropped++
		return
	}
	if len(s.Name) > MaxName {
		s.Name = strings.ToValidUTF8(s.Name[:MaxName], "")
	}
	if len(s.Lines) > MaxLines {
		s.Lines = s.Lines[:MaxLines]
	}
	t.nameBytes += len(s.Name)
	t.syms = append(t.syms, s)
}

// Len is the number of symbols added and kept.
func (t *Table) Len() int { return len(t.syms) }

// Dropped counts the symbols Add dropped.
func (t *Table) Dropped() int { return t.dropped }

// Lookup returns the symbol covering addr, nil when none does. The
// pointer is valid until the next Add.
func (t *Table) Lookup(addr uint64) *Symbol {
	if i := t.Find(addr); i >= 0 {
		return &t.syms[i]
	}
	return nil
}

// Find is Lookup that returns the symbol's index, which stays the same
// while the Table lives, or -1.
func (t *Table) Find(addr uint64) int {
	t.settle()
	i, found := slices.BinarySearchFunc(t.segs, addr, func(s segment, a uint64) int {
		if s.end <= a {
			return -1
		}
		if s.start > a {
			return 1
		}
		return 0
	})
	if !found {
		return -1
	}
	return int(t.segs[i].sym)
}

// Symbol returns the symbol of index i, as Find returned it.
func (t *Table) Symbol(i int) *Symbol { return &t.syms[i] }

// At returns the symbol that starts exactly at addr and covers it now,
// nil when there is none; a jitdump code-move record names its code so.
func (t *Table) At(addr uint64) *Symbol {
	if s := t.Lookup(addr); s != nil && s.Start == addr {
		return s
	}
	return nil
}

// settle merges the symbols added since the last lookup into the
// segments. Only the old segments that new code overlaps are repainted
// with it; the rest are merged around them, so a drain's new functions
// cost O(n) in the segments of the process, not O(n log n) (BenchmarkSettle).
func (t *Table) settle() {
	if t.pending == len(t.syms) {
		return
	}
	fresh := make([]segment, 0, len(t.syms)-t.pending)
	for i := t.pending; i < len(t.syms); i++ {
		fresh = append(fresh, segment{t.syms[i].Start, t.syms[i].End(), int32(i)})
	}
	t.pending = len(t.syms)
	var hit []int // the old segments fresh ones overlap
	for _, f := range fresh {
		i, _ := slices.BinarySearchFunc(t.segs, f.start, func(s segment, a uint64) int {
			if s.end <= a {
				return -1
			}
			return 1
		})
		for ; i < len(t.segs) && t.segs[i].start < f.end; i++ {
			hit = append(hit, i)
		}
	}
	slices.Sort(hit)
	hit = slices.Compact(hit)
	kept := make([]segment, 0, len(t.segs)-len(hit))
	for i, s := range t.segs {
		if len(hit) > 0 && hit[0] == i {
			fresh, hit = append(fresh, s), hit[1:]
			continue
		}
		kept = append(kept, s)
	}
	painted := paint(fresh)
	merged := make([]segment, 0, len(kept)+len(painted))
	i, j := 0, 0
	for i < len(kept) || j < len(painted) {
		if j == len(painted) || i < len(kept) && kept[i].start < painted[j].start {
			merged = append(merged, kept[i])
			i++
		} else {
			merged = append(merged, painted[j])
			j++
		}
	}
	t.segs = merged
}

// paint returns the segments that the newest of segs (highest sym) owns
// at every address, sorted and not overlapping: a sweep over the segment
// boundaries with a heap of the segments open at each.
func paint(segs []segment) []segment {
	bounds := make([]uint64, 0, 2*len(segs))
	for _, s := range segs {
		bounds = append(bounds, s.start, s.end)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.start, b.start) })
	var open newestFirst
	var out []segment
	next := 0
	for k := 0; k+1 < len(bounds); k++ {
		lo, hi := bounds[k], bounds[k+1]
		for next < len(segs) && segs[next].start <= lo {
			heap.Push(&open, segs[next])
			next++
		}
		for len(open) > 0 && open[0].end <= lo {
			heap.Pop(&open)
		}
		if len(open) == 0 {
			continue
		}
		sym := open[0].sym
		if n := len(out); n > 0 && out[n-1].sym == sym && out[n-1].end == lo {
			out[n-1].end = hi
		} else {
			out = append(out, segment{lo, hi, sym})
		}
	}
	return out
}

// newestFirst is a heap of segments, the newest symbol on top.
type newestFirst []segment

func (h newestFirst) Len() int           { return len(h) }
func (h newestFirst) Less(i, j int) bool { return h[i].sym > h[j].sym }
func (h newestFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *newestFirst) Push(x any)        { *h = append(*h, x.(segment)) }
func (h *newestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Frames appends to dst the frames of the symbol covering addr, nothing
// when none does: a locations.Symbolizer of generated code.
func (t *Table) Frames(dst []stacks.Frame, addr uint64) []stacks.Frame {
	if s := t.Lookup(addr); s != nil {
		return s.Frames(dst, addr)
	}
	return dst
}

// Frames appends the frames of addr in s to dst: one frame, its function
// s's name, with the source line when s has one for addr.
func (s *Symbol) Frames(dst []stacks.Frame, addr uint64) []stacks.Frame {
	f := stacks.Frame{Function: s.Name}
	if l := s.LineAt(addr); l != nil {
		f.File, f.Line = l.File, l.Line
	}
	return append(dst, f)
}
