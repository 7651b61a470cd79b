// Package goinline reads which calls the Go compiler inlined at a pc from
// the program's function table (pclntab), the part debug/gosym does not
// read. A Go program stripped of its DWARF (-ldflags=-s -w, strip(1)),
// as many are when shipped, keeps the table, and the runtime's own
// tracebacks and profiles show the inlined calls from it; a symbolizer
// that reads debug/gosym alone shows one frame per pc, and a flame graph
// of such a program loses every function the compiler inlined.
//
// Each function's entry in the table (runtime._func) lists offsets of
// per-pc value tables (pcdata) and of data (funcdata). PCDATA_InlTreeIndex
// maps each pc to a node of the function's inline tree, or -1 where no
// inlined call covers it; FUNCDATA_InlTree is that tree, an array of
// nodes (runtime.inlinedCall) that each name the inlined function and the
// pc, within the function, of an instruction whose position is the call
// site; that pc's own index gives the node around it. The funcdata
// offsets count from the runtime's gofunc address (elfx.GoFunc).
//
// The layouts read here are Go 1.18's and 1.19's (table magic
// 0xfffffff0) and Go 1.20's and later's (0xfffffff1), which differ in the
// function entry's size (1.20 added the start line) and in the tree's
// nodes (1.18's name the call site's file, line and parent node too, and
// 1.20's the inlined function's start line instead); both name the
// function and the call site's pc, which is all Calls reads, and the
// runtimes of both walk the tree by the pc, as Calls does. Older tables
// keep funcdata as pointers, not offsets, and are not read.
// Every offset and index comes from the file and is checked. The
// compiler adds a call's node after the node of the call around it, so a
// chain of nodes is followed only while their indexes fall, and at most
// maxDepth deep. Real programs break that rule at a few pcs (54 to 135
// of 2 to 6 million pcs in three Go 1.23 to 1.25 programs, none in four
// others), seen where a node names as its call site the function's
// entry, an instruction that node itself covers: their inlined calls are
// not known, which Calls says by an error.
package goinline

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrUnsupported is returned by New for a table of another layout.
var ErrUnsupported = errors.New("Go function table without a known inline tree layout")

// ErrMalformed is wrapped by the errors for tables whose contents
// contradict themselves.
var ErrMalformed = errors.New("malformed Go function table")

const (
	go118Magic = 0xfffffff0
	go120Magic = 0xfffffff1

	pcdataInlTreeIndex = 2 // abi.PCDATA_InlTreeIndex
	funcdataInlTree    = 3 // abi.FUNCDATA_InlTree
	noFuncdata         = ^uint32(0)
	funcNpcdata        = 28 // offset of runtime._func's pcdata count

	maxPcdata      = 64
	maxNameLength  = 4096
	maxDepth       = 256
	maxTableLength = 1 << 20 // bytes of one pcdata table decoded at most
)

// layout is where one version's tables keep what Calls reads.
type layout struct {
	// funcHeader is the size of runtime._func before its pcdata and
	// funcdata offsets, funcNfuncdata the offset of its funcdata count;
	// its funcID is the byte 4 before the header's end.
	funcHeader, funcNfuncdata uint64
	// nodeSize is the size of a runtime.inlinedCall, nodeNameOff and
	// nodeParentPC the offsets of its function's name and its call
	// site's pc, 32 bits each.
	nodeSize, nodeNameOff, nodeParentPC uint64
}

// layoutOf returns the layout of the tables with magic.
func layoutOf(magic uint32) (layout, bool) {
	switch magic {
	case go118Magic:
		// _func: entryOff, nameOff, args, deferreturn, pcsp, pcfile,
		// pcln, npcdata, cuOffset; funcID, flag, a pad, nfuncdata.
		// inlinedCall: parent (16 bits), funcID, a pad; file, line,
		// func_ (the name) and parentPc.
		return layout{funcHeader: 40, funcNfuncdata: 39, nodeSize: 20, nodeNameOff: 12, nodeParentPC: 16}, true
	case go120Magic:
		// _func: 1.18's with startLine after cuOffset. inlinedCall:
		// funcID and padding, then nameOff, parentPc, startLine.
		return layout{funcHeader: 44, funcNfuncdata: 43, nodeSize: 16, nodeNameOff: 4, nodeParentPC: 8}, true
	}
	return layout{}, false
}

// Table is the inline trees of one Go program's function table.
type Table struct {
	layout
	order     binary.ByteOrder
	quantum   uint64 // pcs count in units of this many bytes
	nfunc     int
	text      uint64
	names     []byte // funcnametab
	pctab     []byte
	functab   []byte // pclntable: the function index, then the entries
	funcdata  []byte // from gofunc on
	functions []byte // the index: nfunc+1 pairs of (entry offset, entry's place)
}

