package convert

import (
	"debug/dwarf"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/sprof/sprof/symbolize/gsym"
)

// DWARF language codes whose names LLVM qualifies with their enclosing
// scopes ("ns::Class::method").
var qualifiedLanguages = map[int64]bool{
	0x02: true, // DW_LANG_C
	0x04: true, // DW_LANG_C_plus_plus
	0x11: true, // DW_LANG_ObjC_plus_plus
	0x19: true, // DW_LANG_C_plus_plus_03
	0x1a: true, // DW_LANG_C_plus_plus_11
	0x21: true, // DW_LANG_C_plus_plus_14
}

const attrMIPSLinkageName = dwarf.Attr(0x2007)

// node is a DIE of the compilation unit being converted, linked into the
// unit's tree.
type node struct {
	off        dwarf.Offset
	tag        dwarf.Tag
	e          *dwarf.Entry // nil for tags the conversion never reads
	parent     int32
	firstChild int32
	next       int32
}

// keptTags are the DIEs whose attributes the conversion reads: functions,
// inlined calls, the blocks between them, and the scopes that qualify
// names. Other entries (types, variables, parameters: most of the DWARF)
// are dropped as soon as they are linked, which keeps a unit's live heap
// small.
var keptTags = map[dwarf.Tag]bool{
	dwarf.TagCompileUnit: true, dwarf.TagSubprogram: true, dwarf.TagInlinedSubroutine: true,
	dwarf.TagLexDwarfBlock: true, dwarf.TagNamespace: true, dwarf.TagClassType: true,
	dwarf.TagStructType: true, dwarf.TagUnionType: true,
}

// dieRef is a DIE: an index into the unit's nodes, or (idx < 0) an entry of
// another unit, read on its own without its parents.
type dieRef struct {
	idx int32
	e   *dwarf.Entry
}

func (d dieRef) valid() bool { return d.e != nil }

// unitResult is what one compilation unit contributes: functions whose file
// indexes point into paths (index k stands for paths[k-1]).
type unitResult struct {
	funcs []gsym.FunctionInfo
	paths []string
	err   error
}

// unitConverter converts one compilation unit; one runs per worker.
type unitConverter struct {
	d        *dwarf.Data
	secs     *lineSections
	validPC  func(uint64) bool
	nodes    []node
	foreign  map[dwarf.Offset]*dwarf.Entry
	lang     int64
	compDir  string
	addrSize int
	lt       *lineTable
	out      unitResult
	pathIdx  map[string]uint32 // maps of this converter's part of the unit
	fileIdx  map[uint64]int64  // DWARF file number → path index, -1 invalid
	rowBuf   []int
}

// convertDWARF adds a FunctionInfo for every function range in d, working
// on units in parallel and adding their results in unit order, so the
// output does not depend on scheduling.
func convertDWARF(c *gsym.Creator, d *dwarf.Data, secs *lineSections, workers int, progress func(done, total int)) (int, error) {
	units, err := unitOffsets(d)
	if err != nil {
		return 0, err
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make([]chan []unitResult, len(units))
	for i := range results {
		results[i] = make(chan []unitResult, 1)
	}
	jobs := make(chan int)
	// Units in flight (converting, or done and waiting for their turn) are
	// bounded, so memory holds a few units' functions, not the whole DWARF.
	tokens := make(chan struct{}, 2*workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				u := &unitConverter{d: d, secs: secs, validPC: c.ValidTextAddress}
				results[i] <- u.convert(units[i], workers)
			}
		}()
	}
	go func() {
		for i := range units {
			tokens <- struct{}{}
			jobs <- i
		}
		close(jobs)
	}()
	n := 0
	var firstErr error
	for i := range units {
		for _, res := range <-results[i] {
			if res.err != nil && firstErr == nil {
				firstErr = fmt.Errorf("compilation unit at %#x: %w", units[i], res.err)
			}
			n += addUnitResult(c, res)
		}
		<-tokens
		if progress != nil {
			progress(i+1, len(units))
		}
	}
	wg.Wait()
	return n, firstErr
}

