package cfi

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Kind says which of the two CFI sections a Section is; they differ in how
// a CIE is recognized and how an FDE points to its CIE.
type Kind uint8

// Section kinds.
const (
	// EHFrame is .eh_frame: a CIE has id 0, an FDE's CIE pointer is
	// the distance back from the pointer field to its CIE.
	EHFrame Kind = iota + 1
	// DebugFrame is .debug_frame: a CIE has id 0xffffffff (all ones in
	// 64-bit DWARF), an FDE's CIE pointer is a section offset.
	DebugFrame
)

func (k Kind) String() string {
	switch k {
	case EHFrame:
		return ".eh_frame"
	case DebugFrame:
		return ".debug_frame"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Section is a CFI section to parse and what its pointers are relative to.
type Section struct {
	Kind  Kind
	Data  []byte
	Bases Bases // Bases.Section is the section's address (sh_addr)
	Order binary.ByteOrder
	// AddrSize is the target's address size, 4 or 8 bytes.
	AddrSize uint8
}

// CIE is a Common Information Entry: what the FDEs that point to it share.
type CIE struct {
	Offset       uint64 // of the entry's length field in the section
	Version      uint8
	Augmentation string
	AddrSize     uint8 // from a version 4 CIE, else the section's
	CodeAlign    uint64
	DataAlign    int64
	RAReg        uint64 // the return address column
	FDEEncoding  PointerEncoding
	LSDAEncoding PointerEncoding
	// Personality is the personality routine's address, or with
	// PersonalityIndirect the address of a pointer to it.
	Personality         uint64
	PersonalityIndirect bool
	// SignalFrame ("S") marks a signal trampoline: its caller's PC is
	// not a return address, so it needs no -1 adjustment.
	SignalFrame bool
	// PACKeyB ("B", aarch64) says return addresses are signed with the
	// B key rather than the A key.
	PACKeyB bool
	// Instructions are the initial instructions, run before every FDE's;
	// InstructionsOff is their section offset.
	Instructions    []byte
	InstructionsOff uint64
	// Order is the byte order of the section the CIE is in.
	Order binary.ByteOrder
	// augData says FDEs carry an augmentation data length ("z").
	augData bool
}

// FDE is a Frame Description Entry: the unwind rules of one range of PCs.
type FDE struct {
	Offset uint64 // of the entry's length field in the section
	CIE    *CIE
	Start  uint64 // first PC
	Size   uint64 // number of bytes of code covered
	// LSDA is the language-specific data area's address, 0 if none.
	LSDA            uint64
	Instructions    []byte
	InstructionsOff uint64
}

// End returns the address after the last PC the FDE covers.
func (f *FDE) End() uint64 { return f.Start + f.Size }

// Frame is a parsed CFI section.
type Frame struct {
	Kind Kind
	// FDEs are the valid FDEs in section order.
	FDEs []FDE
	// Errors lists the entries left out and why, one *FormatError each;
	// a broken length field, which ends the parse, is the last.
	Errors []error
}

// FDEAt returns the FDE whose entry starts at section offset off.
func (fr *Frame) FDEAt(off uint64) (*FDE, bool) {
	lo, hi := 0, len(fr.FDEs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if fr.FDEs[m].Offset < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(fr.FDEs) && fr.FDEs[lo].Offset == off {
		return &fr.FDEs[lo], true
	}
	return nil, false
}

// parser holds the state of one Parse.
type parser struct {
	s    *Section
	cies map[uint64]cieResult
}

type cieResult struct {
	cie *CIE
	err error
}

// entry is the frame of a CIE or FDE: where its body is and its id.
type entry struct {
	off     uint64 // of the length field
	idOff   uint64 // of the id field
	end     uint64 // after the entry
	id      uint64
	dwarf64 bool
}

// Parse reads every CIE and FDE of a section. It fails only when the
// Section itself is unusable; malformed entries are reported in
// Frame.Errors.
func Parse(s Section) (*Frame, error) {
	if s.AddrSize != 4 && s.AddrSize != 8 {
		return nil, fmt.Errorf("cfi: address size %d, want 4 or 8", s.AddrSize)
	}
	if s.Kind != EHFrame && s.Kind != DebugFrame {
		return nil, fmt.Errorf("cfi: unknown section kind %d", s.Kind)
	}
	if s.Order == nil {
		return nil, fmt.Errorf("cfi: no byte order")
	}
	p := &parser{s: &s, cies: make(map[uint64]cieResult)}
	fr := &Frame{Kind: s.Kind, FDEs: make([]FDE, 0, p.countFDEs())}
	// Every entry takes at least 4 bytes, and resync moves on by 4 at
	// least, so the loop ends.
	for off := uint64(0); off < uint64(len(s.Data)); {
		e, err := p.entry(off)
		if err != nil {
			fr.Errors = append(fr.Errors, err)
			off = p.resync(off)
			continue
		}
		if e.end == 0 { // .eh_frame's zero terminator
			break
		}
		off = e.end
		if e.idOff == 0 { // .debug_frame padding
			continue
		}
		if e.isCIE(s.Kind) {
			if _, err := p.cie(e.off); err != nil {
				fr.Errors = append(fr.Errors, err)
			}
			continue
		}
		f, err := p.fde(e)
		if err != nil {
			fr.Errors = append(fr.Errors, err)
			continue
		}
		fr.FDEs = append(fr.FDEs, f)
	}
	return fr, nil
}

// countFDEs counts the entries before the first malformed one that are
// not CIEs, reading only their lengths and ids: the FDEs Parse will keep,
// but for those it finds malformed. Growing the list instead would copy a
// large binary's (libLLVM's 129,000 FDEs of 72 bytes) a dozen times.
// Every entry takes at least 4 bytes, so the count is bounded by the
// section's size.
func (p *parser) countFDEs() int {
	n := 0
	for off := uint64(0); off < uint64(len(p.s.Data)); {
		e, err := p.entry(off)
		if err != nil || e.end == 0 {
			break
		}
		off = e.end
		if e.idOff != 0 && !e.isCIE(p.s.Kind) {
			n++
		}
	}
	return n
}

// entry reads the length and id of the entry at off. An entry of length 0
// is the .eh_frame terminator (end 0) or, in .debug_frame, 4 bytes of
// padding (no id).
func (p *parser) entry(off uint64) (entry, error) {
	r := p.reader(off, uint64(len(p.s.Data)))
	e := entry{off: off}
	n32, err := r.u32("entry.length")
	if err != nil {
		return e, err
	}
	length := uint64(n32)
	if n32 == 0xffffffff {
		e.dwarf64 = true
		if length, err = r.u64("entry.length64"); err != nil {
			return e, err
		}
	}
	if length == 0 {
		if p.s.Kind == DebugFrame {
			e.end = r.off // idOff stays 0: no id, padding
		}
		return e, nil
	}
	if length > r.end-r.off {
		return e, formatErr(off, "entry.length", "entry of %d bytes runs past the section's end %#x", length, r.end)
	}
	e.idOff = r.off
	e.end = r.off + length
	r.end = e.end
	if e.dwarf64 {
		e.id, err = r.u64("entry.id")
	} else {
		var id uint32
		id, err = r.u32("entry.id")
		e.id = uint64(id)
	}
	return e, err
}

func (e *entry) isCIE(k Kind) bool {
	if k == EHFrame {
		return e.id == 0
	}
	if e.dwarf64 {
		return e.id == math.MaxUint64
	}
	return e.id == math.MaxUint32
}

// bodyOff is the offset of the first byte after the id field.
func (e *entry) bodyOff() uint64 {
	if e.dwarf64 {
		return e.idOff + 8
	}
	return e.idOff + 4
}

func (p *parser) reader(off, end uint64) *reader {
	return &reader{data: p.s.Data, off: off, end: end, order: p.s.Order}
}

// cie returns the CIE whose entry starts at off, parsing it the first time.
func (p *parser) cie(off uint64) (*CIE, error) {
	if c, ok := p.cies[off]; ok {
		return c.cie, c.err
	}
	c, err := p.parseCIE(off)
	p.cies[off] = cieResult{c, err}
	return c, err
}

func (p *parser) parseCIE(off uint64) (*CIE, error) {
	e, err := p.entry(off)
	if err != nil {
		return nil, err
	}
	if e.end == 0 || !e.isCIE(p.s.Kind) {
		return nil, formatErr(off, "cie", "entry is not a CIE")
	}
	r := p.reader(e.bodyOff(), e.end)
	c := &CIE{Offset: off, AddrSize: p.s.AddrSize, Order: p.s.Order, FDEEncoding: PEAbsPtr, LSDAEncoding: PEOmit}
	if c.Version, err = r.u8("cie.version"); err != nil {
		return nil, err
	}
	switch {
	case c.Version == 1 || c.Version == 3:
	case c.Version == 4 && p.s.Kind == DebugFrame:
	default:
		return nil, unsupportedErr(r.off-1, "cie.version", "version %d in %v", c.Version, p.s.Kind)
	}
	augOff := r.off
	if c.Augmentation, err = r.cstring("cie.augmentation"); err != nil {
		return nil, err
	}
	if c.Version == 4 {
		if c.AddrSize, err = r.u8("cie.address_size"); err != nil {
			return nil, err
		}
		if c.AddrSize != 4 && c.AddrSize != 8 {
			return nil, formatErr(r.off-1, "cie.address_size", "address size %d", c.AddrSize)
		}
		seg, err := r.u8("cie.segment_selector_size")
		if err != nil {
			return nil, err
		}
		if seg != 0 {
			return nil, unsupportedErr(r.off-1, "cie.segment_selector_size", "segment selectors of %d bytes", seg)
		}
	}
	if c.CodeAlign, err = r.uleb("cie.code_alignment_factor"); err != nil {
		return nil, err
	}
	if c.DataAlign, err = r.sleb("cie.data_alignment_factor"); err != nil {
		return nil, err
	}
	if c.Version == 1 {
		ra, err := r.u8("cie.return_address_register")
		if err != nil {
			return nil, err
		}
		c.RAReg = uint64(ra)
	} else if c.RAReg, err = r.uleb("cie.return_address_register"); err != nil {
		return nil, err
	}
	if err := p.augmentation(c, r, augOff); err != nil {
		return nil, err
	}
	c.InstructionsOff = r.off
	c.Instructions = p.s.Data[r.off:e.end]
	return c, nil
}

// augmentation reads the augmentation data that the augmentation string
// announces.
func (p *parser) augmentation(c *CIE, r *reader, augOff uint64) error {
	aug := c.Augmentation
	if aug == "" {
		return nil
	}
	if !strings.HasPrefix(aug, "z") {
		return unsupportedErr(augOff, "cie.augmentation", "augmentation %q without 'z'", aug)
	}
	c.augData = true
	data, err := r.block("cie.augmentation_data")
	if err != nil {
		return err
	}
	dataOff := r.off - uint64(len(data))
	ar := &reader{data: p.s.Data, off: dataOff, end: r.off, order: p.s.Order}
	for i := 1; i < len(aug); i++ {
		switch aug[i] {
		case 'L':
			enc, err := ar.u8("cie.lsda_encoding")
			if err != nil {
				return err
			}
			c.LSDAEncoding = PointerEncoding(enc)
			if err := checkEncoding(ar.off-1, "cie.lsda_encoding", c.LSDAEncoding); err != nil {
				return err
			}
		case 'R':
			enc, err := ar.u8("cie.fde_encoding")
			if err != nil {
				return err
			}
			c.FDEEncoding = PointerEncoding(enc)
			if err := checkEncoding(ar.off-1, "cie.fde_encoding", c.FDEEncoding); err != nil {
				return err
			}
			if c.FDEEncoding == PEOmit {
				return formatErr(ar.off-1, "cie.fde_encoding", "FDE addresses omitted")
			}
		case 'P':
			enc, err := ar.u8("cie.personality_encoding")
			if err != nil {
				return err
			}
			pe := PointerEncoding(enc)
			if err := checkEncoding(ar.off-1, "cie.personality_encoding", pe); err != nil {
				return err
			}
			if pe == PEOmit {
				continue
			}
			if c.Personality, c.PersonalityIndirect, err = ar.pointer("cie.personality", pe, c.AddrSize, &p.s.Bases, 0); err != nil {
				return err
			}
		case 'S':
			c.SignalFrame = true
		case 'B':
			c.PACKeyB = true
		case 'G':
			// aarch64 MTE: the frame's stack is tagged. No bearing
			// on where registers are.
		default:
			return unsupportedErr(augOff+uint64(i), "cie.augmentation", "augmentation %q: unknown '%c'", aug, aug[i])
		}
	}
	return nil
}

// cieOffset returns where the CIE of the FDE e starts.
func (p *parser) cieOffset(e entry) (uint64, error) {
	cieOff := e.id
	if p.s.Kind == EHFrame {
		if e.id > e.idOff {
			return 0, formatErr(e.idOff, "fde.cie_pointer", "CIE pointer %#x points before the section", e.id)
		}
		cieOff = e.idOff - e.id
	}
	if cieOff >= uint64(len(p.s.Data)) {
		return 0, formatErr(e.idOff, "fde.cie_pointer", "CIE at %#x past the section's end", cieOff)
	}
	return cieOff, nil
}

// resync returns where reading can go on after the entry at off, whose
// length field cannot be trusted: the next offset, on the 4-byte grid
// entries are aligned to, where an entry fits in the section and is a CIE
// that parses or an FDE of a CIE that did. One damaged entry then costs
// only itself, not every entry after it. Each offset is tried once, with a
// map lookup or a CIE parse (cached), so resync ends in linear time.
func (p *parser) resync(off uint64) uint64 {
	for next := off + 4; next < uint64(len(p.s.Data)); next += 4 {
		e, err := p.entry(next)
		if err != nil || e.end == 0 || e.idOff == 0 {
			continue
		}
		if e.isCIE(p.s.Kind) {
			if _, err := p.cie(next); err == nil {
				return next
			}
			continue
		}
		if cieOff, err := p.cieOffset(e); err == nil {
			if c, ok := p.cies[cieOff]; ok && c.err == nil {
				return next
			}
		}
	}
	return uint64(len(p.s.Data))
}

func (p *parser) fde(e entry) (FDE, error) {
	f := FDE{Offset: e.off}
	cieOff, err := p.cieOffset(e)
	if err != nil {
		return f, err
	}
	c, err := p.cie(cieOff)
	if err != nil {
		return f, fmt.Errorf("cfi: FDE at %#x: %w", e.off, err)
	}
	f.CIE = c
	r := p.reader(e.bodyOff(), e.end)
	enc := c.FDEEncoding
	if p.s.Kind == DebugFrame && !c.augData {
		enc = PEAbsPtr
	}
	at := r.off
	start, indirect, err := r.pointer("fde.pc_begin", enc, c.AddrSize, &p.s.Bases, 0)
	if err != nil {
		return f, err
	}
	if indirect {
		return f, unsupportedErr(at, "fde.pc_begin", "indirect start address")
	}
	size, err := r.pointerValue("fde.pc_range", enc.format(), c.AddrSize)
	if err != nil {
		return f, err
	}
	if c.AddrSize == 4 {
		size &= 0xffffffff
	}
	limit := uint64(math.MaxUint64)
	if c.AddrSize == 4 {
		limit = math.MaxUint32
	}
	if start > limit-size {
		return f, formatErr(at, "fde.pc_range", "range %#x+%#x wraps around", start, size)
	}
	f.Start, f.Size = start, size
	if c.augData {
		data, err := r.block("fde.augmentation_data")
		if err != nil {
			return f, err
		}
		if c.LSDAEncoding != PEOmit && len(data) > 0 {
			ar := p.reader(r.off-uint64(len(data)), r.off)
			if f.LSDA, _, err = ar.pointer("fde.lsda", c.LSDAEncoding, c.AddrSize, &p.s.Bases, f.Start); err != nil {
				return f, err
			}
		}
	}
	f.InstructionsOff = r.off
	f.Instructions = p.s.Data[r.off:e.end]
	return f, nil
}