// New returns the inline trees of pcln, a Go 1.18 or later function
// table in order, whose function entries count from text (runtime.text,
// see elfx.GoText), with funcdata the program's bytes from its gofunc
// address on (see elfx.GoFunc).
func New(pcln []byte, order binary.ByteOrder, text uint64, funcdata []byte) (*Table, error) {
	if len(pcln) < 8 {
		return nil, ErrUnsupported
	}
	l, ok := layoutOf(order.Uint32(pcln))
	if !ok {
		return nil, ErrUnsupported
	}
	ptr := int(pcln[7])
	if ptr != 4 && ptr != 8 {
		return nil, fmt.Errorf("%w: pointer size %d at offset 7", ErrMalformed, ptr)
	}
	quantum := uint64(pcln[6])
	if quantum != 1 && quantum != 2 && quantum != 4 {
		return nil, fmt.Errorf("%w: instruction quantum %d at offset 6", ErrMalformed, quantum)
	}
	// The header: magic, pads, quantum and pointer size, then words:
	// nfunc, nfiles, an unused one, and the offsets of funcnametab,
	// cutab, filetab, pctab and pclntable.
	header := 8 + 8*ptr
	if len(pcln) < header {
		return nil, fmt.Errorf("%w: header of %d bytes, %d wanted", ErrMalformed, len(pcln), header)
	}
	word := func(i int) uint64 {
		if ptr == 4 {
			return uint64(order.Uint32(pcln[8+4*i:]))
		}
		return order.Uint64(pcln[8+8*i:])
	}
	t := &Table{layout: l, order: order, quantum: quantum, text: text, funcdata: funcdata}
	var err error
	if t.names, err = region(pcln, word(3), word(4), "funcnametab"); err != nil {
		return nil, err
	}
	if t.pctab, err = region(pcln, word(6), word(7), "pctab"); err != nil {
		return nil, err
	}
	if t.functab, err = region(pcln, word(7), uint64(len(pcln)), "pclntable"); err != nil {
		return nil, err
	}
	nfunc := word(0)
	if nfunc == 0 || nfunc >= uint64(len(t.functab))/8 { // nfunc+1 pairs of 8 bytes
		return nil, fmt.Errorf("%w: %d functions at offset 8 in a function index of %d bytes", ErrMalformed, nfunc, len(t.functab))
	}
	t.nfunc = int(nfunc)
	t.functions = t.functab[:(t.nfunc+1)*8]
	return t, nil
}

// region returns pcln[start:end], checked.
func region(pcln []byte, start, end uint64, name string) ([]byte, error) {
	if start > end || end > uint64(len(pcln)) {
		return nil, fmt.Errorf("%w: %s at [%#x, %#x) in a table of %d bytes", ErrMalformed, name, start, end, len(pcln))
	}
	return pcln[start:end], nil
}

// Call is a call the compiler inlined.
type Call struct {
	// Function is the function it called: the inlined one.
	Function string
	// Site is the pc, in the function it was inlined into, of an
	// instruction whose source position is the call's.
	Site uint64
}

// Calls appends the calls inlined around pc, innermost first: the first
// names the function whose code pc is, and each Site lies in the next
// one's code, the last's in the function the table names for pc. It
// appends none where no call was inlined there, or where pc lies in no
// function of the table.
func (t *Table) Calls(dst []Call, pc uint64) ([]Call, error) {
	fn, entry, ok := t.function(pc)
	if !ok {
		return dst, nil
	}
	h, err := t.entry(fn)
	if err != nil {
		return dst, err
	}
	if h.inlIndex == 0 || h.inlTree == noFuncdata {
		return dst, nil
	}
	last := int32(-1)
	for depth := 0; ; depth++ {
		ix, err := t.pcvalue(h.inlIndex, entry, pc)
		if err != nil {
			return dst, fmt.Errorf("function entry at %#x: inline index: %w", fn, err)
		}
		if ix < 0 {
			return dst, nil
		}
		if depth > 0 && ix >= last {
			return dst, fmt.Errorf("%w: function entry at %#x: inline tree node %d's call site at %#x lies in node %d, not in one around it", ErrMalformed, fn, last, pc, ix)
		}
		if depth == maxDepth {
			return dst, fmt.Errorf("%w: function entry at %#x: inlined calls nested over %d deep", ErrMalformed, fn, maxDepth)
		}
		last = ix
		at := uint64(h.inlTree) + uint64(ix)*t.nodeSize
		if at+t.nodeSize > uint64(len(t.funcdata)) {
			return dst, fmt.Errorf("%w: function entry at %#x: inline tree node %d at funcdata offset %#x past %d bytes", ErrMalformed, fn, ix, at, len(t.funcdata))
		}
		node := t.funcdata[at : at+t.nodeSize]
		name, err := t.name(t.order.Uint32(node[t.nodeNameOff:]))
		if err != nil {
			return dst, fmt.Errorf("function entry at %#x: inline tree node %d: %w", fn, ix, err)
		}
		parent := int32(t.order.Uint32(node[t.nodeParentPC:]))
		if parent < 0 {
			return dst, fmt.Errorf("%w: function entry at %#x: inline tree node %d: call site %d before the function", ErrMalformed, fn, ix, parent)
		}
		site := entry + uint64(parent)
		dst = append(dst, Call{Function: name, Site: site})
		pc = site
	}
}

