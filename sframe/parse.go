package sframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// Table is a parsed SFrame section: its header, its valid FDEs sorted by
// start address, and their rows. A Table is immutable after Parse and safe
// for concurrent use.
type Table struct {
	Header Header
	// Addr is the address of the section's first byte (sh_addr), the
	// base of the FDE start addresses.
	Addr uint64
	// BigEndian is the byte order of the section (and of its target).
	BigEndian bool
	// Errors lists the FDEs left out of the table and why, one
	// *FormatError each.
	Errors []error

	arch Arch
	fdes []FDE
	// The rows, compactly: row i starts rowStart[i] bytes into its
	// function (or repeated block) and has the rule rules[rowRule[i]], a
	// Row whose Start is 0. A table has few distinct rules (libLLVM's 1.2
	// million rows, 728), so a row costs 8 bytes instead of a Row's 36.
	rowStart []uint32
	rowRule  []uint32
	rules    []Row
	// interned interns the rules while the table is made; nil after.
	interned *interner
	// starts holds fdes[i].Start, so that a lookup's binary search
	// touches 8 bytes per step instead of a whole FDE; coarse holds
	// every coarseStep-th of them, small enough to stay in cache, so
	// that the search in starts is over one block of cache lines.
	starts []uint64
	coarse []uint64
}

// coarseStep is the block size of the two-level lookup index.
const coarseStep = 32

// Arch returns the architecture of the section's ABI.
func (t *Table) Arch() Arch { return t.arch }

// FDEs returns the valid FDEs sorted by start address. The slice belongs
// to the table and must not be modified.
func (t *Table) FDEs() []FDE { return t.fdes }

// Unsupported counts the FDEs left out because they use constructs this
// package does not model (errors wrapping ErrUnsupported).
func (t *Table) Unsupported() int {
	n := 0
	for _, err := range t.Errors {
		if errors.Is(err, ErrUnsupported) {
			n++
		}
	}
	return n
}

// Rows returns the rows of f, which must come from t.FDEs, in a new
// slice.
func (t *Table) Rows(f *FDE) []Row {
	return t.AppendRows(make([]Row, 0, f.nrows), f)
}

// AppendRows appends the rows of f, which must come from t.FDEs, to dst:
// a caller that goes through every function reuses one slice.
func (t *Table) AppendRows(dst []Row, f *FDE) []Row {
	for k := range f.nrows {
		dst = append(dst, t.row(f.rows+k))
	}
	return dst
}

// NumRows returns the number of rows of the table's FDEs.
func (t *Table) NumRows() int { return len(t.rowStart) }

// MemSize returns the bytes the table's FDEs, rows and lookup index take
// in memory.
func (t *Table) MemSize() int64 {
	var f FDE
	var r Row
	return int64(len(t.fdes))*int64(unsafe.Sizeof(f)) +
		int64(len(t.rowStart))*(4+4) + int64(len(t.rules))*int64(unsafe.Sizeof(r)) +
		int64(len(t.starts)+len(t.coarse))*8
}

// row returns row i of the table.
func (t *Table) row(i uint32) Row {
	r := t.rules[t.rowRule[i]]
	r.Start = t.rowStart[i]
	return r
}

// rule returns the rule of row i of the table.
func (t *Table) rule(i int) *Row { return &t.rules[t.rowRule[i]] }

// addRow appends a row to the table, interning its rule.
func (t *Table) addRow(r Row) {
	start := r.Start
	r.Start = 0
	t.rowStart = append(t.rowStart, start)
	t.rowRule = append(t.rowRule, t.interned.id(t, r))
}

// interner gives each distinct rule of a table one index in its rules.
// A table has few distinct rules and rows repeat them, so a small
// direct-mapped memo, keyed by a cheap mix of the fields that differ
// between rules, answers most rows before the map, whose hash of a whole
// 36-byte Row took 80% of parsing libLLVM's 1.2 million rows.
type interner struct {
	ids  map[Row]uint32
	memo [512]uint32 // a rule's index + 1, 0 for none
}

func newInterner() *interner { return &interner{ids: map[Row]uint32{}} }

