package convert

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/sprof/sprof/symbolize/gsym"
)

// DWARF language codes whose names LLVM qualifies with their enclosing
// scopes ("ns::Class::method").
func qualifiedLanguage(lang uint64) bool {
	switch lang {
	case 0x02, // DW_LANG_C
		0x04, // DW_LANG_C_plus_plus
		0x11, // DW_LANG_ObjC_plus_plus
		0x19, // DW_LANG_C_plus_plus_03
		0x1a, // DW_LANG_C_plus_plus_11
		0x21: // DW_LANG_C_plus_plus_14
		return true
	}
	return false
}

// node is a DIE of the compilation unit being converted, one of the tags
// the conversion reads (see keptTag), linked into the unit's tree. Its
// attributes are decoded again when needed, which costs less than keeping
// them.
type node struct {
	off        uint64
	tag        uint16
	parent     int32 // -1 for the unit DIE, or a parent of another tag
	firstChild int32
	next       int32
}

// dieRef is a DIE: an index into the unit's nodes, or (idx < 0) a DIE of
// another unit (or of a tag not in nodes), read on its own without its
// parents. off 0 means none.
type dieRef struct {
	idx int32
	off uint64
}

func (d dieRef) valid() bool { return d.off != 0 }

// unitResult is what one compilation unit contributes: functions whose file
// indexes point into paths (index k stands for paths[k-1]).
type unitResult struct {
	funcs []gsym.FunctionInfo
	paths []string
	err   error
}

// unitConverter converts one compilation unit; one runs per worker.
type unitConverter struct {
	d         *dwarfData
	unit      *unitHeader
	cu        dieAttrs // the unit DIE
	validPC   func(uint64) bool
	nodes     []node
	lang      uint64
	compDir   string
	lt        *lineTable
	rows      []lineRow // a buffer for lt's rows
	out       unitResult
	pathIdx   map[string]uint32 // maps of this converter's part of the unit
	fileIdx   []int64           // DWARF file number → path index, -1 invalid, 0 unknown
	rowBuf    []int
	lineBuf   []gsym.LineEntry
	rngBuf    [][2]uint64
	findBuf   dieAttrs // findRecursively's, kept off the stack of a callback
	nameCache map[uint64]dieNames
}

