package gsym

import (
	"slices"
	"strings"
)

// maxInlineDepth bounds the nesting of an inline tree so a crafted file
// cannot exhaust the stack.
const maxInlineDepth = 512

// inlineNode is a node of a decoded inline tree, stored in preorder: the
// node's subtree is nodes[i+1 : end].
type inlineNode struct {
	ranges   []Range // sorted and merged, as LLVM's AddressRanges
	first    uint64  // start of the first range: base of the children
	last     uint64  // end of the last range, so most misses cost one compare
	name     string  // points into the file; "" until resolved (see inlineDecoder)
	nameOff  uint64
	callFile uint32
	callLine uint32
	end      int32
}

// inlineDecoder decodes InlineInfo chunks into preorder nodes. For a
// decoded record, kept in the cache, each node gets its own ranges and
// its name. A batch decodes function after function into the same
// storage instead (scratch): the ranges of all nodes share one slice
// and names are left to the lookups, which resolve those of the few
// nodes they enter.
type inlineDecoder struct {
	r       *Reader
	scratch bool
	nodes   []inlineNode
	ranges  []Range // scratch: the nodes' ranges
	tmp     []Range // the ranges of the node being read
}

// decodeInline decodes an InlineInfo chunk into preorder nodes.
func (r *Reader) decodeInline(x *extractor, base uint64) ([]inlineNode, error) {
	d := inlineDecoder{r: r}
	return d.decode(x, base)
}

// decode decodes the chunk in x; with scratch, the nodes returned are
// valid until the next decode.
func (d *inlineDecoder) decode(x *extractor, base uint64) ([]inlineNode, error) {
	d.nodes, d.ranges = d.nodes[:0], d.ranges[:0]
	if !d.node(x, base, 0) && x.err == nil {
		return nil, formatErr(x.base, "InlineInfo", "no address ranges")
	}
	if x.err != nil {
		return nil, x.err
	}
	return d.nodes, nil
}

// node appends one node and its subtree; it returns false for the node
// without ranges that ends a sibling list.
func (d *inlineDecoder) node(x *extractor, base uint64, depth int) bool {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return false
	}
	n := x.uleb("InlineInfo NumRanges")
	rs := d.tmp[:0]
	normal := true // sorted, disjoint, non-empty: as LLVM writes them
	for i := uint64(0); i < n && x.err == nil; i++ {
		start := base + x.uleb("InlineInfo range start")
		size := x.uleb("InlineInfo range size")
		if x.err != nil {
			break
		}
		r := Range{start, start + size}
		if normal && r.Start < r.End && (len(rs) == 0 || rs[len(rs)-1].End < r.Start) {
			rs = append(rs, r)
			continue
		}
		normal = false
		rs = AddRange(rs, r)
	}
	d.tmp = rs
	if len(rs) == 0 || x.err != nil {
		return false
	}
	if d.scratch {
		d.ranges = append(d.ranges, rs...)
		rs = d.ranges[len(d.ranges)-len(rs) : len(d.ranges) : len(d.ranges)]
	} else {
		rs = slices.Clone(rs)
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	i := len(d.nodes)
	nameOff := x.uint(d.r.strp, "InlineInfo Name")
	nd := inlineNode{
		ranges:   rs,
		first:    rs[0].Start,
		last:     rs[len(rs)-1].End,
		nameOff:  nameOff,
		callFile: uint32(x.uleb("InlineInfo CallFile")),
		callLine: uint32(x.uleb("InlineInfo CallLine")),
	}
	if !d.scratch {
		nd.name = d.r.String(nameOff)
	}
	d.nodes = append(d.nodes, nd)
	if hasChildren {
		for x.err == nil && d.node(x, rs[0].Start, depth+1) {
		}
	}
	d.nodes[i].end = int32(len(d.nodes))
	return x.err == nil
}

// What streamInline found at a node of an encoded inline tree.
const (
	inlineEnd     = iota // a node without ranges: the end of a sibling list
	inlineMissed         // a node not covering the address, skipped with its subtree
	inlineEntered        // a node covering the address
)