func (in *interner) id(t *Table, r Row) uint32 {
	h := uint32(r.Info) ^ uint32(r.CFA.Off)*0x9e3779b1 ^ uint32(r.RA.Off)*0x85ebca6b ^ uint32(r.FP.Off)*0xc2b2ae35 ^
		uint32(r.CFA.Reg)<<8 ^ uint32(r.CFA.Kind)<<16 ^ uint32(r.RA.Kind)<<20 ^ uint32(r.FP.Kind)<<24
	slot := &in.memo[(h*0x9e3779b1)>>23]
	if m := *slot; m != 0 && t.rules[m-1] == r {
		return m - 1
	}
	id, ok := in.ids[r]
	if !ok {
		id = uint32(len(t.rules))
		t.rules = append(t.rules, r)
		in.ids[r] = id
	}
	*slot = id + 1
	return id
}

// truncateRows drops the rows from n on (their rules stay).
func (t *Table) truncateRows(n uint32) {
	t.rowStart, t.rowRule = t.rowStart[:n], t.rowRule[:n]
}

// parser holds what decoding the FDEs and rows needs.
type parser struct {
	data     []byte
	order    binary.ByteOrder
	t        *Table
	freStart uint64 // section offset of the FRE sub-section
	freEnd   uint64
	// words is scratch space for one row's data words.
	words [15]uint32
}

// Parse parses an SFrame section. data is the whole section and addr the
// address of its first byte (sh_addr or the PT_GNU_SFRAME p_vaddr), which
// the FDE start addresses are relative to.
func Parse(data []byte, addr uint64) (*Table, error) {
	t, err := parse(data, addr)
	if err != nil {
		return nil, err
	}
	t.index()
	return t, nil
}

// index builds the lookup index once the set of FDEs is final.
func (t *Table) index() {
	t.interned = nil
	t.starts = make([]uint64, len(t.fdes))
	t.coarse = make([]uint64, 0, (len(t.fdes)+coarseStep-1)/coarseStep)
	for i := range t.fdes {
		t.starts[i] = t.fdes[i].Start
		if i%coarseStep == 0 {
			t.coarse = append(t.coarse, t.fdes[i].Start)
		}
	}
}

func parse(data []byte, addr uint64) (*Table, error) {
	h, order, err := parseHeader(data)
	if err != nil {
		return nil, err
	}
	p := &parser{data: data, order: order}
	if err := p.checkLayout(&h); err != nil {
		return nil, err
	}
	t := &Table{
		Header:    h,
		Addr:      addr,
		BigEndian: order == binary.BigEndian,
		arch:      h.ABI.Arch(),
		// Both counts are bounded by the section size (checkLayout).
		fdes:     make([]FDE, 0, h.NumFDEs),
		rowStart: make([]uint32, 0, h.NumFREs),
		rowRule:  make([]uint32, 0, h.NumFREs),
		interned: newInterner(),
	}
	p.t = t
	fdeStart := uint64(headerSize) + uint64(h.FDEOff)
	for i := uint32(0); i < h.NumFDEs; i++ {
		off := fdeStart + uint64(i)*h.Version.fdeSize()
		f, err := p.fde(int(i), off)
		if err != nil {
			t.Errors = append(t.Errors, err)
			continue
		}
		t.fdes = append(t.fdes, f)
	}
	if err := t.order(); err != nil {
		return nil, err
	}
	t.dropOverlaps()
	return t, nil
}