// convertDWARF adds a FunctionInfo for every function range in d, working
// on units in parallel and adding their results in unit order, so the
// output does not depend on scheduling.
func convertDWARF(ctx context.Context, c *gsym.Creator, d *dwarfData, workers int, progress func(done, total int)) (int, error) {
	var units []*unitHeader
	for i := range d.units {
		if t := d.units[i].tag; t == tagCompileUnit || t == tagPartialUnit {
			units = append(units, &d.units[i])
		}
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
			// Reused from unit to unit: no result refers to them.
			var nodes []node
			var rows []lineRow
			for i := range jobs {
				u := &unitConverter{d: d, unit: units[i], validPC: c.ValidTextAddress, nodes: nodes[:0], rows: rows}
				var res []unitResult
				if err := catch(func() error {
					res = u.convert(workers)
					return nil
				}); err != nil {
					res = []unitResult{{err: err}}
				}
				results[i] <- res
				nodes = u.nodes
				if u.lt != nil {
					rows = u.lt.rows
				}
			}
		}()
	}
	// Once ctx is done no unit starts: the workers end with the units
	// they have (results are buffered, so none waits to hand them over).
	go func() {
		defer close(jobs)
		for i := range units {
			if ctx.Err() != nil {
				return
			}
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return
			}
			jobs <- i
		}
	}()
	n := 0
	var firstErr error
	for i := range units {
		if err := ctx.Err(); err != nil {
			wg.Wait()
			return n, err
		}
		var rs []unitResult
		select {
		case rs = <-results[i]:
		case <-ctx.Done():
			wg.Wait()
			return n, ctx.Err()
		}
		for _, res := range rs {
			if res.err != nil && firstErr == nil {
				firstErr = fmt.Errorf("compilation unit at %#x: %w", units[i].off, res.err)
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

// splitSubprograms is the number of functions above which a unit's
// functions are converted by several goroutines: one huge unit (an
// amalgamation like SQLite's) would otherwise use one core.
const splitSubprograms = 1024

// convert converts the unit into one or more results, in order.
func (u *unitConverter) convert(parts int) []unitResult {
	if err := u.d.readDIE(u.unit, u.unit.dieOff, &u.cu); err != nil {
		return []unitResult{{err: err}}
	}
	if u.cu.tag != tagCompileUnit {
		return nil
	}
	// The line program does not depend on the DIEs: parse it while they
	// are read.
	ltc := make(chan *lineTable, 1)
	go func() {
		var lt *lineTable
		catch(func() error {
			lt = u.lineTable()
			return nil
		})
		ltc <- lt
	}()
	err := u.load()
	u.lt = <-ltc
	if err != nil {
		return []unitResult{{err: err}}
	}
	u.lang, _ = u.cu.constant(slotLanguage)
	u.compDir, _ = u.cu.str(slotCompDir)
	var subs []int32
	for i := range u.nodes {
		if u.nodes[i].tag == tagSubprogram {
			subs = append(subs, int32(i))
		}
	}
	if len(subs) < splitSubprograms {
		parts = 1
	}
	out := make([]unitResult, parts)
	var wg sync.WaitGroup
	for p := range parts {
		part := &unitConverter{d: u.d, unit: u.unit, cu: u.cu, validPC: u.validPC, nodes: u.nodes,
			lang: u.lang, compDir: u.compDir, lt: u.lt,
			pathIdx: map[string]uint32{}}
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

// catch runs f, turning a panic (a bug on hostile input, or a fault
// reading a mapped file truncated under us) into an error rather than the
// end of the process that converts.
func catch(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	return f()
}

// lineTable parses the unit's line program, nil if it has none or it
// cannot be read.
func (u *unitConverter) lineTable() *lineTable {
	stmt, ok := u.cu.constant(slotStmtList)
	if !ok || u.d.line == nil {
		return nil
	}
	lt, _ := parseLineTable(u.d, stmt, u.rows)
	return lt
}

// load walks the unit's DIEs and links those of kept tags into a tree.
// Other DIEs are stepped over without decoding their attributes.
func (u *unitConverter) load() error {
	unit := u.unit
	b := cursor{name: "debug_info", b: u.d.info[:unit.end], off: int(unit.dieOff), order: u.d.order}
	// For each open DIE with children: its node index (-1 when not kept)
	// and its last kept child.
	var stack, lastChild []int32
	for b.off < len(b.b) {
		off := uint64(b.off)
		code := b.uleb()
		if code == 0 {
			if b.err != nil {
				return b.err
			}
			if len(stack) == 0 {
				return nil
			}
			stack, lastChild = stack[:len(stack)-1], lastChild[:len(lastChild)-1]
			if len(stack) == 0 {
				return nil
			}
			continue
		}
		ab := unit.abbrevs.lookup(code)
		if ab == nil {
			return fmt.Errorf("debug_info: unknown abbreviation %d at offset %#x", code, off)
		}
		for i := range ab.skip {
			op := &ab.skip[i]
			if op.size != varSize && uint64(len(b.b)-b.off) >= uint64(op.size) {
				b.off += int(op.size)
			} else {
				b.skipAttr(op, unit)
			}
		}
		if b.err != nil {
			return b.err
		}
		i := int32(-1)
		if ab.kept {
			i = int32(len(u.nodes))
			n := node{off: off, tag: uint16(ab.tag), parent: -1, firstChild: -1, next: -1}
			if len(stack) > 0 && stack[len(stack)-1] >= 0 {
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
		}
		if ab.children {
			stack, lastChild = append(stack, i), append(lastChild, -1)
		} else if len(stack) == 0 {
			return nil // a unit DIE without children
		}
	}
	return b.err
}

// ref resolves reference attribute s of a.
func (u *unitConverter) ref(a *dieAttrs, s int) dieRef {
	off, ok := a.ref(s)
	if !ok || off == 0 {
		return dieRef{}
	}
	i, found := slices.BinarySearchFunc(u.nodes, off, func(n node, o uint64) int { return cmp.Compare(n.off, o) })
	if found {
		return dieRef{idx: int32(i), off: off}
	}
	if u.unit.dieOff <= off && off < u.unit.end {
		return dieRef{} // a DIE of a tag the conversion does not read
	}
	return dieRef{idx: -1, off: off}
}

// decode reads the attributes of d, false if it cannot be read.
func (u *unitConverter) decode(d dieRef, a *dieAttrs) bool {
	unit := u.unit
	if d.idx < 0 {
		if unit = u.d.unitAt(d.off); unit == nil {
			return false
		}
	}
	return u.d.readDIE(unit, d.off, a) == nil
}

// findRecursively calls found on d, then on the DIEs its abstract origin
// and specification name, until found returns true, as LLVM's
// findRecursively looks for an attribute.
func (u *unitConverter) findRecursively(d dieRef, found func(a *dieAttrs) bool) {
	var workBuf [8]dieRef
	var seenBuf [16]uint64
	work, seen := append(workBuf[:0], d), seenBuf[:0]
	a := &u.findBuf
	for len(work) > 0 && len(seen) < 16 {
		d := work[len(work)-1]
		work = work[:len(work)-1]
		if !d.valid() || slices.Contains(seen, d.off) || !u.decode(d, a) {
			continue
		}
		seen = append(seen, d.off)
		if found(a) {
			return
		}
		for _, s := range [...]int{slotOrigin, slotSpec} {
			if r := u.ref(a, s); r.valid() {
				work = append(work, r)
			}
		}
	}
}

// dieNames are the names findRecursively finds for a DIE: each from the
// first DIE that has the attribute; OK is false when it is not a string.
type dieNames struct {
	linkage, name         string
	linkageOK             bool
	haveLinkage, haveName bool
}

func (n *dieNames) complete() bool { return n.haveLinkage && n.haveName }

// fill takes from o what n lacks.
func (n *dieNames) fill(o dieNames) {
	if !n.haveLinkage && o.haveLinkage {
		n.linkage, n.linkageOK, n.haveLinkage = o.linkage, o.linkageOK, true
	}
	if !n.haveName && o.haveName {
		n.name, n.haveName = o.name, true
	}
}

// names returns the linkage name and the name of d as findRecursively
// would find them: from d, else depth first from its specification, then
// its abstract origin. The DIEs that others refer to (the abstract
// functions of inlined calls) are resolved once per unit and cached.
// a is d decoded, or nil.
func (u *unitConverter) names(d dieRef, a *dieAttrs) (linkage string, linkageOK bool, name string) {
	n := u.namesOf(d, a, 0)
	return n.linkage, n.linkageOK, n.name
}

// maxRefDepth bounds chains of references (cycles are corrupt DWARF).
const maxRefDepth = 16

func (u *unitConverter) namesOf(d dieRef, a *dieAttrs, depth int) dieNames {
	var n dieNames
	if a == nil {
		if a = &u.findBuf; depth > maxRefDepth || !d.valid() || !u.decode(d, a) {
			return n
		}
	}
	for _, sl := range [...]int{slotMIPSLinkage, slotLinkage} {
		if a.has(sl) {
			n.linkage, n.linkageOK = a.str(sl)
			n.haveLinkage = true
			break
		}
	}
	if a.has(slotName) {
		n.name, _ = a.str(slotName)
		n.haveName = true
	}
	if n.complete() {
		return n
	}
	spec, origin := u.ref(a, slotSpec), u.ref(a, slotOrigin)
	for _, r := range [...]dieRef{spec, origin} {
		if !r.valid() || r.off == d.off {
			continue
		}
		v, ok := u.nameCache[r.off]
		if !ok {
			v = u.namesOf(r, nil, depth+1)
			if u.nameCache == nil {
				u.nameCache = map[uint64]dieNames{}
			}
			u.nameCache[r.off] = v
		}
		if n.fill(v); n.complete() {
			break
		}
	}
	return n
}

// decl returns d's declaration file and line, found as names finds names.
func (u *unitConverter) decl(d dieRef) (file, line uint64, ok bool) {
	var haveFile, haveLine, fileOK, lineOK bool
	u.findRecursively(d, func(a *dieAttrs) bool {
		if !haveFile && a.has(slotDeclFile) {
			file, fileOK = a.constant(slotDeclFile)
			haveFile = true
		}
		if !haveLine && a.has(slotDeclLine) {
			line, lineOK = a.constant(slotDeclLine)
			haveLine = true
		}
		return haveFile && haveLine
	})
	return file, line, fileOK && lineOK
}

func (u *unitConverter) shortName(d dieRef) string {
	_, _, s := u.names(d, nil)
	return s
}

// parentDeclContext is LLVM's GetParentDeclContextDIE: the namespace,
// type or function that declares d. budget bounds the DIEs it reads, as
// references can form cycles in corrupt DWARF (LLVM recurses without
// bound).
func (u *unitConverter) parentDeclContext(d dieRef, budget *int) dieRef {
	var a dieAttrs
	if *budget--; *budget < 0 || !d.valid() || !u.decode(d, &a) {
		return dieRef{}
	}
	for _, s := range []int{slotSpec, slotOrigin} {
		if r := u.ref(&a, s); r.valid() {
			if p := u.parentDeclContext(r, budget); p.valid() {
				return p
			}
		}
	}
	if a.tag == tagInlinedSubroutine || d.idx < 0 {
		return dieRef{}
	}
	pi := u.nodes[d.idx].parent
	if pi < 0 {
		return dieRef{}
	}
	p := dieRef{idx: pi, off: u.nodes[pi].off}
	switch u.nodes[pi].tag {
	case tagNamespace, tagStructType, tagUnionType, tagClassType, tagSubprogram:
		return p
	case tagLexicalBlock:
		return u.parentDeclContext(p, budget)
	}
	return dieRef{}
}

// maxDeclContextDIEs bounds the DIEs read to qualify one name: C++
// nesting is a handful of scopes deep.
const maxDeclContextDIEs = 256

// qualifiedName is the name LLVM gives a function DIE: its linkage name if
// it has one, else its name qualified by its enclosing scopes for C and C++.
// a is d decoded.
func (u *unitConverter) qualifiedName(d dieRef, a *dieAttrs) (string, bool) {
	linkage, ok, short := u.names(d, a)
	if ok && linkage != "" {
		return linkage, true
	}
	if short == "" {
		return "", false
	}
	if !qualifiedLanguage(u.lang) {
		return short, true
	}
	if strings.HasPrefix(short, "_Z") && (strings.Contains(short, ".isra.") || strings.Contains(short, ".part.")) {
		return short, true
	}
	name := short
	budget := maxDeclContextDIEs
	for p := u.parentDeclContext(d, &budget); p.valid(); p = u.parentDeclContext(p, &budget) {
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
	switch u.unit.addrSize {
	case 4:
		return a == 0xffffffff
	case 8:
		return a == ^uint64(0)
	}
	return false
}

// ranges returns the ranges of DIE a in DWARF order (in dst), and its
// non-empty ones sorted and merged.
func (u *unitConverter) ranges(a *dieAttrs, dst [][2]uint64) ([][2]uint64, []gsym.Range) {
	rs := dst[:0]
	if low, ok := a.address(slotLowPC); ok && !a.has(slotRanges) {
		high, ok := a.highPC(low)
		if !ok {
			return nil, nil
		}
		rs = append(rs, [2]uint64{low, high})
	} else if rs, ok = u.d.rangesOf(a, &u.cu, rs); !ok {
		return nil, nil
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
	d := dieRef{idx: i, off: u.nodes[i].off}
	var a dieAttrs
	if !u.decode(d, &a) {
		return
	}
	rs, _ := u.ranges(&a, u.rngBuf)
	if len(rs) == 0 {
		return
	}
	u.rngBuf = rs
	name, ok := u.qualifiedName(d, &a)
	if !ok {
		return
	}
	// inline below reuses rngBuf.
	if len(rs) > 1 {
		rs = slices.Clone(rs)
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
	// Numbers past the file table are invalid in every DWARF version, and
	// all are without a line table.
	if u.lt == nil || dwarfFile > uint64(len(u.lt.files)) {
		return 0, false
	}
	if u.fileIdx == nil {
		u.fileIdx = make([]int64, len(u.lt.files)+1)
	}
	switch i := u.fileIdx[dwarfFile]; {
	case i > 0:
		return uint32(i), true
	case i < 0:
		return 0, false
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
		file, line, ok := u.decl(d)
		if !ok {
			return nil
		}
		fi, ok := u.fileIndex(file)
		if !ok {
			return nil
		}
		return []gsym.LineEntry{{Addr: fr.Start, File: fi, Line: uint32(line)}}
	}
	out := u.lineBuf[:0]
	var prevAddr uint64
	for k, ri := range u.rowBuf {
		row := u.lt.rows[ri]
		fi, ok := u.fileIndex(uint64(row.fileNum()))
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
		if row.endSeq() {
			prevAddr = 0
		} else {
			out = append(out, gsym.LineEntry{Addr: addr, File: fi, Line: row.line})
			prevAddr = row.addr
		}
	}
	u.lineBuf = out
	if len(out) == 0 {
		return nil
	}
	return slices.Clone(out)
}

// hasInline reports whether an inlined subroutine lies under DIE i, not
// looking into nested functions.
func (u *unitConverter) hasInline(i int32, depth int) bool {
	switch u.nodes[i].tag {
	case tagInlinedSubroutine:
		return true
	case tagSubprogram:
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
	switch u.nodes[i].tag {
	case tagInlinedSubroutine:
		d := dieRef{idx: i, off: u.nodes[i].off}
		var a dieAttrs
		if !u.decode(d, &a) {
			return
		}
		var all []gsym.Range
		u.rngBuf, all = u.ranges(&a, u.rngBuf)
		// all is sorted and merged, and so is any subset of it.
		var n gsym.InlineInfo
		n.Ranges = slices.DeleteFunc(all, func(r gsym.Range) bool { return !gsym.RangesContainRange(parent.Ranges, r) })
		if len(n.Ranges) == 0 {
			return
		}
		n.Name, _ = u.qualifiedName(d, &a)
		if cf, ok := a.constant(slotCallFile); ok {
			fi, ok := u.fileIndex(cf)
			if !ok {
				return
			}
			n.CallFile = fi
		}
		if cl, ok := a.constant(slotCallLine); ok {
			n.CallLine = uint32(cl)
		}
		for c := u.nodes[i].firstChild; c >= 0; c = u.nodes[c].next {
			u.inline(c, depth+1, &n)
		}
		parent.Children = append(parent.Children, n)
	case tagSubprogram, tagLexicalBlock:
		for c := u.nodes[i].firstChild; c >= 0; c = u.nodes[c].next {
			u.inline(c, depth+1, parent)
		}
	}
}
