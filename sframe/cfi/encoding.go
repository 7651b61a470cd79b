package cfi

import "fmt"

// PointerEncoding is a DW_EH_PE_* byte: how an address in .eh_frame or
// .eh_frame_hdr is stored (the low nibble: its format) and what it is
// relative to (bits 4..6), with bit 7 for an indirect pointer.
type PointerEncoding uint8

// Pointer encodings (LSB "DWARF Extensions" of the Linux Standard Base).
const (
	PEAbsPtr  PointerEncoding = 0x00
	PEULEB128 PointerEncoding = 0x01
	PEUData2  PointerEncoding = 0x02
	PEUData4  PointerEncoding = 0x03
	PEUData8  PointerEncoding = 0x04
	PESLEB128 PointerEncoding = 0x09
	PESData2  PointerEncoding = 0x0a
	PESData4  PointerEncoding = 0x0b
	PESData8  PointerEncoding = 0x0c

	PEPCRel   PointerEncoding = 0x10
	PETextRel PointerEncoding = 0x20
	PEDataRel PointerEncoding = 0x30
	PEFuncRel PointerEncoding = 0x40
	PEAligned PointerEncoding = 0x50

	PEIndirect PointerEncoding = 0x80
	PEOmit     PointerEncoding = 0xff
)

func (e PointerEncoding) format() PointerEncoding { return e & 0x0f }
func (e PointerEncoding) application() PointerEncoding {
	return e & 0x70
}

func (e PointerEncoding) String() string {
	if e == PEOmit {
		return "DW_EH_PE_omit"
	}
	return fmt.Sprintf("DW_EH_PE_%#02x", uint8(e))
}

// Bases are the addresses that relative pointer encodings add to a value.
type Bases struct {
	// Section is the address of the section's first byte: the base of
	// DW_EH_PE_pcrel (with the field's offset) and DW_EH_PE_aligned.
	Section uint64
	// Text and Data are the bases of DW_EH_PE_textrel and
	// DW_EH_PE_datarel (for .eh_frame_hdr, Data is its own address).
	Text, Data uint64
}

// pointer reads an address stored with encoding enc. fn is the function's
// start, the base of DW_EH_PE_funcrel (0 while reading the start itself).
// indirect reports DW_EH_PE_indirect: the result is then the address of
// the pointer, which only the process's memory can resolve.
func (r *reader) pointer(field string, enc PointerEncoding, addrSize uint8, b *Bases, fn uint64) (v uint64, indirect bool, err error) {
	at := r.off
	if enc == PEOmit {
		return 0, false, formatErr(at, field, "omitted pointer where one is required")
	}
	if enc.application() == PEAligned {
		// The value is an absolute pointer at the next address-size
		// boundary of the target address space.
		addr := b.Section + r.off
		if pad := (uint64(addrSize) - addr%uint64(addrSize)) % uint64(addrSize); pad > 0 {
			if _, err := r.take(field, pad); err != nil {
				return 0, false, err
			}
		}
		at = r.off
	}
	v, err = r.pointerValue(field, enc.format(), addrSize)
	if err != nil {
		return 0, false, err
	}
	switch enc.application() {
	case 0, PEAligned:
	case PEPCRel:
		v += b.Section + at
	case PETextRel:
		v += b.Text
	case PEDataRel:
		v += b.Data
	case PEFuncRel:
		v += fn
	default:
		return 0, false, formatErr(at, field, "pointer encoding %v: unknown application %#x", enc, uint8(enc.application()))
	}
	if addrSize == 4 {
		v &= 0xffffffff
	}
	return v, enc&PEIndirect != 0, nil
}

// pointerValue reads the stored value of a pointer: sign-extended for the
// signed formats.
func (r *reader) pointerValue(field string, format PointerEncoding, addrSize uint8) (uint64, error) {
	switch format {
	case PEAbsPtr:
		return r.uint(field, addrSize)
	case PEULEB128:
		return r.uleb(field)
	case PEUData2:
		return r.uint(field, 2)
	case PEUData4:
		return r.uint(field, 4)
	case PEUData8:
		return r.uint(field, 8)
	case PESLEB128:
		v, err := r.sleb(field)
		return uint64(v), err
	case PESData2:
		v, err := r.u16(field)
		return uint64(int64(int16(v))), err
	case PESData4:
		v, err := r.u32(field)
		return uint64(int64(int32(v))), err
	case PESData8:
		return r.u64(field)
	}
	return 0, formatErr(r.off, field, "unknown pointer format %#x", uint8(format))
}

// checkEncoding rejects an encoding byte no pointer can be read with, at
// the point it is declared rather than where it is first used.
func checkEncoding(off uint64, field string, enc PointerEncoding) error {
	if enc == PEOmit {
		return nil
	}
	switch enc.format() {
	case PEAbsPtr, PEULEB128, PEUData2, PEUData4, PEUData8, PESLEB128, PESData2, PESData4, PESData8:
	default:
		return formatErr(off, field, "unknown pointer format in %v", enc)
	}
	if enc.application() > PEAligned {
		return formatErr(off, field, "unknown pointer application in %v", enc)
	}
	return nil
}
