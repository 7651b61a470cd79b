package gsym

import "strings"

// maxInlineDepth bounds the nesting of an inline tree so a crafted file
// cannot exhaust the stack.
const maxInlineDepth = 512

// inlineNode is a node of a decoded inline tree, stored in preorder: the
// node's subtree is nodes[i+1 : end]. It holds no pointers, so decoding
// one is stores without write barriers and the collector skips the
// nodes.
type inlineNode struct {
	first    uint64 // start of the first range: base of the children
	last     uint64 // end of the last range, so most misses cost one compare
	nameOff  uint64
	rlo, rhi int32 // the node's ranges are the tree's ranges[rlo:rhi]
	callFile uint32
	callLine uint32
	end      int32
}

// inlineNodes is a decoded inline tree.
type inlineNodes struct {
	nodes  []inlineNode
	ranges []Range // sorted and merged per node, as LLVM's AddressRanges
	// names are the nodes' names, pointing into the file, resolved for
	// a cached record; a batch's scratch tree has none and its lookups
	// resolve those of the few nodes they enter.
	names []string
}

// nodeRanges returns node i's ranges.
func (t *inlineNodes) nodeRanges(i int) []Range {
	n := &t.nodes[i]
	return t.ranges[n.rlo:n.rhi:n.rhi]
}

// inlineDecoder decodes InlineInfo chunks into preorder nodes. A batch
// decodes function after function into the same storage (scratch), a
// cached record into its own, with the names resolved.
type inlineDecoder struct {
	r       *Reader
	scratch bool
	t       inlineNodes
}

// decodeInline decodes an InlineInfo chunk into preorder nodes.
func (r *Reader) decodeInline(x *extractor, base uint64) (*inlineNodes, error) {
	d := inlineDecoder{r: r}
	return d.decode(x, base)
}

// decode decodes the chunk in x; with scratch, the tree returned is
// valid until the next decode.
func (d *inlineDecoder) decode(x *extractor, base uint64) (*inlineNodes, error) {
	d.t.nodes, d.t.ranges, d.t.names = d.t.nodes[:0], d.t.ranges[:0], d.t.names[:0]
	if !d.node(x, base, 0) && x.err == nil {
		return nil, formatErr(x.base, "InlineInfo", "no address ranges")
	}
	if x.err != nil {
		return nil, x.err
	}
	return &d.t, nil
}

// node appends one node and its subtree; it returns false for the node
// without ranges that ends a sibling list.
func (d *inlineDecoder) node(x *extractor, base uint64, depth int) bool {
	if depth > maxInlineDepth {
		x.fail("InlineInfo", "nested too deep")
		return false
	}
	t := &d.t
	n := x.uleb("InlineInfo NumRanges")
	lo := len(t.ranges)
	normal := true // sorted, disjoint, non-empty: as LLVM writes them
	for i := uint64(0); i < n && x.err == nil; i++ {
		start := base + x.uleb("InlineInfo range start")
		size := x.uleb("InlineInfo range size")
		if x.err != nil {
			break
		}
		r := Range{start, start + size}
		if normal && r.Start < r.End && (len(t.ranges) == lo || t.ranges[len(t.ranges)-1].End < r.Start) {
			t.ranges = append(t.ranges, r)
			continue
		}
		normal = false
		t.ranges = append(t.ranges[:lo], AddRange(t.ranges[lo:], r)...)
	}
	hi := len(t.ranges)
	if hi >= 1<<31 {
		x.fail("InlineInfo", "too many ranges")
	}
	if hi == lo || x.err != nil {
		t.ranges = t.ranges[:lo]
		return false
	}
	hasChildren := x.u8("InlineInfo HasChildren") != 0
	i := len(t.nodes)
	var nameOff uint64
	if d.r.strp == 4 {
		nameOff = uint64(x.u32("InlineInfo Name"))
	} else {
		nameOff = x.u64("InlineInfo Name")
	}
	first := t.ranges[lo].Start
	t.nodes = append(t.nodes, inlineNode{
		first:    first,
		last:     t.ranges[hi-1].End,
		nameOff:  nameOff,
		rlo:      int32(lo),
		rhi:      int32(hi),
		callFile: uint32(x.uleb("InlineInfo CallFile")),
		callLine: uint32(x.uleb("InlineInfo CallLine")),
	})
	if !d.scratch {
		t.names = append(t.names, d.r.String(nameOff))
	}
	if hasChildren {
		for x.err == nil && d.node(x, first, depth+1) {
		}
	}
	t.nodes[i].end = int32(len(t.nodes))
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
func (r *Reader) lookupNodes(t *inlineNodes, addr, at uint64, locs []SourceLocation) ([]SourceLocation, error) {
	var stack [16]int32
	path := stack[:0]
	nodes := t.nodes
	for c, limit := 0, min(1, len(nodes)); c < limit; {
		n := &nodes[c]
		// One range, as most have, is [first, last).
		if addr < n.first || addr >= n.last || n.rhi-n.rlo > 1 && !rangesContain(t.nodeRanges(c), addr) {
			c = int(n.end)
			continue
		}
		path = append(path, int32(c))
		c, limit = c+1, int(n.end)
	}
	for k := len(path) - 1; k >= 0; k-- {
		j := int(path[k])
		n := &nodes[j]
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
		if t.names != nil {
			last.Name = t.names[j]
		} else {
			last.Name = r.String(n.nameOff)
		}
		last.Offset = addr - n.first
		locs = append(locs, caller)
	}
	return locs, nil
}

// inlineTree builds the public tree form of decoded nodes[i:].
func (r *Reader) inlineTree(t *inlineNodes, i int) InlineInfo {
	n := &t.nodes[i]
	info := InlineInfo{Ranges: t.nodeRanges(i), Name: strings.Clone(t.names[i]), CallFile: n.callFile, CallLine: n.callLine}
	for c := i + 1; c < int(n.end); c = int(t.nodes[c].end) {
		info.Children = append(info.Children, r.inlineTree(t, c))
	}
	return info
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
