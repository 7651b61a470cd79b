package symbolize

import (
	"debug/dwarf"
	"slices"
	"sort"
)

// maxInlineRanges bounds the inlined ranges kept for one binary (40 bytes
// each); beyond it the binary is symbolized without inline frames.
const maxInlineRanges = 4 << 20

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, the pre-DWARF 4
// spelling of DW_AT_linkage_name that gcc still emits for some targets.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// inlineTable holds the address ranges of every inlined call in a binary,
// sorted by start, each linked to the range it is nested in, so the inline
// stack of an address is a binary search and a walk outwards.
type inlineTable struct {
	ranges []inlined
	names  names
	files  []string
}

type inlined struct {
	lo, hi   uint64
	parent   int32 // index of the enclosing inlined range, -1 for none
	depth    int32 // nesting level in the DIE tree, 1 for the outermost
	name     uint32
	callFile uint32 // index into files, or noFile
	callLine uint32
}

const noFile = ^uint32(0)

type inlineBuilder struct {
	d      *dwarf.Data
	inCode func(uint64) bool
	t      *inlineTable
	// nameOf caches the name index of abstract origins by DIE offset.
	nameOf  map[dwarf.Offset]uint32
	nameIdx map[string]uint32
	origins *dwarf.Reader
	full    bool
}

func newInlineBuilder(d *dwarf.Data, inCode func(uint64) bool, style Demangling) *inlineBuilder {
	return &inlineBuilder{
		d: d, inCode: inCode,
		t:       &inlineTable{names: names{style: style}},
		nameOf:  make(map[dwarf.Offset]uint32),
		nameIdx: make(map[string]uint32),
		origins: d.Reader(),
	}
}

// walkUnit reads the DIEs of one compilation unit, whose entry r has just
// returned, recording every DW_TAG_inlined_subroutine with a code address.
// fileOf maps the unit's file numbers to file indexes.
func (b *inlineBuilder) walkUnit(r *dwarf.Reader, fileOf []uint32) error {
	// depths holds, for each open DIE with children, the inline depth of
	// its children.
	depths := []int32{0}
	for len(depths) > 0 {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if e.Tag == 0 {
			depths = depths[:len(depths)-1]
			continue
		}
		depth := depths[len(depths)-1]
		switch e.Tag {
		case dwarf.TagInlinedSubroutine:
			depth++
			b.record(e, depth, fileOf)
		case dwarf.TagSubprogram, dwarf.TagLexDwarfBlock, dwarf.TagCompileUnit, dwarf.TagNamespace,
			dwarf.TagModule, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
			// Scopes that may hold code (C++ classes hold methods in
			// some producers' DWARF).
		default:
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		if e.Children {
			depths = append(depths, depth)
		}
	}
	return nil
}

func (b *inlineBuilder) record(e *dwarf.Entry, depth int32, fileOf []uint32) {
	if b.full {
		return
	}
	ranges, err := b.d.Ranges(e)
	if err != nil || len(ranges) == 0 {
		return
	}
	call := inlined{depth: depth, callFile: noFile, name: b.name(e)}
	if f, ok := e.Val(dwarf.AttrCallFile).(int64); ok && f >= 0 && f < int64(len(fileOf)) {
		call.callFile = fileOf[f]
	}
	if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok && l > 0 && l <= 1<<31 {
		call.callLine = uint32(l)
	}
	for _, rg := range ranges {
		if rg[0] >= rg[1] || !b.inCode(rg[0]) {
			continue
		}
		call.lo, call.hi = rg[0], rg[1]
		b.t.ranges = append(b.t.ranges, call)
	}
	if len(b.t.ranges) > maxInlineRanges {
		b.full = true
	}
}

// name returns the name index of an inlined call's function: the linkage
// (mangled) name if any producer gave one, else the plain name, found
// through DW_AT_abstract_origin and DW_AT_specification.
func (b *inlineBuilder) name(e *dwarf.Entry) uint32 {
	origin, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if !ok {
		return b.intern(entryName(e, ""))
	}
	if i, ok := b.nameOf[origin]; ok {
		return i
	}
	plain := ""
	linkage := ""
	off := origin
	for hop := 0; hop < 8 && linkage == ""; hop++ {
		b.origins.Seek(off)
		o, err := b.origins.Next()
		if err != nil || o == nil {
			break
		}
		linkage = entryName(o, "linkage")
		if plain == "" {
			plain = entryName(o, "plain")
		}
		next, ok := o.Val(dwarf.AttrSpecification).(dwarf.Offset)
		if !ok {
			if next, ok = o.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); !ok {
				break
			}
		}
		off = next
	}
	n := linkage
	if n == "" {
		n = plain
	}
	i := b.intern(n)
	b.nameOf[origin] = i
	return i
}

// entryName returns e's linkage name ("linkage"), plain name ("plain") or
// the first of them it has ("").
func entryName(e *dwarf.Entry, which string) string {
	if which != "plain" {
		for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName} {
			if s, ok := e.Val(a).(string); ok && s != "" {
				return s
			}
		}
		if which == "linkage" {
			return ""
		}
	}
	s, _ := e.Val(dwarf.AttrName).(string)
	return s
}

func (b *inlineBuilder) intern(n string) uint32 {
	if i, ok := b.nameIdx[n]; ok {
		return i
	}
	i := uint32(len(b.t.names.raw))
	b.t.names.raw = append(b.t.names.raw, n)
	b.nameIdx[n] = i
	return i
}

// finish sorts the ranges, outer before inner at one address, and links
// each to the range around it. It returns nil without ranges or when the
// binary had more than maxInlineRanges.
func (b *inlineBuilder) finish(files []string) *inlineTable {
	t := b.t
	if len(t.ranges) == 0 || b.full {
		return nil
	}
	slices.SortStableFunc(t.ranges, func(x, y inlined) int {
		switch {
		case x.lo != y.lo:
			if x.lo < y.lo {
				return -1
			}
			return 1
		case x.depth != y.depth:
			return int(x.depth - y.depth)
		}
		return 0
	})
	var open []int32
	for i := range t.ranges {
		r := &t.ranges[i]
		for len(open) > 0 {
			top := &t.ranges[open[len(open)-1]]
			if top.hi > r.lo && top.depth < r.depth {
				break
			}
			open = open[:len(open)-1]
		}
		r.parent = -1
		if len(open) > 0 {
			r.parent = open[len(open)-1]
		}
		open = append(open, int32(i))
	}
	t.ranges = slices.Clip(t.ranges)
	t.names.finish()
	t.files = files
	return t
}

// innermost returns the index of the innermost inlined range that holds
// addr, or -1; parent links lead to the ones around it.
func (t *inlineTable) innermost(addr uint64) int {
	i := sort.Search(len(t.ranges), func(i int) bool { return t.ranges[i].lo > addr }) - 1
	for i >= 0 && addr >= t.ranges[i].hi {
		i = int(t.ranges[i].parent)
	}
	return i
}

func (t *inlineTable) size() int64 {
	return int64(len(t.ranges))*40 + t.names.size()
}