func parseHeader(data []byte) (Header, binary.ByteOrder, error) {
	var h Header
	if len(data) < headerSize {
		return h, nil, formatErr(0, "header", "section is %d bytes, shorter than the %d-byte header", len(data), headerSize)
	}
	var order binary.ByteOrder
	switch {
	case binary.LittleEndian.Uint16(data) == magic:
		order = binary.LittleEndian
	case binary.BigEndian.Uint16(data) == magic:
		order = binary.BigEndian
	default:
		return h, nil, formatErr(0, "header.magic", "bad magic %#04x", binary.LittleEndian.Uint16(data))
	}
	h = Header{
		Version:          Version(data[2]),
		Flags:            Flags(data[3]),
		ABI:              ABI(data[4]),
		CFAFixedFPOffset: int8(data[5]),
		CFAFixedRAOffset: int8(data[6]),
		AuxHeaderLen:     data[7],
		NumFDEs:          order.Uint32(data[8:]),
		NumFREs:          order.Uint32(data[12:]),
		FRELen:           order.Uint32(data[16:]),
		FDEOff:           order.Uint32(data[20:]),
		FREOff:           order.Uint32(data[24:]),
	}
	if h.Version < Version1 || h.Version > Version3 {
		return h, nil, unsupportedErr(2, "header.version", "version %d", h.Version)
	}
	if bad := h.Flags &^ h.Version.flagsAllowed(); bad != 0 {
		return h, nil, formatErr(3, "header.flags", "flags %#x not defined for %v", uint8(bad), h.Version)
	}
	switch h.ABI {
	case ABIAArch64LE, ABIAMD64LE:
		if order != binary.LittleEndian {
			return h, nil, formatErr(4, "header.abi_arch", "%v in a big-endian section", h.ABI)
		}
	case ABIAArch64BE:
		if order != binary.BigEndian {
			return h, nil, formatErr(4, "header.abi_arch", "%v in a little-endian section", h.ABI)
		}
	case ABIS390XBE:
		return h, nil, unsupportedErr(4, "header.abi_arch", "%v", h.ABI)
	default:
		return h, nil, formatErr(4, "header.abi_arch", "unknown ABI %d", uint8(h.ABI))
	}
	if h.AuxHeaderLen != 0 {
		// No producer writes one and none defines its content.
		return h, nil, unsupportedErr(7, "header.auxhdr_len", "auxiliary header of %d bytes", h.AuxHeaderLen)
	}
	return h, order, nil
}

// checkLayout checks that the sub-sections lie inside the section, in
// order, and that the counts fit them, so that later allocations sized by
// the counts are bounded by the section's length.
func (p *parser) checkLayout(h *Header) error {
	size := uint64(len(p.data))
	hdrEnd := uint64(headerSize) + uint64(h.AuxHeaderLen)
	fdeStart := hdrEnd + uint64(h.FDEOff)
	fdeEnd := fdeStart + uint64(h.NumFDEs)*h.Version.fdeSize() // < 2^37: no overflow
	p.freStart = hdrEnd + uint64(h.FREOff)
	p.freEnd = p.freStart + uint64(h.FRELen)
	switch {
	case fdeEnd > size && hdrEnd+uint64(h.NumFDEs)*h.Version.fdeSize() <= size:
		// The FDEs would fit right after the header: the offset is wrong.
		return formatErr(20, "header.fdeoff", "%d FDEs from offset %#x end at %#x, past the section's %d bytes", h.NumFDEs, fdeStart, fdeEnd, size)
	case fdeEnd > size:
		return formatErr(8, "header.num_fdes", "%d FDEs from offset %#x end at %#x, past the section's %d bytes", h.NumFDEs, fdeStart, fdeEnd, size)
	case p.freStart > size:
		return formatErr(24, "header.freoff", "FRE sub-section at %#x starts past the section's %d bytes", p.freStart, size)
	case p.freEnd > size:
		return formatErr(16, "header.fre_len", "FRE sub-section [%#x, %#x) ends past the section's %d bytes", p.freStart, p.freEnd, size)
	case fdeEnd > p.freStart:
		return formatErr(24, "header.freoff", "FRE sub-section at %#x overlaps the FDEs ending at %#x", p.freStart, fdeEnd)
	case uint64(h.NumFREs) > uint64(h.FRELen)/2:
		// A row is at least 2 bytes (start and info).
		return formatErr(12, "header.num_fres", "%d rows cannot fit in %d bytes", h.NumFREs, h.FRELen)
	}
	for off := p.freEnd; off < size; off++ {
		if p.data[off] != 0 {
			// lld, mold and old wild concatenate the input sections
			// instead of merging them.
			return formatErr(off, "section", "%d bytes after the FRE sub-section, not padding (concatenated sections?)", size-p.freEnd)
		}
	}
	return nil
}

