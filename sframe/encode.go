package sframe

import (
	"encoding/binary"
	"fmt"
	"math"
)

// encLayout is where the parts of an encoded section go.
type encLayout struct {
	fdeSize uint64
	freOff  uint64 // section offset of the FRE sub-section
	freLen  uint64
	// rowsAt[i] is the offset of FDE i's attribute record (V3) or
	// first row in the FRE sub-section.
	rowsAt []uint64
	nrows  int // rows written
	// rows holds the rows of one FDE at a time.
	rows []Row
}

// encodedRows returns the rows of f that version v can hold, in l.rows:
// V1 and V2 readers (binutils before 2.46) do not know the outermost-frame
// row without data words, so there its PCs become a gap.
func (t *Table) encodedRows(v Version, f *FDE, l *encLayout) []Row {
	l.rows = l.rows[:0]
	for k := range f.nrows {
		if r := t.row(f.rows + k); v == Version3 || !r.Outermost() {
			l.rows = append(l.rows, r)
		}
	}
	return l.rows
}

// layout sizes the section that Encode writes for version v.
func (t *Table) layout(v Version) (encLayout, error) {
	l := encLayout{fdeSize: v.fdeSize(), rowsAt: make([]uint64, len(t.fdes))}
	l.freOff = headerSize + uint64(len(t.fdes))*l.fdeSize
	for i := range t.fdes {
		f := &t.fdes[i]
		l.rowsAt[i] = l.freLen
		if v == Version3 {
			l.freLen += attrSize
		}
		startSize := uint64(1) << f.FREType()
		rows := t.encodedRows(v, f, &l)
		l.nrows += len(rows)
		for _, r := range rows {
			w, n, err := t.rowWords(&r)
			if err != nil {
				return l, fmt.Errorf("function at %#x, row +%#x: %w", f.Start, r.Start, err)
			}
			l.freLen += startSize + 1 + uint64(n)<<wordSizeCode(w[:n])
		}
	}
	if l.freOff+l.freLen > math.MaxUint32 {
		return l, fmt.Errorf("%d bytes of FREs: too many", l.freLen)
	}
	return l, nil
}

// Encode writes the table as an SFrame section of version v (1, 2 or 3)
// to be placed at address addr, as GNU ld writes linked sections: FDEs
// sorted (SFRAME_F_FDE_SORTED), start addresses relative to the section
// in V1 and V2 and to the start field (SFRAME_F_FDE_FUNC_START_PCREL) in
// V3, each FDE's rows with the smallest start and data word sizes that
// hold them, amd64 return addresses at the fixed CFA-8. V1 and V2 start
// addresses must be within 2 GiB of addr. V1 PCMASK FDEs must repeat
// every 16 bytes (V1 has no repeat size); the signal-trampoline bit
// exists in V3 only, and so do outermost-frame rows (RA undefined): in V1
// and V2 their PCs are left without a row. Rules SFrame DEFAULT rows cannot express (V3 FLEX
// rows of a parsed table) are errors wrapping ErrUnsupported.
func (t *Table) Encode(v Version, addr uint64) ([]byte, error) {
	if v < Version1 || v > Version3 {
		return nil, fmt.Errorf("sframe: encoding: %w %v", ErrUnsupported, v)
	}
	l, err := t.layout(v)
	if err != nil {
		return nil, fmt.Errorf("sframe: encoding: %w", err)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if t.BigEndian {
		order = binary.BigEndian
	}
	out := make([]byte, l.freOff+l.freLen)
	flags := FlagFDESorted
	if v == Version3 {
		flags |= FlagFDEFuncStartPCRel
	}
	order.PutUint16(out, magic)
	out[2], out[3], out[4] = byte(v), byte(flags), byte(t.Header.ABI)
	if t.arch == ArchAMD64 {
		out[6] = 0xf8 // RA at CFA-8
	}
	order.PutUint32(out[8:], uint32(len(t.fdes)))
	order.PutUint32(out[12:], uint32(l.nrows))
	order.PutUint32(out[16:], uint32(l.freLen))
	order.PutUint32(out[24:], uint32(l.freOff-headerSize))
	for i := range t.fdes {
		if err := t.encodeFDE(out, order, v, &l, i, addr); err != nil {
			return nil, fmt.Errorf("sframe: encoding: function at %#x: %w", t.fdes[i].Start, err)
		}
	}
	return out, nil
}

// encodeFDE writes FDE i and its rows.
func (t *Table) encodeFDE(out []byte, order binary.ByteOrder, v Version, l *encLayout, i int, addr uint64) error {
	f := &t.fdes[i]
	rows := t.encodedRows(v, f, l)
	at := headerSize + uint64(i)*l.fdeSize
	d := out[at:]
	info := f.Info &^ 0x40 // bit 6 is unused
	if v != Version3 {
		info &^= 0x80 // the signal bit is V3's
	}
	if v == Version1 && f.PCMask() && f.RepSize != 16 {
		return fmt.Errorf("%w: V1 PCMASK FDE repeating every %d bytes, not 16", ErrUnsupported, f.RepSize)
	}
	switch v {
	case Version1, Version2:
		rel := int64(f.Start - addr)
		if rel < math.MinInt32 || rel > math.MaxInt32 {
			return fmt.Errorf("start %#x more than 2 GiB from the section at %#x", f.Start, addr)
		}
		order.PutUint32(d, uint32(int32(rel)))
		order.PutUint32(d[4:], f.Size)
		order.PutUint32(d[8:], uint32(l.rowsAt[i]))
		order.PutUint32(d[12:], uint32(len(rows)))
		d[16] = info
		if v == Version2 {
			d[17] = f.RepSize
		}
	default:
		order.PutUint64(d, f.Start-(addr+at))
		order.PutUint32(d[8:], f.Size)
		order.PutUint32(d[12:], uint32(l.rowsAt[i]))
		if len(rows) > math.MaxUint16 {
			return fmt.Errorf("%d rows, more than a V3 FDE can have", len(rows))
		}
		a := out[l.freOff+l.rowsAt[i]:]
		order.PutUint16(a, uint16(len(rows)))
		a[2], a[3], a[4] = info, FDETypeDefault, f.RepSize
	}
	off := l.freOff + l.rowsAt[i]
	if v == Version3 {
		off += attrSize
	}
	startSize := uint64(1) << f.FREType()
	for _, r := range rows {
		if r.Start > math.MaxUint32>>(32-8*startSize) {
			return fmt.Errorf("row +%#x does not fit the FDE's %d-byte starts", r.Start, startSize)
		}
		switch startSize {
		case 1:
			out[off] = byte(r.Start)
		case 2:
			order.PutUint16(out[off:], uint16(r.Start))
		default:
			order.PutUint32(out[off:], r.Start)
		}
		off += startSize
		info, w, n, err := t.encodeRow(&r)
		if err != nil {
			return err
		}
		out[off] = info
		off++
		code := info >> 5 & 3
		for _, x := range w[:n] {
			switch code {
			case 0:
				out[off] = byte(int8(x))
			case 1:
				order.PutUint16(out[off:], uint16(int16(x)))
			default:
				order.PutUint32(out[off:], uint32(x))
			}
			off += 1 << code
		}
	}
	return nil
}
