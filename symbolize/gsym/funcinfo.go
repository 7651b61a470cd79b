package gsym

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
)

// record is a FunctionInfo decoded into the Reader's internal form, its
// strings pointing into the file. Lookups keep hot ones in a cache.
type record struct {
	index       int // in the address table: the cache's tag
	start, size uint64
	name        string      // points into the file
	lines       []LineEntry // nil when the function has no line table
	linesSorted bool
	inline      *inlineNodes
	// linesAt and inlineAt are the chunks' offsets, for errors.
	linesAt, inlineAt uint64
	callSites         []CallSite
	hasCalls          bool
	merged            []byte // the MergedFunctionsInfo chunk, decoded on demand
	mergedOff         uint64
	// unknownType is the first chunk type this reader does not know and
	// unknownAt its offset: lookups skip such chunks, full decodes fail.
	unknownType InfoType
	unknownAt   uint64
}

// decodeRecord decodes the record in x for a function starting at start.
func (r *Reader) decodeRecord(x *extractor, start uint64) (*record, error) {
	rec := &record{start: start}
	rec.size = uint64(x.u32("FunctionInfo Size"))
	nameAt := x.base + uint64(x.off)
	nameOff := x.uint(r.strp, "FunctionInfo Name")
	if x.err != nil {
		return nil, x.err
	}
	rec.name = r.String(nameOff)
	if nameOff == 0 {
		return nil, formatErr(nameAt, "FunctionInfo Name", "invalid FunctionInfo Name value 0")
	}
	for {
		typAt := x.base + uint64(x.off)
		typ, cx := x.chunk()
		if x.err != nil {
			return nil, x.err
		}
		var err error
		switch typ {
		case InfoEndOfList:
			return rec, nil
		case InfoLineTable:
			rec.linesAt = cx.base
			if rec.lines, err = decodeLines(cx, start); err == nil {
				rec.linesSorted = slices.IsSortedFunc(rec.lines, func(a, b LineEntry) int { return cmp.Compare(a.Addr, b.Addr) })
			}
		case InfoInline:
			rec.inlineAt = cx.base
			rec.inline, err = r.decodeInline(&cx, start)
		case InfoMergedFunctions:
			rec.merged, rec.mergedOff = cx.b, cx.base
		case InfoCallSites:
			rec.callSites, err = r.decodeCallSites(cx)
			rec.hasCalls = true
		default:
			if rec.unknownAt == 0 {
				rec.unknownType, rec.unknownAt = typ, typAt
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// chunk reads the next chunk of a FunctionInfo's chunk list: its type
// and its data. A chunk whose header and data lie within x, as all but a
// damaged one do, is read with one bounds check.
func (x *extractor) chunk() (InfoType, extractor) {
	if i := x.off; len(x.b)-i >= 8 {
		var typ, n uint32
		if x.le {
			typ, n = binary.LittleEndian.Uint32(x.b[i:]), binary.LittleEndian.Uint32(x.b[i+4:])
		} else {
			typ, n = binary.BigEndian.Uint32(x.b[i:]), binary.BigEndian.Uint32(x.b[i+4:])
		}
		if uint64(n) <= uint64(len(x.b)-i-8) {
			x.off = i + 8 + int(n)
			return InfoType(typ), extractor{b: x.b[i+8 : x.off], le: x.le, base: x.base + uint64(i+8)}
		}
	}
	typ := InfoType(x.u32("FunctionInfo InfoType"))
	n := x.u32("FunctionInfo InfoLength")
	at := x.off
	data := x.take(int(n), "FunctionInfo InfoData")
	return typ, extractor{b: data, le: x.le, base: x.base + uint64(at)}
}

// FunctionInfo decodes function i fully, for dumps and re-encoding. Unlike
// a lookup, it rejects unknown chunk types. Its strings are copies.
func (r *Reader) FunctionInfo(i int) (FunctionInfo, error) {
	if i < 0 || i >= int(r.hdr.NumAddresses) {
		return FunctionInfo{}, formatErr(0, "AddrOffsets", "invalid address index %d", i)
	}
	x, start, err := r.functionData(i)
	if err != nil {
		return FunctionInfo{}, err
	}
	return r.decodeFunction(&x, start, 0)
}

// maxMergedDepth bounds MergedFunctionsInfo records nested in each other.
const maxMergedDepth = 8

func (r *Reader) decodeFunction(x *extractor, start uint64, depth int) (FunctionInfo, error) {
	rec, err := r.decodeRecord(x, start)
	if err != nil {
		return FunctionInfo{}, err
	}
	if rec.unknownAt != 0 {
		return FunctionInfo{}, formatErr(rec.unknownAt, "FunctionInfo InfoType", "unsupported InfoType %d", uint32(rec.unknownType))
	}
	f := FunctionInfo{
		Range:     Range{start, start + rec.size},
		Name:      strings.Clone(rec.name),
		Lines:     rec.lines,
		CallSites: rec.callSites,
		hasCalls:  rec.hasCalls,
	}
	if rec.inline != nil {
		t := r.inlineTree(rec.inline, 0)
		f.Inline = &t
	}
	if rec.merged != nil {
		mx := extractor{b: rec.merged, le: x.le, base: rec.mergedOff}
		if f.Merged, err = r.decodeMerged(mx, start, depth); err != nil {
			return FunctionInfo{}, err
		}
	}
	return f, nil
}

func (r *Reader) decodeMerged(x extractor, start uint64, depth int) ([]FunctionInfo, error) {
	if depth >= maxMergedDepth {
		return nil, formatErr(x.base, "MergedFunctionsInfo", "nested too deep")
	}
	count := x.u32("MergedFunctionsInfo Count")
	var fs []FunctionInfo
	for i := uint32(0); i < count && x.err == nil; i++ {
		n := x.u32("MergedFunctionsInfo FnLength")
		off := x.off
		b := x.take(int(n), "MergedFunctionsInfo FunctionInfo")
		if x.err != nil {
			break
		}
		fx := extractor{b: b, le: x.le, base: x.base + uint64(off)}
		f, err := r.decodeFunction(&fx, start, depth+1)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	if x.err != nil {
		return nil, x.err
	}
	return fs, nil
}

func (r *Reader) decodeCallSites(x extractor) ([]CallSite, error) {
	count := x.u32("CallSiteInfo NumCallSites")
	sites := []CallSite{}
	for i := uint32(0); i < count && x.err == nil; i++ {
		var cs CallSite
		cs.ReturnOffset = x.u64("CallSiteInfo ReturnOffset")
		cs.Flags = x.u8("CallSiteInfo Flags")
		nre := x.u32("CallSiteInfo NumRegex")
		for j := uint32(0); j < nre && x.err == nil; j++ {
			cs.MatchRegex = append(cs.MatchRegex, strings.Clone(r.String(x.uint(r.strp, "CallSiteInfo MatchRegex"))))
		}
		sites = append(sites, cs)
	}
	if x.err != nil {
		return nil, x.err
	}
	return sites, nil
}
