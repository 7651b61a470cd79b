package gsym

import "sync/atomic"

// SourceLocation is one level of an address's inline stack.
type SourceLocation struct {
	// Name is the function's name as stored (usually the mangled name).
	Name string
	// Dir and Base are the source file's directory and base name; both are
	// empty when the function has no line table.
	Dir, Base string
	Line      uint32
	// Offset is the distance of the address from the start of the
	// function, or of the inlined call's first range.
	Offset uint64
}

// LookupResult is what a GSYM file says about one address.
type LookupResult struct {
	Addr      uint64
	FuncRange Range
	FuncName  string
	// Locations is the inline stack, innermost function first; the last
	// entry is the function that contains the address in the binary.
	Locations []SourceLocation
	// CallSiteRegexes are the call-site patterns recorded for a return
	// address equal to Addr.
	CallSiteRegexes []string
}

// A Reader answers a lookup in one of two ways. Streaming decodes only
// what the answer needs straight from the mapped file, as LLVM's
// FunctionInfo::lookup does: the line table up to the first row past the
// address and the one path of the inline tree that covers it; it
// allocates nothing. A decoded record (rows and inline nodes) answers
// with two binary searches instead, two to five times faster, but
// decoding one, with its allocations and their later collection, costs
// some ten streamed lookups. So a function is streamed until it has been
// looked up promoteAfter times, then decoded into a cache: a profile's hot
// functions are decoded once, and a pass over many functions each looked
// up a few times (`sprof gsym lookup`, where streaming alone made 100,000
// lookups in the go command 40% cheaper than decoding on the first)
// allocates almost nothing.
const promoteAfter = 32

// maxCacheSlots bounds the decoded functions a Reader keeps. Decoded
// records take a few times the bytes of their encoding, so even a cache
// holding every function of a large binary stays within tens of
// megabytes.
const maxCacheSlots = 1 << 16

// recordCache is a direct-mapped cache of decoded records with a lookup
// counter per slot, safe for concurrent lookups without locks. Functions
// sharing a slot share its counter: a count is a hint, not an account.
type recordCache struct {
	slots []cacheSlot
	// promote is the count at which a function is decoded: promoteAfter,
	// or another value in tests.
	promote uint32
}

type cacheSlot struct {
	rec  atomic.Pointer[record]
	hits atomic.Uint32
}

func newRecordCache(functions int) recordCache {
	n := 64
	for n < functions && n < maxCacheSlots {
		n *= 2
	}
	return recordCache{slots: make([]cacheSlot, n), promote: promoteAfter}
}

// Lookup resolves a file virtual address (a runtime address minus the load
// bias). An address no function covers gives ErrNotFound, one its
// function's line table has no row for ErrNotInLineTable.
func (r *Reader) Lookup(addr uint64) (LookupResult, error) {
	var res LookupResult
	err := r.LookupInto(&res, addr)
	return res, err
}

// LookupInto is Lookup reusing res's Locations storage, so a caller doing
// many lookups allocates nothing but the decoded records of its hot
// functions (see promoteAfter).
func (r *Reader) LookupInto(res *LookupResult, addr uint64) error {
	*res = LookupResult{Addr: addr, Locations: res.Locations[:0]}
	i, ok := r.findIndex(addr)
	if !ok {
		return ErrNotFound
	}
	startOff := r.addrOffset(i)
	start := r.hdr.BaseAddress + startOff
	for n := int(r.hdr.NumAddresses); i < n && r.addrOffset(i) == startOff; i++ {
		slot := &r.cache.slots[i&(len(r.cache.slots)-1)]
		if rec := slot.rec.Load(); rec != nil && rec.index == i {
			if rec.size == 0 || addr-start < rec.size {
				return r.lookupRecord(res, rec, addr)
			}
			continue
		}
		off := r.infoOffset(i)
		if off >= r.infoEnd || off < r.infoBase || r.infoEnd-off < 4 {
			return formatErr(off, "AddrInfoOffsets", "invalid address info offset 0x%x for function %d", off, i)
		}
		if size := uint64(r.u32(r.data[off:])); size != 0 && addr-start >= size {
			continue
		}
		x := r.extractor(off, r.infoEnd)
		if slot.hits.Add(1) < r.cache.promote {
			return r.lookupFunction(res, &x, start, addr)
		}
		slot.hits.Store(0)
		rec, err := r.decodeRecord(&x, start)
		if err != nil {
			return err
		}
		rec.index = i
		slot.rec.Store(rec)
		return r.lookupRecord(res, rec, addr)
	}
	return ErrNotFound
}

