package sframe

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Function is one function of a table that NewTable builds: its range,
// its FDE attributes and its rows.
type Function struct {
	Start uint64
	Size  uint32
	// RepSize, when not 0, makes the FDE a PCMASK one: the rows repeat
	// every RepSize bytes, as in a run of PLT entries.
	RepSize uint8
	PACKeyB bool // aarch64: return addresses signed with the B key
	Signal  bool // a signal trampoline (kept in V3 encodings only)
	// Rows are sorted by Start, each below Size (and RepSize). A row's CFA is SP or FP
	// plus an offset; its RA is at a CFA offset (on amd64 at CFA-8,
	// where the ABI keeps it) or, on aarch64, LocSame (still in the link
	// register); its FP is LocSame or at a CFA offset. A row whose RA is
	// LocUndefined marks the outermost frame. Of Row.Info only bit 7
	// (RA PAC-signed) is used; NewTable computes the rest.
	Rows []Row
}

// NewTable builds a table from rules found elsewhere, for example
// synthesized from .eh_frame, so that they can be looked up, unwound with,
// dumped and encoded (Table.Encode) like a parsed section. The table
// reads as if it were the V3 section Encode would write at address 0.
// Rules SFrame cannot express are errors wrapping ErrUnsupported.
func NewTable(abi ABI, funcs []Function) (*Table, error) {
	if abi != ABIAMD64LE && abi != ABIAArch64LE && abi != ABIAArch64BE {
		return nil, fmt.Errorf("sframe: building a table: %w ABI %v", ErrUnsupported, abi)
	}
	t := &Table{
		Header: Header{
			Version: Version3,
			Flags:   FlagFDESorted | FlagFDEFuncStartPCRel,
			ABI:     abi,
		},
		BigEndian: abi == ABIAArch64BE,
		arch:      abi.Arch(),
	}
	if t.arch == ArchAMD64 {
		t.Header.CFAFixedRAOffset = -8
	}
	sorted := slices.Clone(funcs)
	slices.SortStableFunc(sorted, func(a, b Function) int { return cmp.Compare(a.Start, b.Start) })
	nrows := 0
	for _, f := range sorted {
		nrows += len(f.Rows)
	}
	if len(sorted) > math.MaxUint32 || nrows > math.MaxUint32 {
		return nil, fmt.Errorf("sframe: building a table: %d functions, %d rows: too many", len(sorted), nrows)
	}
	t.fdes = make([]FDE, 0, len(sorted))
	t.rowStart = make([]uint32, 0, nrows)
	t.rowRule = make([]uint32, 0, nrows)
	t.interned = newInterner()
	for i := range sorted {
		f := &sorted[i]
		if err := t.addFunction(f); err != nil {
			return nil, fmt.Errorf("sframe: building a table: function at %#x: %w", f.Start, err)
		}
		if i > 0 && f.Start < sorted[i-1].Start+uint64(sorted[i-1].Size) {
			return nil, fmt.Errorf("sframe: building a table: function at %#x overlaps the one at %#x", f.Start, sorted[i-1].Start)
		}
	}
	t.Header.NumFDEs = uint32(len(t.fdes))
	t.Header.NumFREs = uint32(t.NumRows())
	lay, err := t.layout(Version3)
	if err != nil {
		return nil, fmt.Errorf("sframe: building a table: %w", err)
	}
	t.Header.FRELen = uint32(lay.freLen)
	t.Header.FREOff = uint32(lay.freOff - headerSize)
	t.index()
	return t, nil
}

