package gsym

import "strings"

// maxInlineDepth bounds the recursion over an inline tree so a crafted file
// cannot exhaust the stack.
const maxInlineDepth = 512

// inlineCodec decodes inline trees; strings resolves name offsets.
type inlineCodec struct {
	r *Reader
}

func (c inlineCodec) ranges(x *extractor, base uint64) []Range {
	n := x.uleb("InlineInfo NumRanges")
	var rs []Range
	for i := uint64(0); i < n && x.err == nil; i++ {
		start := base + x.uleb("InlineInfo range start")
		size := x.uleb("InlineInfo range size")
		if x.err == nil {
			rs = AddRange(rs, Range{start, start + size})
		}
	}
	return rs
}

// decode reads one node and its subtree; ok is false for the zero that ends
// a sibling list.
func (c inlineCodec) decode(x *extractor, base uint64, depth int) (n InlineInfo, ok bool) {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return n, false
	}
	n.Ranges = c.ranges(x, base)
	if len(n.Ranges) == 0 || x.err != nil {
		return n, false
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	n.Name = strings.Clone(c.r.String(x.uint(c.r.strp, "InlineInfo Name")))
	n.CallFile = uint32(x.uleb("InlineInfo CallFile"))
	n.CallLine = uint32(x.uleb("InlineInfo CallLine"))
	if hasChildren {
		for x.err == nil {
			child, ok := c.decode(x, n.Ranges[0].Start, depth+1)
			if !ok {
				break
			}
			n.Children = append(n.Children, child)
		}
	}
	return n, x.err == nil
}

// skip passes over a node whose ranges were already read, and its subtree.
func (c inlineCodec) skip(x *extractor, depth int) {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	x.take(c.r.strp, "InlineInfo Name")
	x.uleb("InlineInfo CallFile")
	x.uleb("InlineInfo CallLine")
	if !hasChildren {
		return
	}
	for x.err == nil {
		n := x.uleb("InlineInfo NumRanges")
		if n == 0 {
			return
		}
		for i := uint64(0); i < n && x.err == nil; i++ {
			x.uleb("InlineInfo range start")
			x.uleb("InlineInfo range size")
		}
		c.skip(x, depth+1)
	}
}

// lookup walks the tree as LLVM's InlineInfo::lookup does: a node that
// covers addr is entered, its deepest covering descendant is handled first,
// and each node with a call site turns the last location into the inlined
// function and appends its caller. It reports whether the node was entered
// (or ended the list), which stops the sibling scan.
func (c inlineCodec) lookup(x *extractor, base, addr uint64, locs []SourceLocation, depth int) ([]SourceLocation, bool) {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return locs, true
	}
	// Ranges are read without allocating: only containment and the
	// lowest start matter here.
	n := x.uleb("InlineInfo NumRanges")
	contains, first, any := false, uint64(0), false
	for i := uint64(0); i < n && x.err == nil; i++ {
		start := base + x.uleb("InlineInfo range start")
		size := x.uleb("InlineInfo range size")
		if size == 0 || start+size < start {
			continue
		}
		if !any || start < first {
			first = start
		}
		any = true
		if start <= addr && addr-start < size {
			contains = true
		}
	}
	if !any || x.err != nil {
		return locs, true
	}
	if !contains {
		c.skip(x, depth)
		return locs, false
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	name := x.uint(c.r.strp, "InlineInfo Name")
	callFile := uint32(x.uleb("InlineInfo CallFile"))
	callLine := uint32(x.uleb("InlineInfo CallLine"))
	if hasChildren {
		for x.err == nil {
			var done bool
			if locs, done = c.lookup(x, first, addr, locs, depth+1); done {
				break
			}
		}
	}
	if x.err != nil {
		return locs, true
	}
	dir, fileBase, ok := c.r.file(callFile)
	if !ok {
		x.err = formatErr(x.base, "InlineInfo CallFile", "failed to extract file[%d]", callFile)
		return locs, true
	}
	if dir != 0 || fileBase != 0 {
		last := &locs[len(locs)-1]
		caller := SourceLocation{Name: last.Name, Offset: last.Offset,
			Dir: c.r.String(dir), Base: c.r.String(fileBase), Line: callLine}
		last.Name = c.r.String(name)
		last.Offset = addr - first
		locs = append(locs, caller)
	}
	return locs, true
}

// appendInline encodes node n; base is the parent's first range start (the
// function start for the top node).
func (w *writer) appendInline(n *InlineInfo, base uint64) error {
	if len(n.Ranges) == 0 {
		return formatErr(0, "InlineInfo", "attempted to encode invalid InlineInfo object")
	}
	w.b = appendULEB(w.b, uint64(len(n.Ranges)))
	for _, r := range n.Ranges {
		w.b = appendULEB(w.b, r.Start-base)
		w.b = appendULEB(w.b, r.Size())
	}
	hasChildren := len(n.Children) > 0
	w.u8(b2u(hasChildren))
	w.strp(n.Name)
	w.b = appendULEB(w.b, uint64(n.CallFile))
	w.b = appendULEB(w.b, uint64(n.CallLine))
	if !hasChildren {
		return nil
	}
	for i := range n.Children {
		ch := &n.Children[i]
		for _, r := range ch.Ranges {
			if !RangesContainRange(n.Ranges, r) {
				return formatErr(0, "InlineInfo", "child range not contained in parent")
			}
		}
		if err := w.appendInline(ch, n.Ranges[0].Start); err != nil {
			return err
		}
	}
	w.b = appendULEB(w.b, 0)
	return nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