// lookupFunction answers a lookup by streaming the record in x, following
// LLVM's FunctionInfo::lookup: call sites, then the line table, then the
// inline tree. Unknown chunk types are skipped. lookupRecord gives the
// same answers from a decoded record.
func (r *Reader) lookupFunction(res *LookupResult, x *extractor, start, addr uint64) error {
	f, err := r.streamFunction(x, start)
	if err != nil {
		return err
	}
	lines := f.lineCursor()
	return r.answerStreamed(res, &f, &lines, addr)
}

// streamedFunc is what a lookup reads of an encoded record before it
// looks at the address: the header and where the chunks lie. A batch
// reads it once for all the addresses in the function.
type streamedFunc struct {
	start, size   uint64
	name          string
	chunks        extractor // the chunk list, for the call sites
	lines, inline extractor
	hasLines      bool
	hasInline     bool
	hasCalls      bool
	// nodes, when not nil, is the inline tree decoded (a batch decodes it
	// once for all its addresses in the function).
	nodes *inlineNodes
	// chunkErr is an error in the chunk list, which lookups report after
	// the call sites of the chunks before it, as LLVM's does.
	chunkErr *FormatError
}

// streamFunction reads the header and chunk list of the record in x.
func (r *Reader) streamFunction(x *extractor, start uint64) (streamedFunc, error) {
	f := streamedFunc{start: start}
	f.size = uint64(x.u32("FunctionInfo Size"))
	nameAt := x.base + uint64(x.off)
	nameOff := x.uint(r.strp, "FunctionInfo Name")
	if x.err != nil {
		return f, x.err
	}
	if nameOff == 0 {
		return f, formatErr(nameAt, "FunctionInfo Name", "invalid FunctionInfo Name value 0")
	}
	f.name = r.String(nameOff)
	f.chunks = *x
	for done := false; !done; {
		typ, cx := x.chunk()
		if x.err != nil {
			f.chunkErr = x.err
			break
		}
		switch typ {
		case InfoEndOfList:
			done = true
		case InfoLineTable:
			f.lines, f.hasLines = cx, true
		case InfoInline:
			f.inline, f.hasInline = cx, true
		case InfoCallSites:
			f.hasCalls = true
		}
	}
	return f, nil
}

// lineCursor returns a cursor over f's line table (an empty one when f
// has none).
func (f *streamedFunc) lineCursor() lineCursor {
	if !f.hasLines {
		return lineCursor{}
	}
	return lineCursor{it: newLineIter(f.lines, f.start)}
}

// answerStreamed answers the lookup of addr in the streamed function f;
// lines is f's line cursor, at or before addr.
func (r *Reader) answerStreamed(res *LookupResult, f *streamedFunc, lines *lineCursor, addr uint64) error {
	res.FuncRange = Range{f.start, f.start + f.size}
	res.FuncName = f.name
	if f.hasCalls {
		var err error
		if res.CallSiteRegexes, err = r.chunkCallSites(f.chunks, addr-f.start); err != nil {
			return err
		}
	}
	if f.chunkErr != nil {
		return f.chunkErr
	}
	loc := SourceLocation{Name: res.FuncName, Offset: addr - f.start}
	if !f.hasLines {
		res.Locations = append(res.Locations, loc)
		return nil
	}
	row, err := lines.find(addr)
	if err != nil {
		return err
	}
	fs := r.fileStrings(row.File)
	if fs == nil {
		return formatErr(f.lines.base, "LineTable file", "failed to extract file[%d]", row.File)
	}
	loc.Dir, loc.Base, loc.Line = fs.dir, fs.base, row.Line
	res.Locations = append(res.Locations, loc)
	if !f.hasInline {
		return nil
	}
	if f.nodes != nil {
		res.Locations, err = r.lookupNodes(f.nodes, addr, f.inline.base, res.Locations)
		return err
	}
	inline := f.inline
	st, err := r.streamInline(&inline, f.start, addr, 0, false, &res.Locations)
	if err == nil && st == inlineEnd {
		err = formatErr(inline.base, "InlineInfo", "no address ranges")
	}
	return err
}

