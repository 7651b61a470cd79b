package gsym

import "strings"

// FunctionInfo decodes function i fully, for dumps and re-encoding. Unlike
// a lookup, it rejects unknown chunk types.
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

const maxMergedDepth = 8

func (r *Reader) decodeFunction(x *extractor, start uint64, depth int) (FunctionInfo, error) {
	var f FunctionInfo
	size := uint64(x.u32("FunctionInfo Size"))
	f.Range = Range{start, start + size}
	nameOff := x.uint(r.strp, "FunctionInfo Name")
	if x.err != nil {
		return f, x.err
	}
	if nameOff == 0 {
		return f, formatErr(x.base+4, "FunctionInfo Name", "invalid FunctionInfo Name value 0")
	}
	f.Name = strings.Clone(r.String(nameOff))
	for {
		typOff := x.base + uint64(x.off)
		typ := InfoType(x.u32("FunctionInfo InfoType"))
		n := x.u32("FunctionInfo InfoLength")
		chunkOff := x.off
		chunk := x.take(int(n), "FunctionInfo InfoData")
		if x.err != nil {
			return f, x.err
		}
		cx := extractor{b: chunk, order: x.order, base: x.base + uint64(chunkOff)}
		var err error
		switch typ {
		case InfoEndOfList:
			return f, nil
		case InfoLineTable:
			f.Lines, err = decodeLines(cx, start)
		case InfoInline:
			n, ok := inlineCodec{r}.decode(&cx, start, 0)
			if cx.err != nil {
				err = cx.err
			} else if !ok {
				err = formatErr(cx.base, "InlineInfo", "no address ranges")
			} else {
				f.Inline = &n
			}
		case InfoMergedFunctions:
			f.Merged, err = r.decodeMerged(cx, start, depth)
		case InfoCallSites:
			f.CallSites, err = r.decodeCallSites(cx)
			f.hasCalls = true
		default:
			err = formatErr(typOff, "FunctionInfo InfoType", "unsupported InfoType %d", uint32(typ))
		}
		if err != nil {
			return f, err
		}
	}
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
		fx := extractor{b: b, order: x.order, base: x.base + uint64(off)}
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