// addUnitResult adds a unit's functions, mapping its file indexes to the
// Creator's.
func addUnitResult(c *gsym.Creator, res unitResult) int {
	global := make([]uint32, len(res.paths)+1)
	for k, p := range res.paths {
		global[k+1] = c.InsertFile(p)
	}
	for _, f := range res.funcs {
		for j := range f.Lines {
			f.Lines[j].File = global[f.Lines[j].File]
		}
		remapInline(f.Inline, global)
		c.AddFunction(f)
	}
	return len(res.funcs)
}

func remapInline(n *gsym.InlineInfo, global []uint32) {
	if n == nil {
		return
	}
	n.CallFile = global[n.CallFile]
	for i := range n.Children {
		remapInline(&n.Children[i], global)
	}
}

// unitOffsets lists the compilation units. Walking them once, in one
// goroutine, also makes debug/dwarf finish its lazy per-unit setup before
// workers share the Data.
func unitOffsets(d *dwarf.Data) ([]dwarf.Offset, error) {
	var offs []dwarf.Offset
	r := d.Reader()
	last := dwarf.Offset(0)
	for i := 0; ; i++ {
		e, err := r.Next()
		if err != nil {
			return offs, err
		}
		if e == nil {
			return offs, nil
		}
		// debug/dwarf can loop on corrupt sibling links, returning the
		// same entry again: insist on progress.
		if i > 0 && e.Offset <= last {
			return offs, fmt.Errorf("DWARF entry at %#x does not follow %#x", e.Offset, last)
		}
		last = e.Offset
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			offs = append(offs, e.Offset)
		}
		r.SkipChildren()
	}
}

// splitSubprograms is the number of functions above which a unit's
// functions are converted by several goroutines: one huge unit (an
// amalgamation like SQLite's) would otherwise use one core.
const splitSubprograms = 1024

// convert converts the unit at off into one or more results, in order.
func (u *unitConverter) convert(off dwarf.Offset, parts int) []unitResult {
	// The line program does not depend on the DIEs: parse it while they
	// are read.
	ltc := make(chan *lineTable, 1)
	go func() {
		defer func() {
			if recover() != nil {
				ltc <- nil
			}
		}()
		ltc <- u.lineTableAt(off)
	}()
	err := catch(func() error { return u.load(off) })
	u.lt = <-ltc
	if err != nil {
		return []unitResult{{err: err}}
	}
	if len(u.nodes) == 0 || u.nodes[0].tag != dwarf.TagCompileUnit {
		return nil
	}
	cu := u.nodes[0].e
	u.lang, _ = cu.Val(dwarf.AttrLanguage).(int64)
	u.compDir, _ = cu.Val(dwarf.AttrCompDir).(string)
	var subs []int32
	for i := range u.nodes {
		if u.nodes[i].tag == dwarf.TagSubprogram {
			subs = append(subs, int32(i))
		}
	}
	if len(subs) < splitSubprograms {
		parts = 1
	}
	out := make([]unitResult, parts)
	var wg sync.WaitGroup
	for p := range parts {
		part := &unitConverter{d: u.d, secs: u.secs, validPC: u.validPC, nodes: u.nodes,
			lang: u.lang, compDir: u.compDir, addrSize: u.addrSize, lt: u.lt,
			pathIdx: map[string]uint32{}, fileIdx: map[uint64]int64{}}
		chunk := subs[p*len(subs)/parts : (p+1)*len(subs)/parts]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := catch(func() error {
				for _, i := range chunk {
					part.subprogram(i)
				}
				return nil
			}); err != nil {
				part.out = unitResult{err: err}
			}
			out[p] = part.out
		}()
	}
	wg.Wait()
	return out
}

// catch runs f, turning a panic in debug/dwarf on corrupt input into an
// error.
func catch(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	return f()
}

// lineTableAt parses the line program of the unit at off, nil if it has
// none or it cannot be read.
func (u *unitConverter) lineTableAt(off dwarf.Offset) *lineTable {
	r := u.d.Reader()
	r.Seek(off)
	cu, err := r.Next()
	if err != nil || cu == nil || u.secs.line == nil {
		return nil
	}
	stmt, ok := cu.Val(dwarf.AttrStmtList).(int64)
	if !ok {
		return nil
	}
	lt, _ := parseLineTable(u.secs, uint64(stmt), r.AddressSize())
	return lt
}