// chunkCallSites returns the call-site patterns for return offset retOff
// from the CallSiteInfo chunks of the chunk list x, the last chunk's
// answer winning, up to the first error.
func (r *Reader) chunkCallSites(x extractor, retOff uint64) ([]string, error) {
	var regexes []string
	for {
		typ, cx := x.chunk()
		if x.err != nil || typ == InfoEndOfList {
			return regexes, nil
		}
		if typ == InfoCallSites {
			var err error
			if regexes, err = r.callSiteRegexes(cx, retOff); err != nil {
				return nil, err
			}
		}
	}
}

// lineCursor walks an encoded line table for addresses in increasing
// order, as LLVM's LineTable::lookup walks it for each: an address's row
// is the last one before the first row above it. Rows with file 0 are
// not valid.
type lineCursor struct {
	it      lineIter
	pending bool // it.row is read and not yet taken: it lies above the last address
	done    bool
	last    LineEntry
	found   bool
}

// find returns the row for addr, which is at or above the addresses
// asked for before.
func (c *lineCursor) find(addr uint64) (LineEntry, error) {
	if !c.done {
		c.advance(addr)
	}
	if c.done && c.it.x.err != nil {
		return LineEntry{}, c.it.x.err
	}
	if !c.found || c.last.File == 0 {
		return LineEntry{}, ErrNotInLineTable
	}
	return c.last, nil
}

// advance takes the rows up to addr. The common opcodes (special ones,
// and the others with an operand of one or two bytes: in a Go binary
// 40% of the AdvanceLine and SetFile operands take two bytes, and
// nearly none three) are decoded here with the state in locals, the
// rest by lineIter.next.
func (c *lineCursor) advance(addr uint64) {
	it := &c.it
	if c.pending {
		if it.row.Addr > addr {
			return
		}
		c.last, c.found, c.pending = it.row, true, false
	}
	if it.x.err != nil {
		c.done = true
		return
	}
	b, off, row, last, found := it.x.b, it.x.off, it.row, c.last, c.found
	for {
		// Three bytes hold an opcode and a two-byte operand; near the
		// table's end lineIter.next decodes.
		if off+2 < len(b) {
			op := b[off]
			if op >= firstSpecial {
				it.special(&row, op)
				off++
				goto emitted
			}
			v, n, bits := uint64(b[off+1]), 2, uint(57)
			if v >= 0x80 {
				if b[off+2] >= 0x80 {
					goto slow
				}
				v, n, bits = v&0x7f|uint64(b[off+2])<<7, 3, 50
			}
			switch op {
			case lteAdvancePC:
				row.Addr += v
				off += n
				goto emitted
			case lteAdvanceLine:
				row.Line += uint32(int64(v) << bits >> bits)
				off += n
				continue
			case lteSetFile:
				row.File = uint32(v)
				off += n
				continue
			}
		}
	slow:
		it.x.off, it.row = off, row
		if !it.next() {
			c.last, c.found, c.done = last, found, true
			return
		}
		off, row = it.x.off, it.row
	emitted:
		if row.Addr > addr {
			it.x.off, it.row, c.pending = off, row, true
			c.last, c.found = last, found
			return
		}
		last, found = row, true
	}
}

