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

// maxCacheSlots bounds the decoded functions a Reader keeps. A decoded
// function answers a lookup with two binary searches instead of a walk
// over its encoded line table and inline tree; a profile hits its hot
// functions again and again. Decoded records take a few times the bytes of
// their encoding, so even a cache holding every function of a large
// binary stays within tens of megabytes.
const maxCacheSlots = 1 << 16

// recordCache is a direct-mapped cache of decoded records, safe for
// concurrent lookups without locks.
type recordCache struct {
	slots []atomic.Pointer[cachedRecord]
}

func newRecordCache(functions int) *recordCache {
	n := 64
	for n < functions && n < maxCacheSlots {
		n *= 2
	}
	return &recordCache{slots: make([]atomic.Pointer[cachedRecord], n)}
}

type cachedRecord struct {
	index int
	rec   *record
}

// Lookup resolves a file virtual address (a runtime address minus the load
// bias). An address no function covers gives an error matching ErrNotFound.
func (r *Reader) Lookup(addr uint64) (LookupResult, error) {
	var res LookupResult
	err := r.LookupInto(&res, addr)
	return res, err
}

// LookupInto is Lookup reusing res's Locations storage, so a caller doing
// many lookups allocates nothing once the functions it hits are cached.
func (r *Reader) LookupInto(res *LookupResult, addr uint64) error {
	*res = LookupResult{Addr: addr, Locations: res.Locations[:0]}
	i, ok := r.findIndex(addr)
	if !ok {
		return &AddressError{Addr: addr}
	}
	start := r.Address(i)
	for ; i < int(r.hdr.NumAddresses) && r.Address(i) == start; i++ {
		off := r.infoOffset(i)
		if off >= r.infoEnd || off < r.infoBase || r.infoEnd-off < 4 {
			return formatErr(off, "AddrInfoOffsets", "invalid address info offset 0x%x for function %d", off, i)
		}
		size := uint64(r.u32(r.data[off:]))
		if size == 0 || (addr >= start && addr-start < size) {
			rec, err := r.record(i)
			if err != nil {
				return err
			}
			return r.lookupRecord(res, rec, addr)
		}
	}
	return &AddressError{Addr: addr}
}

// fileStr is a file table entry with its strings resolved.
type fileStr struct {
	dir, base string
	valid     bool // Dir or Base is set: entry 0 and {0, 0} are not
}

// fileStrings returns file table entry i, resolving the whole table on
// first use so lookups never scan the string table for file names.
func (r *Reader) fileStrings(i uint32) (fileStr, bool) {
	r.filesOnce.Do(func() {
		r.fileStrs = make([]fileStr, r.numFiles)
		for j := range r.fileStrs {
			d, b, _ := r.file(uint32(j))
			r.fileStrs[j] = fileStr{r.String(d), r.String(b), d != 0 || b != 0}
		}
	})
	if i >= uint32(len(r.fileStrs)) {
		return fileStr{}, false
	}
	return r.fileStrs[i], true
}

// record returns function i decoded, from the cache when it is there.
func (r *Reader) record(i int) (*record, error) {
	slot := &r.cache.slots[i&(len(r.cache.slots)-1)]
	if c := slot.Load(); c != nil && c.index == i {
		return c.rec, nil
	}
	x, start, err := r.functionData(i)
	if err != nil {
		return nil, err
	}
	rec, err := r.decodeRecord(&x, start)
	if err != nil {
		return nil, err
	}
	slot.Store(&cachedRecord{index: i, rec: rec})
	return rec, nil
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
		return &AddressError{Addr: addr, InLineTable: true}
	}
	f, ok := r.fileStrings(row.File)
	if !ok {
		return formatErr(0, "LineTable file", "failed to extract file[%d]", row.File)
	}
	loc.Dir, loc.Base, loc.Line = f.dir, f.base, row.Line
	res.Locations = append(res.Locations, loc)
	if rec.inline != nil {
		var err error
		if res.Locations, _, err = r.lookupInline(rec.inline, 0, addr, res.Locations); err != nil {
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
