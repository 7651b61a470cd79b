package cfi

import (
	"encoding/binary"
	"fmt"
)

// Hdr is a parsed .eh_frame_hdr: where .eh_frame is and, when the linker
// wrote one, a table of (first PC, FDE address) pairs sorted by PC that
// finds a PC's FDE by binary search.
type Hdr struct {
	Version    uint8
	EHFramePtr uint64 // address of .eh_frame
	Count      uint64 // entries in the search table, 0 if there is none

	r         reader
	tableOff  uint64
	enc       PointerEncoding
	entrySize uint64 // bytes of one pair
	bases     Bases
	addrSize  uint8
}

// ParseHdr parses an .eh_frame_hdr section whose first byte is at address
// addr. Table pointers relative to DW_EH_PE_datarel are relative to addr.
func ParseHdr(data []byte, addr uint64, order binary.ByteOrder, addrSize uint8) (*Hdr, error) {
	if addrSize != 4 && addrSize != 8 {
		return nil, fmt.Errorf("cfi: address size %d, want 4 or 8", addrSize)
	}
	h := &Hdr{
		r:        reader{data: data, end: uint64(len(data)), order: order},
		bases:    Bases{Section: addr, Data: addr},
		addrSize: addrSize,
	}
	r := &h.r
	var err error
	if h.Version, err = r.u8("eh_frame_hdr.version"); err != nil {
		return nil, err
	}
	if h.Version != 1 {
		return nil, unsupportedErr(0, "eh_frame_hdr.version", "version %d", h.Version)
	}
	var encs [3]PointerEncoding
	for i, field := range []string{"eh_frame_hdr.eh_frame_ptr_enc", "eh_frame_hdr.fde_count_enc", "eh_frame_hdr.table_enc"} {
		b, err := r.u8(field)
		if err != nil {
			return nil, err
		}
		encs[i] = PointerEncoding(b)
		if err := checkEncoding(r.off-1, field, encs[i]); err != nil {
			return nil, err
		}
	}
	ptrOff := r.off
	ptr, indirect, err := r.pointer("eh_frame_hdr.eh_frame_ptr", encs[0], addrSize, &h.bases, 0)
	if err != nil {
		return nil, err
	}
	if indirect {
		return nil, unsupportedErr(ptrOff, "eh_frame_hdr.eh_frame_ptr", "indirect pointer")
	}
	h.EHFramePtr = ptr
	if encs[1] == PEOmit || encs[2] == PEOmit {
		return h, nil
	}
	countOff := r.off
	count, _, err := r.pointer("eh_frame_hdr.fde_count", encs[1], addrSize, &h.bases, 0)
	if err != nil {
		return nil, err
	}
	h.enc = encs[2]
	switch h.enc.format() {
	case PEUData4, PESData4:
		h.entrySize = 8
	case PEUData8, PESData8:
		h.entrySize = 16
	case PEAbsPtr:
		h.entrySize = 2 * uint64(addrSize)
	default:
		return nil, unsupportedErr(3, "eh_frame_hdr.table_enc", "%v has no fixed size to search", h.enc)
	}
	if h.enc.application() == PEAligned || h.enc&PEIndirect != 0 {
		return nil, unsupportedErr(3, "eh_frame_hdr.table_enc", "%v in a search table", h.enc)
	}
	if count > (r.end-r.off)/h.entrySize {
		return nil, formatErr(countOff, "eh_frame_hdr.fde_count", "%d entries of %d bytes do not fit in %d bytes", count, h.entrySize, r.end-r.off)
	}
	h.Count = count
	h.tableOff = r.off
	return h, nil
}

// Entry returns the first PC and the FDE address of search table entry i.
func (h *Hdr) Entry(i uint64) (pc, fde uint64, err error) {
	if i >= h.Count {
		return 0, 0, fmt.Errorf("cfi: eh_frame_hdr entry %d of %d", i, h.Count)
	}
	r := h.r
	r.off = h.tableOff + i*h.entrySize
	if pc, _, err = r.pointer("eh_frame_hdr.table.initial_loc", h.enc, h.addrSize, &h.bases, 0); err != nil {
		return 0, 0, err
	}
	fde, _, err = r.pointer("eh_frame_hdr.table.address", h.enc, h.addrSize, &h.bases, 0)
	return pc, fde, err
}

// Find returns the address of the FDE of the last table entry whose first
// PC is at most pc; the FDE may still end before pc. It reports false when
// pc is before every entry or there is no table. With the parsed
// .eh_frame at address ehFrame, the FDE is fr.FDEAt(fde - ehFrame); run
// Check once first, or a hostile table can point anywhere.
func (h *Hdr) Find(pc uint64) (fde uint64, ok bool, err error) {
	lo, hi := uint64(0), h.Count
	for lo < hi {
		m := lo + (hi-lo)/2
		start, _, err := h.Entry(m)
		if err != nil {
			return 0, false, err
		}
		if start <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0, false, nil
	}
	_, fde, err = h.Entry(lo - 1)
	return fde, err == nil, err
}

// Check validates the search table against the parsed .eh_frame at
// address ehFrame: the entries are sorted by first PC without duplicates,
// and each points to an FDE of fr that starts at that PC. Lookups through
// Find are only as good as this.
func (h *Hdr) Check(fr *Frame, ehFrame uint64) error {
	if h.EHFramePtr != ehFrame {
		return formatErr(4, "eh_frame_hdr.eh_frame_ptr", ".eh_frame at %#x, the section is at %#x", h.EHFramePtr, ehFrame)
	}
	var prev uint64
	for i := uint64(0); i < h.Count; i++ {
		pc, fde, err := h.Entry(i)
		if err != nil {
			return err
		}
		off := h.tableOff + i*h.entrySize
		if i > 0 && pc <= prev {
			return formatErr(off, "eh_frame_hdr.table.initial_loc", "entry %d at %#x does not follow %#x", i, pc, prev)
		}
		prev = pc
		f, ok := fr.FDEAt(fde - ehFrame)
		if fde < ehFrame || !ok {
			return formatErr(off, "eh_frame_hdr.table.address", "entry %d: no valid FDE at %#x", i, fde)
		}
		if f.Start != pc {
			return formatErr(off, "eh_frame_hdr.table.initial_loc", "entry %d at %#x, its FDE starts at %#x", i, pc, f.Start)
		}
	}
	return nil
}