// load reads the unit's DIEs and links them into a tree.
func (u *unitConverter) load(off dwarf.Offset) error {
	r := u.d.Reader()
	r.Seek(off)
	u.addrSize = r.AddressSize()
	var stack, lastChild []int32
	for i := 0; ; i++ {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if i > 0 && e.Tag != 0 && e.Offset <= u.nodes[len(u.nodes)-1].off {
			return fmt.Errorf("DWARF entry at %#x does not follow %#x", e.Offset, u.nodes[len(u.nodes)-1].off)
		}
		if e.Tag == 0 {
			if len(stack) == 0 {
				return nil
			}
			stack, lastChild = stack[:len(stack)-1], lastChild[:len(lastChild)-1]
			if len(stack) == 0 {
				return nil
			}
			continue
		}
		i := int32(len(u.nodes))
		n := node{off: e.Offset, tag: e.Tag, parent: -1, firstChild: -1, next: -1}
		if keptTags[e.Tag] {
			n.e = e
		}
		if len(stack) > 0 {
			p := stack[len(stack)-1]
			n.parent = p
			if l := lastChild[len(lastChild)-1]; l < 0 {
				u.nodes[p].firstChild = i
			} else {
				u.nodes[l].next = i
			}
			lastChild[len(lastChild)-1] = i
		}
		u.nodes = append(u.nodes, n)
		if e.Children {
			stack, lastChild = append(stack, i), append(lastChild, -1)
		} else if len(stack) == 0 {
			return nil // a unit DIE without children
		}
	}
}

// ref resolves a reference attribute of d.
func (u *unitConverter) ref(d dieRef, a dwarf.Attr) dieRef {
	off, ok := d.e.Val(a).(dwarf.Offset)
	if !ok {
		return dieRef{}
	}
	i, found := slices.BinarySearchFunc(u.nodes, off, func(n node, o dwarf.Offset) int {
		switch {
		case n.off < o:
			return -1
		case n.off > o:
			return 1
		}
		return 0
	})
	if found {
		return dieRef{idx: int32(i), e: u.nodes[i].e}
	}
	if e, ok := u.foreign[off]; ok {
		return dieRef{idx: -1, e: e}
	}
	r := u.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil {
		e = nil
	}
	if u.foreign == nil {
		u.foreign = map[dwarf.Offset]*dwarf.Entry{}
	}
	u.foreign[off] = e
	return dieRef{idx: -1, e: e}
}

// findRecursively looks for the first of attrs on d, then on the DIEs its
// abstract origin and specification name, as LLVM's findRecursively does.
func (u *unitConverter) findRecursively(d dieRef, attrs ...dwarf.Attr) any {
	work := []dieRef{d}
	var seen []*dwarf.Entry
	for len(work) > 0 && len(seen) < 16 {
		d := work[len(work)-1]
		work = work[:len(work)-1]
		if !d.valid() || slices.Contains(seen, d.e) {
			continue
		}
		seen = append(seen, d.e)
		for _, a := range attrs {
			if v := d.e.Val(a); v != nil {
				return v
			}
		}
		for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
			if r := u.ref(d, a); r.valid() {
				work = append(work, r)
			}
		}
	}
	return nil
}

func (u *unitConverter) shortName(d dieRef) string {
	s, _ := u.findRecursively(d, dwarf.AttrName).(string)
	return s
}

// parentDeclContext is LLVM's GetParentDeclContextDIE: the namespace,
// type or function that declares d.
func (u *unitConverter) parentDeclContext(d dieRef, depth int) dieRef {
	if depth > 32 || !d.valid() {
		return dieRef{}
	}
	for _, a := range []dwarf.Attr{dwarf.AttrSpecification, dwarf.AttrAbstractOrigin} {
		if r := u.ref(d, a); r.valid() {
			if p := u.parentDeclContext(r, depth+1); p.valid() {
				return p
			}
		}
	}
	if d.e.Tag == dwarf.TagInlinedSubroutine || d.idx < 0 {
		return dieRef{}
	}
	pi := u.nodes[d.idx].parent
	if pi < 0 {
		return dieRef{}
	}
	p := dieRef{idx: pi, e: u.nodes[pi].e}
	switch u.nodes[pi].tag {
	case dwarf.TagNamespace, dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagClassType, dwarf.TagSubprogram:
		return p
	case dwarf.TagLexDwarfBlock:
		return u.parentDeclContext(p, depth+1)
	}
	return dieRef{}
}