// fde decodes and validates FDE i at section offset off, appending its
// rows to the table. On error the table's rows are left as they were.
func (p *parser) fde(i int, off uint64) (FDE, error) {
	h := &p.t.Header
	d := p.data[off:]
	f := FDE{Offset: uint32(off)}
	var startVal int64
	var freOff uint32
	var nrows uint64
	// The section offsets of the fields, for errors.
	var sizeAt, freOffAt, nrowsAt, infoAt, repAt uint64
	field := func(name string) string { return fmt.Sprintf("fde[%d].%s", i, name) }
	switch h.Version {
	case Version1, Version2:
		sizeAt, freOffAt, nrowsAt, infoAt, repAt = off+4, off+8, off+12, off+16, off+17
		startVal = int64(int32(p.order.Uint32(d)))
		f.Size = p.order.Uint32(d[4:])
		freOff = p.order.Uint32(d[8:])
		nrows = uint64(p.order.Uint32(d[12:]))
		f.Info = d[16]
		switch {
		case h.Version == Version2:
			f.RepSize = d[17]
		case f.PCMask():
			// V1 has no rep_size field: its PCMASK rows match
			// pc & 0xf, the 16-byte amd64 PLT entry.
			f.RepSize = 16
		}
	default:
		startVal = int64(p.order.Uint64(d))
		f.Size = p.order.Uint32(d[8:])
		freOff = p.order.Uint32(d[12:])
		attr := p.freStart + uint64(freOff)
		sizeAt, freOffAt, nrowsAt, infoAt, repAt = off+8, off+12, attr, attr+2, attr+4
		if attr+attrSize > p.freEnd {
			return f, formatErr(freOffAt, field("fres_off"), "attribute record at %#x past the FRE sub-section end %#x", attr, p.freEnd)
		}
		a := p.data[attr:]
		nrows = uint64(p.order.Uint16(a))
		f.Info = a[2]
		f.Info2 = a[3]
		f.RepSize = a[4]
		freOff += attrSize
		if t := f.Type(); t != FDETypeDefault && t != FDETypeFlex {
			return f, unsupportedErr(attr+3, field("info2"), "FDE type %d", t)
		}
	}
	base := p.t.Addr
	if h.Flags&FlagFDEFuncStartPCRel != 0 {
		base += off
	}
	f.Start = base + uint64(startVal)
	switch {
	case f.Size == 0:
		return f, formatErr(sizeAt, field("func_size"), "empty function at %#x", f.Start)
	case f.Start > math.MaxUint64-uint64(f.Size):
		return f, formatErr(off, field("func_start"), "function %#x+%#x wraps around", f.Start, f.Size)
	case f.FREType() > 2:
		return f, formatErr(infoAt, field("info"), "FRE type %d", f.FREType())
	case f.PCMask() && f.RepSize == 0:
		return f, formatErr(repAt, field("rep_size"), "PCMASK FDE with a repeat size of 0")
	}
	rowsAt := p.freStart + uint64(freOff)
	if nrows > 0 && rowsAt >= p.freEnd {
		return f, formatErr(freOffAt, field("fres_off"), "rows at %#x past the FRE sub-section end %#x", rowsAt, p.freEnd)
	}
	if nrows > (p.freEnd-min(rowsAt, p.freEnd))/2 {
		return f, formatErr(nrowsAt, field("num_fres"), "%d rows cannot fit in the FRE sub-section", nrows)
	}
	if uint64(p.t.NumRows())+nrows > uint64(h.NumFREs) {
		return f, formatErr(nrowsAt, field("num_fres"), "rows exceed header.num_fres %d", h.NumFREs)
	}
	f.rows = uint32(p.t.NumRows())
	f.nrows = uint32(nrows)
	if err := p.decodeRows(i, &f, rowsAt); err != nil {
		p.t.truncateRows(f.rows)
		return f, err
	}
	return f, nil
}