// function finds the function holding pc: where its entry lies in
// functab, and its entry pc.
func (t *Table) function(pc uint64) (fn uint32, entry uint64, ok bool) {
	if pc < t.text {
		return 0, 0, false
	}
	off := pc - t.text
	at := func(i int) uint64 { return uint64(t.order.Uint32(t.functions[8*i:])) }
	// The last function whose entry is at or below off; the index's
	// last pair holds the end of the last function.
	lo, hi := 0, t.nfunc
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if at(mid) <= off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || off >= at(t.nfunc) {
		return 0, 0, false
	}
	return t.order.Uint32(t.functions[8*(lo-1)+4:]), t.text + at(lo-1), true
}

// entry is what Calls reads of a function's entry: the offset of its
// inline index in pctab (0: none) and of its inline tree in funcdata
// (noFuncdata: none).
type entry struct {
	inlIndex uint32
	inlTree  uint32
}

func (t *Table) entry(fn uint32) (entry, error) {
	b := t.functab
	if uint64(fn)+t.funcHeader > uint64(len(b)) {
		return entry{}, fmt.Errorf("%w: function entry at %#x past pclntable's %d bytes", ErrMalformed, fn, len(b))
	}
	b = b[fn:]
	npcdata := t.order.Uint32(b[funcNpcdata:])
	nfuncdata := uint32(b[t.funcNfuncdata])
	if npcdata > maxPcdata {
		return entry{}, fmt.Errorf("%w: function entry at %#x: %d pcdata tables", ErrMalformed, fn, npcdata)
	}
	if need := t.funcHeader + 4*uint64(npcdata+nfuncdata); need > uint64(len(b)) {
		return entry{}, fmt.Errorf("%w: function entry at %#x: %d bytes past pclntable's end", ErrMalformed, fn, need)
	}
	e := entry{inlTree: noFuncdata}
	if npcdata > pcdataInlTreeIndex {
		e.inlIndex = t.order.Uint32(b[t.funcHeader+4*pcdataInlTreeIndex:])
	}
	if nfuncdata > funcdataInlTree {
		e.inlTree = t.order.Uint32(b[t.funcHeader+4*uint64(npcdata)+4*funcdataInlTree:])
	}
	return e, nil
}

// pcvalue decodes the pcdata table at off in pctab for pc, in the function
// whose entry pc is entry, as the runtime does: pairs of varints, a
// zigzag value delta and a pc delta in quanta, from the value -1 at the
// entry; a zero value delta after the first pair ends the table. -1 where
// the table ends before pc.
func (t *Table) pcvalue(off uint32, entry, pc uint64) (int32, error) {
	if uint64(off) >= uint64(len(t.pctab)) {
		return 0, fmt.Errorf("%w: pctab offset %#x past its %d bytes", ErrMalformed, off, len(t.pctab))
	}
	p := t.pctab[off:]
	if len(p) > maxTableLength {
		p = p[:maxTableLength]
	}
	val, at := int32(-1), entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv > 1<<32-1 {
			return 0, fmt.Errorf("%w: pctab table at %#x: value delta at %#x", ErrMalformed, off, uint64(off)+uint64(len(t.pctab[off:])-len(p)))
		}
		if uv == 0 && !first {
			return -1, nil
		}
		p = p[n:]
		d, n := binary.Uvarint(p)
		if n <= 0 || d > 1<<32-1 {
			return 0, fmt.Errorf("%w: pctab table at %#x: pc delta at %#x", ErrMalformed, off, uint64(off)+uint64(len(t.pctab[off:])-len(p)))
		}
		p = p[n:]
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		at += d * t.quantum
		if pc < at {
			return val, nil
		}
	}
}

// name returns the function name at off in funcnametab.
func (t *Table) name(off uint32) (string, error) {
	if uint64(off) >= uint64(len(t.names)) {
		return "", fmt.Errorf("%w: name offset %#x past funcnametab's %d bytes", ErrMalformed, off, len(t.names))
	}
	b := t.names[off:]
	if len(b) > maxNameLength {
		b = b[:maxNameLength]
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), nil
		}
	}
	return "", fmt.Errorf("%w: name at funcnametab offset %#x has no end in %d bytes", ErrMalformed, off, len(b))
}
