package gsym

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

// Lookup resolves a file virtual address (a runtime address minus the load
// bias). An address no function covers gives an error matching ErrNotFound.
func (r *Reader) Lookup(addr uint64) (LookupResult, error) {
	var res LookupResult
	err := r.LookupInto(&res, addr)
	return res, err
}

// LookupInto is Lookup reusing res's Locations storage, so a caller doing
// many lookups allocates nothing.
func (r *Reader) LookupInto(res *LookupResult, addr uint64) error {
	*res = LookupResult{Addr: addr, Locations: res.Locations[:0]}
	i, ok := r.findIndex(addr)
	if !ok {
		return &AddressError{Addr: addr}
	}
	start := r.Address(i)
	for ; i < int(r.hdr.NumAddresses) && r.Address(i) == start; i++ {
		x, _, err := r.functionData(i)
		if err != nil {
			return err
		}
		size := uint64(x.u32("FunctionInfo Size"))
		if x.err != nil {
			return x.err
		}
		if size == 0 || (addr >= start && addr-start < size) {
			return r.lookupFunction(res, x, start, size, addr)
		}
	}
	return &AddressError{Addr: addr}
}

// lookupFunction finishes a lookup in the record x, positioned after Size.
func (r *Reader) lookupFunction(res *LookupResult, x extractor, start, size, addr uint64) error {
	res.FuncRange = Range{start, start + size}
	nameOff := x.uint(r.strp, "FunctionInfo Name")
	if x.err != nil {
		return x.err
	}
	if nameOff == 0 {
		return formatErr(x.base+4, "FunctionInfo Name", "invalid FunctionInfo Name value 0")
	}
	res.FuncName = r.String(nameOff)
	var line LineEntry
	haveLine := false
	var inline extractor
	haveInline := false
	for {
		typ := InfoType(x.u32("FunctionInfo InfoType"))
		n := x.u32("FunctionInfo InfoLength")
		chunkOff := x.off
		chunk := x.take(int(n), "FunctionInfo InfoData")
		if x.err != nil {
			return x.err
		}
		cx := extractor{b: chunk, order: x.order, base: x.base + uint64(chunkOff)}
		switch typ {
		case InfoEndOfList:
			goto done
		case InfoLineTable:
			var err error
			if line, err = lookupLine(cx, start, addr); err != nil {
				return err
			}
			haveLine = true
		case InfoInline:
			inline, haveInline = cx, true
		case InfoCallSites:
			if err := r.lookupCallSite(res, cx, addr-start); err != nil {
				return err
			}
		}
	}
done:
	loc := SourceLocation{Name: res.FuncName, Offset: addr - start}
	if !haveLine {
		res.Locations = append(res.Locations, loc)
		return nil
	}
	dir, base, ok := r.file(line.File)
	if !ok {
		return formatErr(0, "LineTable file", "failed to extract file[%d]", line.File)
	}
	loc.Dir, loc.Base, loc.Line = r.String(dir), r.String(base), line.Line
	res.Locations = append(res.Locations, loc)
	if haveInline {
		res.Locations, _ = inlineCodec{r}.lookup(&inline, start, addr, res.Locations, 0)
		if inline.err != nil {
			return inline.err
		}
	}
	return nil
}

func (r *Reader) lookupCallSite(res *LookupResult, x extractor, retOff uint64) error {
	sites, err := r.decodeCallSites(x)
	if err != nil {
		return err
	}
	for _, cs := range sites {
		if cs.ReturnOffset == retOff {
			res.CallSiteRegexes = cs.MatchRegex
			break
		}
	}
	return nil
}