// decodeRows decodes the nrows rows of FDE i starting at section offset off.
func (p *parser) decodeRows(i int, f *FDE, off uint64) error {
	startSize := uint64(1) << f.FREType()
	flex := p.t.Header.Version == Version3 && f.Type() == FDETypeFlex
	for j := uint32(0); j < f.nrows; j++ {
		// Named only on error: a Sprintf per row would dominate parsing.
		field := func(suffix string) string { return fmt.Sprintf("fde[%d].fre[%d]%s", i, j, suffix) }
		if off+startSize+1 > p.freEnd {
			return formatErr(off, field(""), "row past the FRE sub-section end %#x", p.freEnd)
		}
		var start uint32
		switch startSize {
		case 1:
			start = uint32(p.data[off])
		case 2:
			start = uint32(p.order.Uint16(p.data[off:]))
		default:
			start = p.order.Uint32(p.data[off:])
		}
		info := p.data[off+startSize]
		n := uint64(info>>1) & 0xf
		sizeCode := info >> 5 & 3
		if sizeCode == 3 {
			return formatErr(off+startSize, field(".info"), "data word size code 3")
		}
		wsize := uint64(1) << sizeCode
		end := off + startSize + 1 + n*wsize
		if end > p.freEnd {
			return formatErr(off, field(""), "%d data words of %d bytes run past the FRE sub-section end %#x", n, wsize, p.freEnd)
		}
		words := p.words[:n]
		for k := range words {
			at := p.data[off+startSize+1+uint64(k)*wsize:]
			switch wsize {
			case 1:
				words[k] = uint32(int32(int8(at[0])))
			case 2:
				words[k] = uint32(int32(int16(p.order.Uint16(at))))
			default:
				words[k] = p.order.Uint32(at)
			}
		}
		if j > 0 && start <= p.t.rowStart[len(p.t.rowStart)-1] {
			return formatErr(off, field(".start_addr"), "row start %#x does not increase", start)
		}
		if start > f.Size {
			return formatErr(off, field(".start_addr"), "row start %#x past the function size %#x", start, f.Size)
		}
		var r Row
		var err error
		if flex {
			r, err = p.flexRow(words, wsize)
		} else {
			r, err = p.defaultRow(info, words)
		}
		if err != nil {
			return formatErr(off+startSize, field(".info"), "%v", err)
		}
		r.Start = start
		r.Info = info
		p.t.addRow(r)
		off = end
	}
	return nil
}

// outermostRow is the rule of a row without data words: nothing can be
// recovered, RA is undefined.
func outermostRow() Row {
	return Row{CFA: Loc{Kind: LocUndefined}, RA: Loc{Kind: LocUndefined}}
}

// defaultRow applies the generic accessors of the SFrame spec: the
// header's fixed offsets, when non-zero, replace the corresponding data
// words; a word that is absent means "not saved".
func (p *parser) defaultRow(info uint8, w []uint32) (Row, error) {
	if len(w) == 0 {
		return outermostRow(), nil
	}
	a := p.t.arch
	base := a.RegFP()
	if info&1 != 0 {
		base = a.RegSP()
	}
	r := Row{CFA: Loc{Kind: LocReg, Reg: base, Off: int32(w[0])}}
	i := 1
	saved := func(fixed int8) Loc {
		switch {
		case fixed != 0:
			return Loc{Kind: LocCFA, Deref: true, Off: int32(fixed)}
		case i < len(w):
			i++
			return Loc{Kind: LocCFA, Deref: true, Off: int32(w[i-1])}
		}
		return Loc{Kind: LocSame}
	}
	r.RA = saved(p.t.Header.CFAFixedRAOffset)
	r.FP = saved(p.t.Header.CFAFixedFPOffset)
	if i < len(w) {
		return r, fmt.Errorf("%d data words, more than %v rows have", len(w), p.t.Header.ABI)
	}
	return r, nil
}