// qualifiedName is the name LLVM gives a function DIE: its linkage name if
// it has one, else its name qualified by its enclosing scopes for C and C++.
func (u *unitConverter) qualifiedName(d dieRef) (string, bool) {
	if s, ok := u.findRecursively(d, attrMIPSLinkageName, dwarf.AttrLinkageName).(string); ok && s != "" {
		return s, true
	}
	short := u.shortName(d)
	if short == "" {
		return "", false
	}
	if !qualifiedLanguages[u.lang] {
		return short, true
	}
	if strings.HasPrefix(short, "_Z") && (strings.Contains(short, ".isra.") || strings.Contains(short, ".part.")) {
		return short, true
	}
	name := short
	for p, n := u.parentDeclContext(d, 0), 0; p.valid() && n < 64; p, n = u.parentDeclContext(p, 0), n+1 {
		pn := u.shortName(p)
		switch {
		case pn == "":
		case len(pn) >= 2 && pn[0] == '<' && pn[len(pn)-1] == '>':
			name = "{" + pn[1:len(pn)-1] + "}::" + name
		default:
			name = pn + "::" + name
		}
	}
	return name, true
}

func (u *unitConverter) isTombstone(a uint64) bool {
	switch u.addrSize {
	case 4:
		return a == 0xffffffff
	case 8:
		return a == ^uint64(0)
	}
	return false
}

// ranges returns the non-empty ranges of d, sorted and merged.
func (u *unitConverter) ranges(e *dwarf.Entry) ([][2]uint64, []gsym.Range) {
	var rs [][2]uint64
	if low, ok := e.Val(dwarf.AttrLowpc).(uint64); ok && e.Val(dwarf.AttrRanges) == nil {
		// The common case, without debug/dwarf's Ranges, which re-reads
		// the unit's DIE on every call.
		switch f := e.AttrField(dwarf.AttrHighpc); {
		case f == nil:
			return nil, nil
		case f.Class == dwarf.ClassConstant:
			v, _ := f.Val.(int64)
			rs = [][2]uint64{{low, low + uint64(v)}}
		case f.Class == dwarf.ClassAddress:
			v, _ := f.Val.(uint64)
			rs = [][2]uint64{{low, v}}
		default:
			return nil, nil
		}
	} else {
		var err error
		if rs, err = u.d.Ranges(e); err != nil {
			return nil, nil
		}
	}
	var merged []gsym.Range
	for _, r := range rs {
		if r[0] < r[1] {
			merged = gsym.AddRange(merged, gsym.Range{Start: r[0], End: r[1]})
		}
	}
	return rs, merged
}

// subprogram emits one FunctionInfo per address range of DIE i.
func (u *unitConverter) subprogram(i int32) {
	d := dieRef{idx: i, e: u.nodes[i].e}
	rs, _ := u.ranges(d.e)
	if len(rs) == 0 {
		return
	}
	name, ok := u.qualifiedName(d)
	if !ok {
		return
	}
	for _, r := range rs {
		if r[0] >= r[1] || u.isTombstone(r[0]) || !u.validPC(r[0]) {
			break
		}
		f := gsym.FunctionInfo{Range: gsym.Range{Start: r[0], End: r[1]}, Name: name}
		if u.lt != nil {
			f.Lines = u.lines(d, f.Range)
		}
		if u.hasInline(i, 0) {
			top := &gsym.InlineInfo{Ranges: []gsym.Range{f.Range}, Name: name}
			u.inline(i, 0, top)
			if len(top.Children) > 0 {
				f.Inline = top
			}
		}
		u.out.funcs = append(u.out.funcs, f)
	}
}