// callSiteRegexes returns the patterns of the call site in the encoded
// CallSiteInfo chunk x whose return offset is retOff.
func (r *Reader) callSiteRegexes(x extractor, retOff uint64) ([]string, error) {
	count := x.u32("CallSiteInfo NumCallSites")
	for i := uint32(0); i < count && x.err == nil; i++ {
		ret := x.u64("CallSiteInfo ReturnOffset")
		x.u8("CallSiteInfo Flags")
		nre := x.u32("CallSiteInfo NumRegex")
		if ret != retOff {
			x.take(int(nre)*r.strp, "CallSiteInfo MatchRegex")
			continue
		}
		var dst []string
		for j := uint32(0); j < nre && x.err == nil; j++ {
			dst = append(dst, r.String(x.uint(r.strp, "CallSiteInfo MatchRegex")))
		}
		if x.err != nil {
			break
		}
		return dst, nil
	}
	if x.err != nil {
		return nil, x.err
	}
	return nil, nil
}

// fileStr is a file table entry with its strings resolved.
type fileStr struct {
	dir, base string
	valid     bool // Dir or Base is set: entry 0 and {0, 0} are not
}

// fileStrings returns file table entry i, nil when there is none. The
// whole table's strings are resolved on first use, so lookups never scan
// the string table for file names; after that this is a load and a
// bounds check, inlined.
func (r *Reader) fileStrings(i uint32) *fileStr {
	if files := r.fileStrs.Load(); files != nil && i < uint32(len(*files)) {
		return &(*files)[i]
	}
	return r.resolveFile(i)
}

// resolveFile is fileStrings' slow path: it resolves the strings of the
// whole file table, once.
func (r *Reader) resolveFile(i uint32) *fileStr {
	r.filesOnce.Do(func() {
		files := make([]fileStr, r.numFiles)
		for j := range files {
			d, b, _ := r.file(uint32(j))
			files[j] = fileStr{r.String(d), r.String(b), d != 0 || b != 0}
		}
		r.fileStrs.Store(&files)
	})
	if files := r.fileStrs.Load(); files != nil && i < uint32(len(*files)) {
		return &(*files)[i]
	}
	return nil
}

// lookupRecord answers a lookup from a decoded record, following LLVM's
// FunctionInfo::lookup.
func (r *Reader) lookupRecord(res *LookupResult, rec *record, addr uint64) error {
	res.FuncRange = Range{rec.start, rec.start + rec.size}
	res.FuncName = rec.name
	for _, cs := range rec.callSites {
		if cs.ReturnOffset == addr-rec.start {
			res.CallSiteRegexes = cs.MatchRegex
			break
		}
	}
	loc := SourceLocation{Name: res.FuncName, Offset: addr - rec.start}
	if rec.lines == nil {
		res.Locations = append(res.Locations, loc)
		return nil
	}
	row, ok := rec.lineFor(addr)
	if !ok {
		return ErrNotInLineTable
	}
	f := r.fileStrings(row.File)
	if f == nil {
		return formatErr(rec.linesAt, "LineTable file", "failed to extract file[%d]", row.File)
	}
	loc.Dir, loc.Base, loc.Line = f.dir, f.base, row.Line
	res.Locations = append(res.Locations, loc)
	if rec.inline != nil {
		var err error
		if res.Locations, err = r.lookupNodes(rec.inline, addr, rec.inlineAt, res.Locations); err != nil {
			return err
		}
	}
	return nil
}

// lineFor returns the row LLVM's line-table walk picks for addr: the last
// row before the first one above addr. Rows with file 0 are not valid.
func (rec *record) lineFor(addr uint64) (LineEntry, bool) {
	var k int // index of the first row above addr
	if rec.linesSorted {
		lo, hi := 0, len(rec.lines)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if rec.lines[m].Addr > addr {
				hi = m
			} else {
				lo = m + 1
			}
		}
		k = lo
	} else {
		for k < len(rec.lines) && rec.lines[k].Addr <= addr {
			k++
		}
	}
	if k == 0 || rec.lines[k-1].File == 0 {
		return LineEntry{}, false
	}
	return rec.lines[k-1], true
}