// flexRow decodes a V3 FLEX row: (control, offset) pairs for CFA, RA and
// FP, where a control word of 0 is a single padding word.
func (p *parser) flexRow(w []uint32, wsize uint64) (Row, error) {
	var r Row
	if len(w) < 2 {
		return r, fmt.Errorf("FLEX row with %d data words, no CFA rule", len(w))
	}
	if w[0]&1 == 0 {
		return r, fmt.Errorf("FLEX CFA rule %#x not based on a register", w[0])
	}
	var err error
	if r.CFA, err = flexLoc(w[0], w[1], wsize); err != nil {
		return r, err
	}
	i := 2
	rule := func(fixed int8) (loc Loc, pad bool, err error) {
		if i < len(w) && w[i] == 0 {
			i++
			pad = true
		} else if i+1 < len(w) {
			i += 2
			loc, err = flexLoc(w[i-2], w[i-1], wsize)
			return loc, false, err
		} else if i < len(w) {
			return loc, false, fmt.Errorf("FLEX rule %#x without an offset", w[i])
		}
		if fixed != 0 {
			return Loc{Kind: LocCFA, Deref: true, Off: int32(fixed)}, pad, nil
		}
		return Loc{Kind: LocSame}, pad, nil
	}
	if r.RA, r.padRA, err = rule(p.t.Header.CFAFixedRAOffset); err != nil {
		return r, err
	}
	if r.RA.Kind == LocCFA && !r.RA.Deref {
		return r, fmt.Errorf("FLEX RA rule CFA%+d without dereference", r.RA.Off)
	}
	if r.FP, r.padFP, err = rule(p.t.Header.CFAFixedFPOffset); err != nil {
		return r, err
	}
	if i != len(w) {
		return r, fmt.Errorf("%d FLEX data words left over", len(w)-i)
	}
	return r, nil
}

// flexLoc decodes a FLEX control word (reg<<3 | deref<<1 | reg_p) and its
// offset.
func flexLoc(ctl, off uint32, wsize uint64) (Loc, error) {
	if ctl&4 != 0 {
		return Loc{}, fmt.Errorf("FLEX control word %#x with reserved bit 2 set", ctl)
	}
	// Offsets are signed, in the row's word size; control words are not.
	var o int32
	switch wsize {
	case 1:
		o = int32(int8(off))
	case 2:
		o = int32(int16(off))
	default:
		o = int32(off)
	}
	l := Loc{Kind: LocCFA, Deref: ctl&2 != 0, Off: o}
	if ctl&1 != 0 {
		reg := ctl >> 3
		if reg > math.MaxUint8 {
			return l, fmt.Errorf("FLEX rule on DWARF register %d", reg)
		}
		l.Kind, l.Reg = LocReg, uint8(reg)
	}
	return l, nil
}

// order makes the FDEs sorted by start address: a section that says it is
// sorted must be, one that does not is sorted here.
func (t *Table) order() error {
	if t.Header.Flags&FlagFDESorted == 0 {
		slices.SortStableFunc(t.fdes, func(a, b FDE) int {
			switch {
			case a.Start < b.Start:
				return -1
			case a.Start > b.Start:
				return 1
			}
			return 0
		})
		return nil
	}
	for i := 1; i < len(t.fdes); i++ {
		if t.fdes[i].Start < t.fdes[i-1].Start {
			f := &t.fdes[i]
			return formatErr(uint64(f.Offset), t.fdeField(f, "func_start"), "function at %#x starts before the previous one at %#x, but header.flags says SFRAME_F_FDE_SORTED", f.Start, t.fdes[i-1].Start)
		}
	}
	return nil
}

// fdeField names a field of the parsed FDE f for an error, as
// "fde[INDEX].NAME" with the FDE's index in the section.
func (t *Table) fdeField(f *FDE, name string) string {
	first := uint64(headerSize) + uint64(t.Header.AuxHeaderLen) + uint64(t.Header.FDEOff)
	return fmt.Sprintf("fde[%d].%s", (uint64(f.Offset)-first)/t.Header.Version.fdeSize(), name)
}

// dropOverlaps removes every FDE whose range overlaps another's: which of
// the two describes the code cannot be known.
func (t *Table) dropOverlaps() {
	bad := make(map[int]bool)
	var maxEnd uint64
	maxAt := -1
	for i := range t.fdes {
		f := &t.fdes[i]
		if maxAt >= 0 && f.Start < maxEnd {
			bad[i], bad[maxAt] = true, true
		}
		if f.End() > maxEnd {
			maxEnd, maxAt = f.End(), i
		}
	}
	if len(bad) == 0 {
		return
	}
	kept := t.fdes[:0]
	for i, f := range t.fdes {
		if bad[i] {
			t.Errors = append(t.Errors, formatErr(uint64(f.Offset), t.fdeField(&f, "func_start"), "function [%#x, %#x) overlaps another", f.Start, f.End()))
			continue
		}
		kept = append(kept, f)
	}
	t.fdes = kept
}