// fileIndex maps a DWARF file number to the unit's path list; false for an
// invalid number.
func (u *unitConverter) fileIndex(dwarfFile uint64) (uint32, bool) {
	if i, ok := u.fileIdx[dwarfFile]; ok {
		return uint32(i), i >= 0
	}
	p, ok := u.lt.filePath(dwarfFile, u.compDir)
	if !ok {
		u.fileIdx[dwarfFile] = -1
		return 0, false
	}
	i, ok := u.pathIdx[p]
	if !ok {
		u.out.paths = append(u.out.paths, p)
		i = uint32(len(u.out.paths))
		u.pathIdx[p] = i
	}
	u.fileIdx[dwarfFile] = int64(i)
	return i, true
}

// lines builds the line table of a function range from the unit's line
// program with the rules of LLVM's convertFunctionLineTable.
func (u *unitConverter) lines(d dieRef, fr gsym.Range) []gsym.LineEntry {
	u.rowBuf = u.lt.rowsForRange(fr.Start, fr.End, u.rowBuf)
	if len(u.rowBuf) == 0 {
		file, okf := u.findRecursively(d, dwarf.AttrDeclFile).(int64)
		line, okl := u.findRecursively(d, dwarf.AttrDeclLine).(int64)
		if !okf || !okl {
			return nil
		}
		fi, ok := u.fileIndex(uint64(file))
		if !ok {
			return nil
		}
		return []gsym.LineEntry{{Addr: fr.Start, File: fi, Line: uint32(line)}}
	}
	var out []gsym.LineEntry
	var prevAddr uint64
	for k, ri := range u.rowBuf {
		row := u.lt.rows[ri]
		fi, ok := u.fileIndex(uint64(row.file))
		if !ok {
			continue
		}
		addr := row.addr
		if !fr.Contains(addr) {
			if addr >= fr.Start {
				continue
			}
			addr = fr.Start
		}
		if k != 0 && row.addr < prevAddr {
			break
		}
		if n := len(out); n > 0 && out[n-1].File == fi && out[n-1].Line == row.line {
			continue
		}
		if row.endSeq {
			prevAddr = 0
		} else {
			out = append(out, gsym.LineEntry{Addr: addr, File: fi, Line: row.line})
			prevAddr = row.addr
		}
	}
	return out
}

// hasInline reports whether an inlined subroutine lies under DIE i, not
// looking into nested functions.
func (u *unitConverter) hasInline(i int32, depth int) bool {
	switch u.nodes[i].tag {
	case dwarf.TagInlinedSubroutine:
		return true
	case dwarf.TagSubprogram:
		if depth != 0 {
			return false
		}
	}
	for c := u.nodes[i].firstChild; c >= 0; c = u.nodes[c].next {
		if u.hasInline(c, depth+1) {
			return true
		}
	}
	return false
}

// inline adds the inlined calls under DIE i to parent, as LLVM's
// parseInlineInfo does.
func (u *unitConverter) inline(i int32, depth int, parent *gsym.InlineInfo) {
	if depth > 256 || !u.hasInline(i, depth) {
		return
	}
	e := u.nodes[i].e
	switch u.nodes[i].tag {
	case dwarf.TagInlinedSubroutine:
		_, all := u.ranges(e)
		var n gsym.InlineInfo
		for _, r := range all {
			if gsym.RangesContainRange(parent.Ranges, r) {
				n.Ranges = gsym.AddRange(n.Ranges, r)
			}
		}
		if len(n.Ranges) == 0 {
			return
		}
		n.Name, _ = u.qualifiedName(dieRef{idx: i, e: e})
		if cf, ok := e.Val(dwarf.AttrCallFile).(int64); ok {
			fi, ok := u.fileIndex(uint64(cf))
			if !ok {
				return
			}
			n.CallFile = fi
		}
		if cl, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
			n.CallLine = uint32(cl)
		}
		for c := u.nodes[i].firstChild; c >= 0; c = u.nodes[c].next {
			u.inline(c, depth+1, &n)
		}
		parent.Children = append(parent.Children, n)
	case dwarf.TagSubprogram, dwarf.TagLexDwarfBlock:
		for c := u.nodes[i].firstChild; c >= 0; c = u.nodes[c].next {
			u.inline(c, depth+1, parent)
		}
	}
}
