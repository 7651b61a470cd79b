package gsym

import (
	"cmp"
	"fmt"
	"slices"
)

// InfoType tags an optional chunk of a FunctionInfo record.
type InfoType uint32

const (
	InfoEndOfList       InfoType = 0
	InfoLineTable       InfoType = 1
	InfoInline          InfoType = 2
	InfoMergedFunctions InfoType = 3
	InfoCallSites       InfoType = 4
)

func (t InfoType) String() string {
	switch t {
	case InfoEndOfList:
		return "EndOfList"
	case InfoLineTable:
		return "LineTableInfo"
	case InfoInline:
		return "InlineInfo"
	case InfoMergedFunctions:
		return "MergedFunctionsInfo"
	case InfoCallSites:
		return "CallSiteInfo"
	}
	return fmt.Sprintf("InfoType(%d)", uint32(t))
}

// Range is the half-open address range [Start, End).
type Range struct{ Start, End uint64 }

func (r Range) Size() uint64               { return r.End - r.Start }
func (r Range) Contains(addr uint64) bool  { return r.Start <= addr && addr < r.End }
func (r Range) ContainsRange(o Range) bool { return r.Start <= o.Start && o.End <= r.End }
func (r Range) intersects(o Range) bool    { return r.Start < o.End && o.Start < r.End }
func compareRange(a, b Range) int {
	return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
}
func (r Range) String() string { return fmt.Sprintf("[0x%016x - 0x%016x)", r.Start, r.End) }
func rangesContain(rs []Range, addr uint64) bool {
	for _, r := range rs {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

// AddRange adds r to the sorted, disjoint set rs, merging ranges that
// overlap or touch and dropping empty ones, as LLVM's AddressRanges does;
// decoding and re-encoding then reproduce LLVM's bytes, and converters
// build inline ranges the way LLVM does.
func AddRange(rs []Range, r Range) []Range {
	if r.Start >= r.End {
		return rs
	}
	i, _ := slices.BinarySearchFunc(rs, r, func(e, t Range) int {
		if compareRange(e, t) <= 0 {
			return -1
		}
		return 1
	})
	j := i
	for j < len(rs) && rs[j].Start <= r.End {
		j++
	}
	if i != j {
		r.End = max(r.End, rs[j-1].End)
		rs = slices.Delete(rs, i, j)
	}
	if i > 0 && r.Start <= rs[i-1].End {
		rs[i-1].End = max(rs[i-1].End, r.End)
		return rs
	}
	return slices.Insert(rs, i, r)
}

// RangesContainRange reports whether one range of rs holds all of o.
func RangesContainRange(rs []Range, o Range) bool {
	for _, r := range rs {
		if r.ContainsRange(o) {
			return true
		}
	}
	return false
}

// LineEntry is one row of a function's line table: from Addr on, the code
// comes from line Line of file File (an index into the file table).
type LineEntry struct {
	Addr uint64
	File uint32
	Line uint32
}

// InlineInfo is a node of a function's inline tree. The top node is the
// function itself; each child is a call inlined into its parent, made at
// CallFile:CallLine of the parent's source.
type InlineInfo struct {
	Ranges   []Range // sorted, disjoint, non-empty
	Name     string
	CallFile uint32
	CallLine uint32
	Children []InlineInfo
}

// CallSite describes a call made from a function, as LLVM's
// --dwarf-callsites records it.
type CallSite struct {
	ReturnOffset uint64
	Flags        uint8
	MatchRegex   []string
}

// FunctionInfo is everything GSYM stores for one address range.
type FunctionInfo struct {
	Range Range
	Name  string
	// Lines is the line table; nil when the function has none.
	Lines  []LineEntry
	Inline *InlineInfo
	// Merged holds functions folded onto the same range (identical code
	// folding), written only on request.
	Merged    []FunctionInfo
	CallSites []CallSite
	hasCalls  bool // a CallSiteInfo chunk exists, even an empty one
}

// HasRichInfo reports whether the record carries more than a name and a
// range; such records win over bare symbol-table records of the same range.
func (f *FunctionInfo) HasRichInfo() bool {
	return f.Lines != nil || f.Inline != nil || f.hasCalls
}

// compareFunctions orders records as LLVM's GsymCreator sorts them: by
// range, then by the number of inlined calls, then by line-table length and
// row addresses, then call-site presence, so that among records with equal
// ranges the richest one comes last.
func compareFunctions(a, b *FunctionInfo) int {
	if c := compareRange(a.Range, b.Range); c != 0 {
		return c
	}
	if c := compareOpt(a.Inline == nil, b.Inline == nil); c != 0 {
		return c
	}
	if a.Inline != nil {
		if c := cmp.Compare(a.Inline.descendants(), b.Inline.descendants()); c != 0 {
			return c
		}
	}
	if c := compareOpt(a.Lines == nil, b.Lines == nil); c != 0 {
		return c
	}
	if c := cmp.Compare(len(a.Lines), len(b.Lines)); c != 0 {
		return c
	}
	if c := slices.CompareFunc(a.Lines, b.Lines, func(x, y LineEntry) int { return cmp.Compare(x.Addr, y.Addr) }); c != 0 {
		return c
	}
	return compareOpt(!a.hasCalls, !b.hasCalls)
}

// compareOpt orders an absent value before a present one.
func compareOpt(aAbsent, bAbsent bool) int {
	switch {
	case aAbsent == bAbsent:
		return 0
	case aAbsent:
		return -1
	}
	return 1
}

func (n *InlineInfo) descendants() int {
	c := len(n.Children)
	for i := range n.Children {
		c += n.Children[i].descendants()
	}
	return c
}

func equalInline(a, b *InlineInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.CallFile == b.CallFile && a.CallLine == b.CallLine &&
		slices.Equal(a.Ranges, b.Ranges) &&
		slices.EqualFunc(a.Children, b.Children, func(x, y InlineInfo) bool { return equalInline(&x, &y) })
}

func equalFunctions(a, b *FunctionInfo) bool {
	return a.Range == b.Range && a.Name == b.Name && (a.Lines == nil) == (b.Lines == nil) && slices.Equal(a.Lines, b.Lines) &&
		equalInline(a.Inline, b.Inline) && len(a.Merged) == 0 && len(b.Merged) == 0 &&
		a.hasCalls == b.hasCalls && slices.EqualFunc(a.CallSites, b.CallSites, func(x, y CallSite) bool {
		return x.ReturnOffset == y.ReturnOffset && x.Flags == y.Flags && slices.Equal(x.MatchRegex, y.MatchRegex)
	})
}