// streamInline walks the encoded inline node at x and its subtree as
// LLVM's InlineInfo::lookup does, from the mapped bytes and without
// allocating: a node that covers addr is entered, its deepest covering
// descendant is handled first (only the first covering child is
// followed), and each node with a call site turns the last location into
// the inlined function and appends its caller. base is the parent's first
// range start; skip walks a subtree only to step over it. Once a node is
// entered nothing after it is read.
func (r *Reader) streamInline(x *extractor, base, addr uint64, depth int, skip bool, locs *[]SourceLocation) (int, error) {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return inlineEnd, x.err
	}
	// Ranges as LLVM's AddressRanges holds them: empty ones dropped, the
	// lowest start first (the base of the children's ranges).
	first, any, covers := uint64(0), false, false
	for n := x.uleb("InlineInfo NumRanges"); n > 0 && x.err == nil; n-- {
		s := base + x.uleb("InlineInfo range start")
		e := s + x.uleb("InlineInfo range size")
		if s < e {
			if !any || s < first {
				first = s
			}
			any = true
			covers = covers || s <= addr && addr < e
		}
	}
	if x.err != nil {
		return inlineEnd, x.err
	}
	if !any {
		return inlineEnd, nil
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	nameOff := x.uint(r.strp, "InlineInfo Name")
	callFile := uint32(x.uleb("InlineInfo CallFile"))
	callLine := uint32(x.uleb("InlineInfo CallLine"))
	if x.err != nil {
		return inlineEnd, x.err
	}
	enter := covers && !skip
	for hasChildren {
		st, err := r.streamInline(x, first, addr, depth+1, !enter, locs)
		if err != nil {
			return inlineEnd, err
		}
		if st == inlineEnd || st == inlineEntered {
			break
		}
	}
	if !enter {
		return inlineMissed, nil
	}
	f := r.fileStrings(callFile)
	if f == nil {
		return inlineEnd, formatErr(x.base, "InlineInfo CallFile", "failed to extract file[%d]", callFile)
	}
	if f.valid {
		last := &(*locs)[len(*locs)-1]
		caller := SourceLocation{Name: last.Name, Offset: last.Offset,
			Dir: f.dir, Base: f.base, Line: callLine}
		last.Name = r.String(nameOff)
		last.Offset = addr - first
		*locs = append(*locs, caller)
	}
	return inlineEntered, nil
}

// lookupNodes walks the decoded tree as streamInline walks the encoded
// one: a node that covers addr is entered (only the first covering child
// of a node is followed), then, deepest first, each entered node with a
// call site turns the last location into the inlined function and
// appends its caller. Errors name the chunk's offset at, as
// streamInline's do. The walk is a loop that records the path; the
// locations are made on the way back up it.
func (r *Reader) lookupNodes(nodes []inlineNode, addr, at uint64, locs []SourceLocation) ([]SourceLocation, error) {
	var stack [16]int32
	path := stack[:0]
	for c, limit := 0, min(1, len(nodes)); c < limit; {
		n := &nodes[c]
		if addr < n.first || addr >= n.last || !rangesContain(n.ranges, addr) {
			c = int(n.end)
			continue
		}
		path = append(path, int32(c))
		c, limit = c+1, int(n.end)
	}
	for k := len(path) - 1; k >= 0; k-- {
		n := &nodes[path[k]]
		f := r.fileStrings(n.callFile)
		if f == nil {
			return locs, formatErr(at, "InlineInfo CallFile", "failed to extract file[%d]", n.callFile)
		}
		if !f.valid {
			continue
		}
		last := &locs[len(locs)-1]
		caller := SourceLocation{Name: last.Name, Offset: last.Offset,
			Dir: f.dir, Base: f.base, Line: n.callLine}
		last.Name = n.name
		if last.Name == "" {
			last.Name = r.String(n.nameOff)
		}
		last.Offset = addr - n.first
		locs = append(locs, caller)
	}
	return locs, nil
}

// inlineTree builds the public tree form of decoded nodes[i:].
func (r *Reader) inlineTree(nodes []inlineNode, i int) InlineInfo {
	n := &nodes[i]
	t := InlineInfo{Ranges: n.ranges, Name: strings.Clone(n.name), CallFile: n.callFile, CallLine: n.callLine}
	for c := i + 1; c < int(n.end); c = int(nodes[c].end) {
		t.Children = append(t.Children, r.inlineTree(nodes, c))
	}
	return t
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