func (t *Table) addFunction(f *Function) error {
	switch {
	case f.Size == 0:
		return fmt.Errorf("empty function")
	case f.Start > math.MaxUint64-uint64(f.Size):
		return fmt.Errorf("function of %d bytes wraps around", f.Size)
	case len(f.Rows) > math.MaxUint16:
		return fmt.Errorf("%d rows, more than an FDE can have", len(f.Rows))
	}
	fde := FDE{Start: f.Start, Size: f.Size, RepSize: f.RepSize, Offset: uint32(headerSize + len(t.fdes)*int(Version3.fdeSize()))}
	if f.RepSize != 0 {
		fde.Info |= 0x10
	}
	if f.PACKeyB {
		fde.Info |= 0x20
	}
	if f.Signal {
		fde.Info |= 0x80
	}
	fde.rows = uint32(t.NumRows())
	fde.nrows = uint32(len(f.Rows))
	limit := f.Size
	if f.RepSize != 0 {
		limit = min(limit, uint32(f.RepSize))
	}
	var last uint32
	for j, r := range f.Rows {
		if j > 0 && r.Start <= f.Rows[j-1].Start {
			return fmt.Errorf("row %d at +%#x does not follow +%#x", j, r.Start, f.Rows[j-1].Start)
		}
		if r.Start >= limit {
			return fmt.Errorf("row %d at +%#x past the function or repeat size %d", j, r.Start, limit)
		}
		if r.Outermost() {
			r = Row{Start: r.Start, Info: r.Info & 0x80, CFA: Loc{Kind: LocUndefined}, RA: Loc{Kind: LocUndefined}}
		}
		info, _, _, err := t.encodeRow(&r)
		if err != nil {
			return fmt.Errorf("row %d at +%#x: %w", j, r.Start, err)
		}
		r.Info = info
		t.addRow(r)
		last = r.Start
	}
	switch {
	case last > math.MaxUint16:
		fde.Info |= 2
	case last > math.MaxUint8:
		fde.Info |= 1
	}
	t.fdes = append(t.fdes, fde)
	return nil
}

// rowWords returns the data words of a DEFAULT row for the table's ABI
// (CFA offset, then on aarch64 the RA offset, then the FP offset) and
// their number, or why the row cannot be a DEFAULT one.
func (t *Table) rowWords(r *Row) (w [3]int32, n int, err error) {
	if r.Outermost() {
		return w, 0, nil
	}
	a := t.arch
	if r.CFA.Kind != LocReg || r.CFA.Deref || (r.CFA.Reg != a.RegSP() && r.CFA.Reg != a.RegFP()) {
		return w, 0, fmt.Errorf("%w CFA rule %v on register %d", ErrUnsupported, r.CFA.Kind, r.CFA.Reg)
	}
	w[0], n = r.CFA.Off, 1
	savedAt := func(l Loc) bool { return l.Kind == LocCFA && l.Deref }
	raFixed := int32(t.Header.CFAFixedRAOffset)
	switch {
	case raFixed != 0:
		if !savedAt(r.RA) || r.RA.Off != raFixed {
			return w, 0, fmt.Errorf("%w RA rule %v%+d with the RA fixed at CFA%+d", ErrUnsupported, r.RA.Kind, r.RA.Off, raFixed)
		}
	case savedAt(r.RA):
		w[n], n = r.RA.Off, n+1
	case r.RA.Kind != LocSame || a != ArchARM64:
		return w, 0, fmt.Errorf("%w RA rule %v", ErrUnsupported, r.RA.Kind)
	}
	switch {
	case savedAt(r.FP):
		if raFixed == 0 && n == 1 {
			// The FP word follows the RA word; there is none.
			return w, 0, fmt.Errorf("%w FP saved while RA is in the link register", ErrUnsupported)
		}
		w[n], n = r.FP.Off, n+1
	case r.FP.Kind != LocSame:
		return w, 0, fmt.Errorf("%w FP rule %v", ErrUnsupported, r.FP.Kind)
	}
	return w, n, nil
}

// encodeRow returns the FRE info byte and the data words of a DEFAULT
// row: only the PAC bit (7) of r.Info is kept.
func (t *Table) encodeRow(r *Row) (info uint8, w [3]int32, n int, err error) {
	if w, n, err = t.rowWords(r); err != nil {
		return 0, w, 0, err
	}
	info = r.Info&0x80 | wordSizeCode(w[:n])<<5 | uint8(n)<<1
	if r.CFA.Kind == LocReg && r.CFA.Reg == t.arch.RegSP() {
		info |= 1
	}
	return info, w, n, nil
}

// wordSizeCode returns the FRE info size code of the smallest data word
// size that holds every word: 0 (1 byte), 1 (2 bytes) or 2 (4 bytes).
func wordSizeCode(w []int32) uint8 {
	code := uint8(0)
	for _, v := range w {
		switch {
		case v < math.MinInt16 || v > math.MaxInt16:
			return 2
		case v < math.MinInt8 || v > math.MaxInt8:
			code = 1
		}
	}
	return code
}
